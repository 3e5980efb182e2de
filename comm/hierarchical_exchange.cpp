// The two-level exchange: node layout, the node and cross-node communicators, and the three steps.
#include "comm/hierarchical_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "comm/buffer_ops.h"
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

bool wants_two_levels(Communicator& world, Device device, const CommunicationConfig& config,
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

HierarchicalExchange::HierarchicalExchange(Communicator& world, Device device, uint64_t seed,
                                           const CommunicationConfig& config, const QuantizationConfig& quantization,
                                           const std::vector<ExchangeTensor>& tensors, const NodeLayout& layout)
    : device_(device), config_(config), layout_(layout), world_size_(world.size()), tensors_(tensors) {
  const int L = layout_.ranks_per_node;
  // Node: the ranks of this node by rank; cross: local rank l of every node, by node.
  node_ = world.split(layout_.node, world.rank());
  cross_ = world.split(layout_.local_rank, layout_.node);
  QT_CHECK(node_->size() == L && node_->rank() == layout_.local_rank && cross_->size() == layout_.nodes &&
               cross_->rank() == layout_.node,
           "hierarchical exchange: the node split gave {} ranks (rank {}), the cross split {} (rank {})", node_->size(),
           node_->rank(), cross_->size(), cross_->rank());
  // Stripes: L per tensor at the units the tensor's method needs (whole columns for column methods),
  // as reduce-scatter + allgather cuts them; the method is decided on the whole tensor's size.
  std::vector<ExchangeTensor> inter_tensors;
  int64_t offset = 0;
  stripes_.resize(tensors_.size());
  inter_index_.assign(tensors_.size(), -1);
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const ExchangeTensor& x = tensors_[t];
    const QuantSpec spec = quantization.resolve(x.layer_name, x.layer_type, x.numel);
    const std::vector<int64_t> bounds =
        GradientExchange::stripe_bounds(x.numel, GradientExchange::stripe_unit(spec, x.column), L);
    for (int l = 0; l < L; ++l)
      stripes_[t].push_back(
          {bounds[static_cast<size_t>(l)], bounds[static_cast<size_t>(l) + 1] - bounds[static_cast<size_t>(l)]});
    const Stripe& s = stripes_[t][static_cast<size_t>(layout_.local_rank)];
    if (s.length == 0) continue;  // the same on every node: the cross group skips the tensor alike
    ExchangeTensor part = x;
    part.offset = offset;
    part.numel = s.length;
    part.column = s.length % x.column == 0 ? x.column : 1;
    part.decided_numel = x.numel;
    // A stripe of whole rows is a matrix of fewer rows (PowerSGD's view); any other cut is not one.
    const int64_t row_length = x.rows > 0 ? x.numel / x.rows : 0;
    part.rows = row_length > 0 && s.begin % row_length == 0 && s.length % row_length == 0 ? s.length / row_length : 0;
    inter_index_[t] = static_cast<int>(inter_tensors.size());
    inter_tensors.push_back(part);
    offset += s.length;
  }
  CommunicationConfig inner = config;
  inner.hierarchy = "flat";
  inner.mean = false;     // the mean over all N L ranks is taken once, at the end
  inner.overlap = false;  // the node's sum must be complete before any stripe leaves
  ctx_ = std::make_unique<Context>(device_.is_cuda() ? Context::cuda(device_.index, seed) : Context::cpu(seed, 1));
  mine_ = Tensor::zeros({std::max<int64_t>(offset, 1)}, DType::f32, device_);
  inter_ = std::make_unique<GradientExchange>(*cross_, device_, seed, inner, quantization, std::move(inter_tensors));
  stats_.bytes_sent_per_tensor.assign(tensors_.size(), 0.0);
  node_counts_.assign(static_cast<size_t>(L), 0);
  for (const std::vector<Stripe>& of_tensor : stripes_)
    for (int l = 0; l < L; ++l) node_counts_[static_cast<size_t>(l)] += of_tensor[static_cast<size_t>(l)].length;
}

HierarchicalExchange::~HierarchicalExchange() = default;

// Copies the stripes of local rank l, tensor by tensor, from the gradient arena `g` into `out` (on
// the exchange's device: plain copies on the CPU, device-to-device copies on ctx's stream on a GPU).
void HierarchicalExchange::pack_stripes(int l, const float* g, float* out) {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const Stripe& s = stripes_[t][static_cast<size_t>(l)];
    copy_buffer(*ctx_, out, g + tensors_[t].offset + s.begin, static_cast<size_t>(s.length) * sizeof(float));
    out += s.length;
  }
}

// The inverse: local rank l's stripes, back to back in `in`, to their places in `g`.
void HierarchicalExchange::unpack_stripes(int l, const float* in, float* g) {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const Stripe& s = stripes_[t][static_cast<size_t>(l)];
    copy_buffer(*ctx_, g + tensors_[t].offset + s.begin, in, static_cast<size_t>(s.length) * sizeof(float));
    in += s.length;
  }
}

