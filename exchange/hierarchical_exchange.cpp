// The two-level exchange: node layout, the node and cross-node communicators, and the three steps.
#include "exchange/hierarchical_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "comm/buffer_ops.h"
#include "framework/core/float_env.h"
#include "quant/method.h"

namespace qtrain {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

NodeLayout node_layout(Communicator& world, int64_t ranks_per_node) {
  const int P = world.size(), me = world.rank();
  if (ranks_per_node > 0 && P % ranks_per_node != 0)
    input_error("communication.ranks_per_node: {} ranks do not split into nodes of {}", P, ranks_per_node);
  const int color = ranks_per_node > 0 ? static_cast<int>(me / ranks_per_node) : world.node_color();
  const std::vector<uint64_t> colors = world.all_gather_u64(static_cast<uint64_t>(color));
  std::map<uint64_t, int> ranks_in;  // color -> ranks; colors are the nodes' lowest ranks, so ordered
  for (uint64_t c : colors) ++ranks_in[c];
  NodeLayout l;
  l.nodes = static_cast<int>(ranks_in.size());
  l.ranks_per_node = ranks_in.begin()->second;
  for (const auto& [c, n] : ranks_in)
    if (n != l.ranks_per_node)
      input_error(
          "communication.hierarchy: the node of rank {} holds {} ranks, the node of rank {} {}; the two-level "
          "exchange needs the same number of ranks on every node (or set hierarchy: flat)",
          ranks_in.begin()->first, l.ranks_per_node, c, n);
  l.node = static_cast<int>(std::distance(ranks_in.begin(), ranks_in.find(colors[static_cast<size_t>(me)])));
  for (int r = 0; r < me; ++r)
    l.local_rank += colors[static_cast<size_t>(r)] == colors[static_cast<size_t>(me)] ? 1 : 0;
  return l;
}

bool wants_two_levels(Communicator& world, Device device, const ExchangeConfig& config,
                      const QuantizationConfig& quantization, const std::vector<ExchangeTensor>& tensors,
                      NodeLayout& layout) {
  if (config.hierarchy == "flat" || world.size() == 1) return false;
  std::string unsuited;  // a method the two levels cannot carry
  for (const ExchangeTensor& x : tensors) {
    const QuantMethodInfo& m = method_info(quantization.resolve(x.layer_name, x.layer_type, x.numel).method);
    if (!m.payload || m.combine != QuantCombine::sum) unsuited = m.name;
  }
  if (config.hierarchy == "two_level" && !unsuited.empty())
    input_error(
        "communication.hierarchy: two_level sums each node's gradients first, which {} cannot follow (its "
        "result is not a sum of decoded payloads); use hierarchy: flat",
        unsuited);
  const bool possible = world.has_subgroups() && unsuited.empty();
  if (config.hierarchy == "auto" && !possible) return false;
  if (!possible)
    input_error(
        "communication.hierarchy: two_level needs a communicator with subgroups (backend mpi or nccl); this "
        "run's ranks on {} use {} (set hierarchy: flat or auto)",
        device.str(), world.name());
  layout = node_layout(world, config.ranks_per_node);
  return config.hierarchy == "two_level" || (layout.nodes > 1 && layout.ranks_per_node > 1);
}

namespace {

// The parts + 1 cuts of the arena into parts of about equal size. A cut inside a tensor moves back
// to a multiple of that tensor's stripe unit (whole columns for the per-column methods).
std::vector<int64_t> arena_cuts(const std::vector<ExchangeTensor>& tensors, const std::vector<int64_t>& units,
                                int parts) {
  int64_t end = 0;
  for (const ExchangeTensor& x : tensors) end = std::max(end, x.offset + x.numel);
  std::vector<int64_t> cuts(static_cast<size_t>(parts) + 1, 0);
  for (int p = 1; p < parts; ++p) {
    int64_t c = end * p / parts;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const ExchangeTensor& x = tensors[t];
      if (c > x.offset && c < x.offset + x.numel) c = x.offset + (c - x.offset) / units[t] * units[t];
    }
    cuts[static_cast<size_t>(p)] = std::max(c, cuts[static_cast<size_t>(p) - 1]);
  }
  cuts[static_cast<size_t>(parts)] = end;
  return cuts;
}

}  // namespace

HierarchicalExchange::HierarchicalExchange(Communicator& world, Device device, uint64_t seed,
                                           const ExchangeConfig& config, const QuantizationConfig& quantization,
                                           const std::vector<ExchangeTensor>& tensors, const NodeLayout& layout)
    : device_(device), config_(config), layout_(layout), world_size_(world.size()), tensors_(tensors) {
  const int L = layout_.ranks_per_node, me = layout_.local_rank;
  // Node: the ranks of this node by rank; cross: local rank l of every node, by node.
  node_ = world.split(layout_.node, world.rank());
  cross_ = world.split(layout_.local_rank, layout_.node);
  QT_CHECK(node_->size() == L && node_->rank() == layout_.local_rank && cross_->size() == layout_.nodes &&
               cross_->rank() == layout_.node,
           "hierarchical exchange: the node split gave {} ranks (rank {}), the cross split {} (rank {})", node_->size(),
           node_->rank(), cross_->size(), cross_->rank());
  // Every tensor's method is decided on its whole size, as the flat exchange decides it.
  std::vector<int64_t> units;
  double values = 0, quantized = 0;
  int64_t arena = 0;
  for (const ExchangeTensor& x : tensors_) {
    const QuantSpec spec = quantization.resolve(x.layer_name, x.layer_type, x.numel);
    units.push_back(GradientExchange::stripe_unit(spec, x.column));
    algorithms_.push_back(config.algorithm_for(spec));
    values += static_cast<double>(x.numel);
    if (method_info(spec.method).cast_bits != 32) quantized += static_cast<double>(x.numel);
    arena = std::max(arena, x.offset + x.numel);
  }
  fraction_quantized_ = values > 0 ? quantized / values : 0.0;
  // Chunks whose ranges hold about communication.piece_mb each (one piece of the cross-node
  // exchange) on the CPU, so that the node's sums and gathers of one chunk overlap the cross-node
  // exchange of another. (Smaller chunks cost more in hand-offs than they overlap: on 2 x 2 ranks
  // over 1 Gbit/s, 64 MB took 126 ms in chunks of 4 MB against 85 ms in chunks of 8 or 16 MB.) On
  // GPUs one chunk: the node's collectives run at the speed of its links there, and NCCL kernels of
  // two communicators running at once can wait on each other.
  const auto chunk_values = static_cast<int64_t>(config.piece_mb * 1024.0 * 1024.0 / 4.0) * L;
  if (device_.is_cpu() && L > 1 && chunk_values > 0)
    chunks_ = static_cast<int>(std::clamp<int64_t>((arena + chunk_values - 1) / chunk_values, 1, kMaxChunks));
  cuts_ = arena_cuts(tensors_, units, chunks_ * L);
  // This rank's ranges as tensors of the cross-node exchange: the pieces of the model's tensors in
  // them, at their places in the arena, one bucket per chunk.
  // Chunks are taken from the last to the first, the order in which backward finishes them.
  std::vector<ExchangeTensor> inter_tensors;
  chunk_pieces_.resize(static_cast<size_t>(chunks_));
  buckets_through_.assign(static_cast<size_t>(chunks_), 0);
  for (int i = 0; i < chunks_; ++i) {
    const int c = chunks_ - 1 - i;
    const int64_t lo = range_begin(c, me), hi = range_begin(c, me + 1);
    const int bucket = i > 0 ? buckets_through_[static_cast<size_t>(i) - 1] : 0;
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const ExchangeTensor& x = tensors_[t];
      const int64_t begin = std::max(lo, x.offset), end = std::min(hi, x.offset + x.numel);
      if (end <= begin) continue;  // the same on every node: the cross group skips the piece alike
      ExchangeTensor part = x;
      if (chunks_ > 1) part.name = fmt::format("{}.chunk{}", x.name, c);  // state names stay unique
      const int64_t inside = begin - x.offset;                            // where the piece starts in the tensor
      part.offset = begin;
      part.numel = end - begin;
      const int64_t column = std::max<int64_t>(1, x.column);
      part.column = inside % column == 0 && part.numel % column == 0 ? column : 1;
      part.decided_numel = x.numel;
      // A piece of whole rows is a matrix of fewer rows (PowerSGD's view); any other cut is not one.
      const int64_t row_length = x.rows > 0 ? x.numel / x.rows : 0;
      part.rows =
          row_length > 0 && inside % row_length == 0 && part.numel % row_length == 0 ? part.numel / row_length : 0;
      part.bucket = bucket;
      chunk_pieces_[static_cast<size_t>(c)].push_back(static_cast<int>(inter_tensors.size()));
      piece_tensor_.push_back(static_cast<int>(t));
      inter_tensors.push_back(part);
    }
    buckets_through_[static_cast<size_t>(i)] = bucket + (chunk_pieces_[static_cast<size_t>(c)].empty() ? 0 : 1);
  }
  // The values of each chunk's L ranges, and which chunks each tensor's gradient completes.
  chunk_counts_.resize(static_cast<size_t>(chunks_));
  chunk_tensors_.assign(static_cast<size_t>(chunks_), 0);
  for (int c = 0; c < chunks_; ++c)
    for (int l = 0; l < L; ++l)
      chunk_counts_[static_cast<size_t>(c)].push_back(range_begin(c, l + 1) - range_begin(c, l));
  chunks_of_tensor_.resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t)
    for (int c = 0; c < chunks_; ++c)
      if (tensors_[t].offset < range_begin(c + 1, 0) && range_begin(c, 0) < tensors_[t].offset + tensors_[t].numel) {
        chunks_of_tensor_[t].push_back(c);
        ++chunk_tensors_[static_cast<size_t>(c)];
      }
  ExchangeConfig inner = config;
  inner.hierarchy = "flat";
  inner.mean = false;           // the mean over all N L ranks is taken once, at the end
  inner.overlap = chunks_ > 1;  // chunk by chunk, on the cross-node exchange's thread
  // 0 threads: OpenBLAS's count stays as the run set it (a count here would set it for the whole
  // process, and the model's GEMMs would run on one thread).
  ctx_ = std::make_unique<Context>(device_.is_cuda() ? Context::cuda(device_.index, seed) : Context::cpu(seed, 0));
  // Each cross group quantizes other values: its random streams are its own (local rank 0's are the seed's).
  const uint64_t inter_seed = seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(me);
  inter_ =
      std::make_unique<GradientExchange>(*cross_, device_, inter_seed, inner, quantization, std::move(inter_tensors));
  stats_.bytes_sent_per_tensor.assign(tensors_.size(), 0.0);
  if (chunks_ > 1 && config.overlap) thread_ = std::thread([this] { run_thread(); });
}