void HierarchicalExchange::sum_own_stripes_in_node(const Tensor& grads) {
  const float* g = grads.data<float>();
  float* own = mine_.data<float>();
  const int L = layout_.ranks_per_node, me = layout_.local_rank;
  if (node_->size() == 1) return pack_stripes(me, g, own);
  // A reduce-scatter sends each stripe to its owner only: (L-1)/L of the gradients per rank, where
  // an allreduce followed by the allgather of step 3 would move 2(L-1)/L before the allgather.
  int64_t total = 0;
  for (int64_t c : node_counts_) total += c;
  if (!packed_.defined() || packed_.numel() < total)
    packed_ = Tensor::empty({std::max<int64_t>(total, 1)}, DType::f32, device_);
  float* packed = packed_.data<float>();
  float* at = packed;
  for (int l = 0; l < L; ++l) {
    pack_stripes(l, g, at);
    at += node_counts_[static_cast<size_t>(l)];
  }
  int64_t before = 0;  // where this rank's block starts in the packed buffer
  for (int l = 0; l < me; ++l) before += node_counts_[static_cast<size_t>(l)];
  const int64_t mine = node_counts_[static_cast<size_t>(me)];
  if (config_.intra == "bf16") {
    if (!half_.defined() || half_.numel() < total)
      half_ = Tensor::empty({std::max<int64_t>(total, 1)}, DType::bf16, device_);
    auto* half = static_cast<uint16_t*>(half_.raw());
    pack_16bit(*ctx_, packed, half, total, /*bf16=*/true);
    node_->reduce_scatter_sum(*ctx_, half, node_counts_, ReduceType::bf16);
    unpack_16bit(*ctx_, half + before, own, mine, /*bf16=*/true, 1.0f);
  } else {
    node_->reduce_scatter_sum(*ctx_, packed, node_counts_, ReduceType::f32);
    copy_buffer(*ctx_, own, packed + before, static_cast<size_t>(mine) * sizeof(float));
  }
}

// Step 3: every local rank's summed stripes (this rank's at `own`) to their places in `g`.
void HierarchicalExchange::gather_stripes_in_node(const float* own, float* g) {
  const int L = node_->size(), me = layout_.local_rank;
  if (device_.is_cuda()) {
    // GPU to GPU: every rank's block in a slot of the largest block's size (one ncclAllGather).
    const int64_t slot = *std::max_element(node_counts_.begin(), node_counts_.end());
    if (!gathered_device_.defined() || gathered_device_.numel() < (L + 1) * slot)
      gathered_device_ = Tensor::empty({std::max<int64_t>((L + 1) * slot, 1)}, DType::f32, device_);
    float* slots = gathered_device_.data<float>();
    float* send = slots + L * slot;  // after the L receive slots
    copy_buffer(*ctx_, send, own, static_cast<size_t>(node_counts_[static_cast<size_t>(me)]) * sizeof(float));
    node_->all_gather_equal(*ctx_, send, static_cast<size_t>(slot) * sizeof(float), slots);
    for (int l = 0; l < L; ++l)
      if (l != me) unpack_stripes(l, slots + l * slot, g);
    return;
  }
  const auto bytes = static_cast<size_t>(node_counts_[static_cast<size_t>(me)]) * sizeof(float);
  node_->all_gather_bytes(*ctx_, {reinterpret_cast<const uint8_t*>(own), bytes}, gathered_, sizes_, offsets_);
  for (int l = 0; l < L; ++l) {
    if (l == me) continue;
    const size_t expected = static_cast<size_t>(node_counts_[static_cast<size_t>(l)]) * sizeof(float);
    QT_CHECK(sizes_[static_cast<size_t>(l)] == expected,
             "hierarchical exchange: local rank {} sent {} bytes, its stripes take {}", l,
             sizes_[static_cast<size_t>(l)], expected);
    unpack_stripes(l, reinterpret_cast<const float*>(gathered_.data() + offsets_[static_cast<size_t>(l)]), g);
  }
}

void HierarchicalExchange::exchange(Tensor& grads, uint64_t step) {
  QT_CHECK(grads.device() == device_ && grads.dtype() == DType::f32,
           "hierarchical exchange: f32 gradients on {} expected, got {} on {}", device_.str(),
           dtype_name(grads.dtype()), grads.device().str());
  const auto t0 = Clock::now();
  sum_own_stripes_in_node(grads);
  const double intra_sum_s = since(t0);
  // This rank's stripes are in the cross-node exchange's arena: exchanged, and back.
  inter_->exchange(*ctx_, mine_, step);
  const auto t1 = Clock::now();
  float* g = grads.data<float>();
  const float* own = mine_.data<float>();
  unpack_stripes(layout_.local_rank, own, g);
  if (node_->size() > 1) gather_stripes_in_node(own, g);
  if (config_.mean) scale_buffer(*ctx_, g, grads.numel(), 1.0f / static_cast<float>(world_size_));
  if (device_.is_cuda()) ctx_->synchronize();  // the caller reads the gradients next, maybe on another stream
  stats_.phases.add(Phase::communicate, intra_sum_s + since(t1));
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
  for (size_t t = 0; t < tensors_.size(); ++t)
    if (inter_index_[t] >= 0)
      out.bytes_sent_per_tensor[t] += inner.bytes_sent_per_tensor[static_cast<size_t>(inter_index_[t])];
  out.bytes_sent = 0;
  for (double b : out.bytes_sent_per_tensor) out.bytes_sent += b;
  out.steps = inner.steps;
  stats_ = ExchangeStats{};
  stats_.bytes_sent_per_tensor.assign(tensors_.size(), 0.0);
  return out;
}

std::string HierarchicalExchange::describe() const {
  return fmt::format(
      "two levels: {} node(s) x {} rank(s); inside a node an {} sum, then this rank's stripe of each "
      "tensor between nodes (local rank {} of every node), then an allgather inside the node:\n{}",
      layout_.nodes, layout_.ranks_per_node, config_.intra, layout_.local_rank, inter_->describe());
}

}  // namespace qtrain