HierarchicalExchange::~HierarchicalExchange() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// Step 1 for chunk c: the node's sum of this rank's range, in place.
void HierarchicalExchange::sum_in_node(float* g, int c) {
  if (node_->size() == 1) return;
  const int me = layout_.local_rank;
  const int64_t begin = range_begin(c, 0), length = range_begin(c + 1, 0) - begin;
  const std::vector<int64_t>& counts = chunk_counts_[static_cast<size_t>(c)];
  if (config_.intra != "bf16") return node_->reduce_scatter_sum(*ctx_, g + begin, counts, ReduceType::f32);
  if (!half_.defined() || half_.numel() < cuts_.back())
    half_ = Tensor::empty({std::max<int64_t>(cuts_.back(), 1)}, DType::bf16, device_);
  uint16_t* half = static_cast<uint16_t*>(half_.raw()) + begin;
  pack_16bit(*ctx_, g + begin, half, length, /*bf16=*/true);
  node_->reduce_scatter_sum(*ctx_, half, counts, ReduceType::bf16);
  const int64_t mine = range_begin(c, me);
  unpack_16bit(*ctx_, half + (mine - begin), g + mine, range_begin(c, me + 1) - mine, /*bf16=*/true, 1.0f);
}

// Step 3 for chunk c: the mean of this rank's range, then every range from its owner. (Each owner
// scales only its range, 1/L of the pass over the chunk; the others receive the same bits they
// would have computed.)
void HierarchicalExchange::gather_in_node(float* g, int c) {
  const int me = layout_.local_rank;
  const int64_t mine = range_begin(c, me);
  if (config_.mean)
    scale_buffer(*ctx_, g + mine, range_begin(c, me + 1) - mine, 1.0f / static_cast<float>(world_size_));
  if (node_->size() > 1)
    node_->all_gather_blocks(*ctx_, g + range_begin(c, 0), chunk_counts_[static_cast<size_t>(c)], ReduceType::f32);
}

void HierarchicalExchange::begin_step(Tensor grads, uint64_t step) {
  QT_CHECK(grads.device() == device_ && grads.dtype() == DType::f32,
           "hierarchical exchange: f32 gradients on {} expected, got {} on {}", device_.str(),
           dtype_name(grads.dtype()), grads.device().str());
  QT_CHECK(grads.numel() >= cuts_.back(), "hierarchical exchange: an arena of {} values, the tensors need {}",
           grads.numel(), cuts_.back());
  std::lock_guard<std::mutex> lock(mutex_);
  QT_CHECK(!step_open_, "hierarchical exchange: begin_step while the previous step is still being exchanged");
  grads_ = std::move(grads);
  step_ = step;
  compute_ = nullptr;
  error_ = nullptr;
  chunk_pending_ = chunk_tensors_;
  while (chunk_ready_.size() < chunk_tensors_.size()) chunk_ready_.push_back(std::make_unique<StreamEvent>());
  step_open_ = true;
  step_done_ = false;
  cv_.notify_all();
}

void HierarchicalExchange::tensor_ready(Context& compute, int t) {
  QT_CHECK(t >= 0 && t < static_cast<int>(tensors_.size()), "tensor index {} out of range", t);
  std::lock_guard<std::mutex> lock(mutex_);
  compute_ = &compute;
  for (int c : chunks_of_tensor_[static_cast<size_t>(t)])
    if (--chunk_pending_[static_cast<size_t>(c)] == 0) chunk_ready_[static_cast<size_t>(c)]->record(compute);
  if (thread_.joinable()) cv_.notify_all();
}

void HierarchicalExchange::finish_step() {
  if (!thread_.joinable()) {
    // Everything here, after backward: the exchange's stream is ordered after the compute stream's
    // work (an event; the host does not wait).
    if (compute_ != nullptr) {
      backward_done_.record(*compute_);
      backward_done_.make_wait(*ctx_);
    }
    const std::exception_ptr error = run_steps(false);
    std::lock_guard<std::mutex> lock(mutex_);
    step_open_ = false;
    if (error) std::rethrow_exception(error);
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return step_done_; });
  step_open_ = false;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void HierarchicalExchange::run_thread() {
  flush_subnormals();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || (step_open_ && !step_done_); });
      if (stopping_) return;
    }
    const std::exception_ptr error = run_steps(true);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = error;
      step_done_ = true;
    }
    cv_.notify_all();
  }
}

// The three steps chunk by chunk, from the last chunk to the first: chunk c's node sum while the
// cross-node exchange works on the chunk before it on its own thread, then that chunk's gather.
// `wait_ready` (on the chunk thread): each chunk starts once backward has finished its tensors.
// Returns the error that stopped them, if any, for the caller to report where the step ends.
std::exception_ptr HierarchicalExchange::run_steps(bool wait_ready) {
  try {
    run_chunks(wait_ready);
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

void HierarchicalExchange::run_chunks(bool wait_ready) {
  float* g = grads_.data<float>();
  double in_node_s = 0;  // this thread's time in the node's collectives
  auto timed = [&](auto&& f) {
    const auto t0 = Clock::now();
    f();
    in_node_s += since(t0);
  };
  inter_->begin_step(grads_, step_);
  for (int i = 0; i < chunks_; ++i) {
    const int c = chunks_ - 1 - i;
    if (wait_ready) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || chunk_pending_[static_cast<size_t>(c)] <= 0; });
      QT_CHECK(!stopping_, "hierarchical exchange: stopped in the middle of a step");
      chunk_ready_[static_cast<size_t>(c)]->make_wait(*ctx_);  // backward's kernels for this chunk first
    }
    timed([&] { sum_in_node(g, c); });
    for (int p : chunk_pieces_[static_cast<size_t>(c)]) inter_->tensor_ready(*ctx_, p);
    if (i == 0) continue;
    inter_->wait_buckets(buckets_through_[static_cast<size_t>(i) - 1], *ctx_);
    timed([&] { gather_in_node(g, c + 1); });
  }
  inter_->finish_step();
  timed([&] { gather_in_node(g, 0); });
  if (device_.is_cuda()) ctx_->synchronize();  // the caller reads the gradients next, maybe on another stream
  stats_.phases.add(Phase::communicate, in_node_s);
}

std::vector<std::pair<std::string, Tensor>> HierarchicalExchange::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : inter_->state()) out.emplace_back("inter/" + name, t);
  return out;
}

ExchangeStats HierarchicalExchange::take_stats() {
  const ExchangeStats inner = inter_->take_stats();
  ExchangeStats out = stats_;
  for (int p = 0; p < PhaseTimers::kCount; ++p)
    out.phases.add(static_cast<Phase>(p), inner.phases.seconds(static_cast<Phase>(p)));
  for (size_t i = 0; i < piece_tensor_.size(); ++i)
    out.bytes_sent_per_tensor[static_cast<size_t>(piece_tensor_[i])] += inner.bytes_sent_per_tensor[i];
  out.bytes_sent = 0;
  for (double b : out.bytes_sent_per_tensor) out.bytes_sent += b;
  out.steps = inner.steps;
  stats_ = ExchangeStats{};
  stats_.bytes_sent_per_tensor.assign(tensors_.size(), 0.0);
  return out;
}

std::string HierarchicalExchange::describe() const {
  const int me = layout_.local_rank;
  return fmt::format(
      "two levels: {} node(s) x {} rank(s); inside a node an {} sum, then this rank's range of the "
      "gradients ({} of {} values{}) between nodes (local rank {} of every node), then an allgather inside the "
      "node{}:\n{}",
      layout_.nodes, layout_.ranks_per_node, config_.intra, node_values(me), cuts_.back(),
      chunks_ > 1 ? fmt::format(", in {} chunks", chunks_) : "", me,
      chunks_ > 1 ? "; chunk by chunk, each chunk's sum and gather overlapping another's exchange" : "",
      inter_->describe());
}

int64_t HierarchicalExchange::node_values(int l) const {
  int64_t n = 0;
  for (int c = 0; c < chunks_; ++c) n += range_begin(c, l + 1) - range_begin(c, l);
  return n;
}

void HierarchicalExchange::wait_buckets(int, Context&) {
  QT_FAIL("wait_buckets is not offered by the two-level exchange (communication.hierarchy)");
}

void HierarchicalExchange::exchange_now(Tensor, uint64_t, const std::vector<int>&) {
  QT_FAIL("exchange_now is not offered by the two-level exchange (communication.hierarchy: flat)");
}

}  // namespace qtrain
