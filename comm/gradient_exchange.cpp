// The gradient exchange: the per-tensor plans, bucketing and the communication thread. The
// reduction algorithms are in comm/exchange/.
#include "comm/gradient_exchange.h"

#include <optional>

#include "comm/exchange/plan.h"
#include "comm/exchange/workspace.h"
#include "comm/hierarchical_exchange.h"
#include "comm/watchdog.h"
#include "framework/core/float_env.h"
#include "quant/deferred_checks.h"
#include "quant/method.h"

namespace qtrain {

GradientExchange::GradientExchange(Communicator& comm, Device device, uint64_t seed, const CommunicationConfig& config,
                                   const QuantizationConfig& quantization, std::vector<ExchangeTensor> tensors)
    : device_(device), config_(config) {
  const int P = comm.size();
  // Every rank must hold its gradients on the same kind of device: the schedule depends on it
  // (pipelined pieces on the CPU, piece by piece on a GPU), and ranks on different schedules wait for
  // different messages (a hang); their replicas could not stay identical either. With device: auto a
  // host without a GPU would put its ranks on the CPU.
  const std::vector<uint64_t> kinds = comm.all_gather_u64(device.is_cuda() ? 1 : 0);
  for (size_t r = 0; r < kinds.size(); ++r)
    if (kinds[r] != kinds[0])
      input_error(
          "rank {} runs on {} but rank 0 on {}; every rank must train on the same kind of device (give "
          "every host a GPU, or set device: cpu)",
          r, kinds[r] ? "a GPU" : "the CPU", kinds[0] ? "a GPU" : "the CPU");
  NodeLayout layout;
  if (wants_two_levels(comm, device, config_, quantization, tensors, layout)) {
    hierarchy_ = std::make_unique<HierarchicalExchange>(comm, device, seed, config_, quantization, tensors, layout);
    hierarchy_tensors_ = std::move(tensors);
    return;
  }
  auto ctx = std::make_unique<Context>(device.is_cuda() ? Context::cuda(device.index, seed) : Context::cpu(seed, 0));
  const exchange::PlanContext pc{seed, comm.rank(), P, config_.piece_mb, device};
  std::vector<exchange::TensorPlan> plans;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const ExchangeTensor& x = tensors[t];
    const QuantSpec spec =
        quantization.resolve(x.layer_name, x.layer_type, x.decided_numel > 0 ? x.decided_numel : x.numel);
    plans.push_back(exchange::make_plan(x, static_cast<int>(t), spec, config_.algorithm_for(spec), pc));
  }
  const float scale = config_.mean ? 1.0f / static_cast<float>(P) : 1.0f;
  work_ =
      std::make_unique<exchange::Workspace>(comm, device, std::move(ctx), scale, std::move(tensors), std::move(plans));
  make_buckets(config_.bucket_mb);
  if (config_.overlap) thread_ = std::thread([this] { run_thread(); });
}

// Buckets in the order backward completes tensors: from the last tensor to the first (or as the
// tensors' `bucket` say).
void GradientExchange::make_buckets(double bucket_mb) {
  const std::vector<ExchangeTensor>& ts = work_->tensors;
  if (!ts.empty() && ts.front().bucket >= 0) {
    bucket_of_.assign(ts.size(), 0);
    for (size_t t = 0; t < ts.size(); ++t) {
      const int b = ts[t].bucket;
      QT_CHECK(b >= 0 && b <= static_cast<int>(ts.size()), "tensor {}: bucket {} among {} tensors", ts[t].name, b,
               ts.size());
      if (static_cast<int>(buckets_.size()) <= b) buckets_.resize(static_cast<size_t>(b) + 1);
      buckets_[static_cast<size_t>(b)].tensors.push_back(static_cast<int>(t));
      bucket_of_[t] = b;
    }
    for (size_t b = 0; b < buckets_.size(); ++b) QT_CHECK(!buckets_[b].tensors.empty(), "bucket {} has no tensor", b);
    return;
  }
  const double bucket_bytes = bucket_mb * 1024.0 * 1024.0;
  double filled = 0;
  bucket_of_.assign(ts.size(), 0);
  for (int t = static_cast<int>(ts.size()) - 1; t >= 0; --t) {
    if (buckets_.empty() || filled >= bucket_bytes) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().tensors.push_back(t);
    bucket_of_[static_cast<size_t>(t)] = static_cast<int>(buckets_.size()) - 1;
    filled += 4.0 * static_cast<double>(ts[static_cast<size_t>(t)].numel);
  }
}

GradientExchange::~GradientExchange() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

const std::vector<ExchangeTensor>& GradientExchange::tensors() const {
  return hierarchy_ ? hierarchy_tensors_ : work_->tensors;
}

ReduceAlgorithm GradientExchange::algorithm(int t) const {
  return hierarchy_ ? hierarchy_->algorithm(t) : work_->plan(t).algorithm;
}

double GradientExchange::fraction_quantized() const {
  if (hierarchy_) return hierarchy_->fraction_quantized();
  double total = 0, quantized = 0;
  for (size_t t = 0; t < tensors().size(); ++t) {
    const auto numel = static_cast<double>(tensors()[t].numel);
    total += numel;
    const exchange::TensorPlan& p = work_->plans[t];
    // powersgd sends its uncompressed tensors (vectors, matrices where compression does not pay) in fp32.
    const bool fp32 = method_info(p.spec.method).cast_bits == 32 ||
                      (p.algorithm == ReduceAlgorithm::powersgd && !p.low_rank.shape.compressed);
    if (!fp32) quantized += numel;
  }
  return total > 0 ? quantized / total : 0.0;
}

int GradientExchange::num_buckets() const {
  return hierarchy_ ? hierarchy_->num_buckets() : static_cast<int>(buckets_.size());
}

std::string GradientExchange::describe() const {
  if (hierarchy_) return hierarchy_->describe();
  std::string s;
  for (size_t t = 0; t < tensors().size(); ++t) {
    const exchange::TensorPlan& p = work_->plans[t];
    std::string algorithm = reduce_algorithm_name(p.algorithm);
    // powersgd: the matrix it compresses, or that the tensor travels in fp32.
    if (p.algorithm == ReduceAlgorithm::powersgd) {
      const LowRankShape& l = p.low_rank.shape;
      algorithm += l.compressed ? fmt::format(" {}x{} rank {}", l.rows, l.cols, l.rank) : " (fp32: not compressed)";
    }
    s += fmt::format("{:<20} {:>10} values  {:<40} {:<25} bucket {}\n", tensors()[t].name, tensors()[t].numel,
                     p.spec.str(), algorithm, bucket_of_[t]);
  }
  return s;
}

void GradientExchange::begin_step(Tensor grads, uint64_t step) {
  QT_CHECK(grads.dtype() == DType::f32 && grads.device() == device_, "gradients must be f32 on {}, got {} on {}",
           device_.str(), dtype_name(grads.dtype()), grads.device().str());
  for (const ExchangeTensor& x : tensors())
    QT_CHECK(x.offset + x.numel <= grads.numel(), "tensor {} lies outside the gradient arena", x.name);
  if (hierarchy_) return hierarchy_->begin_step(std::move(grads), step);
  std::lock_guard<std::mutex> lock(mutex_);
  QT_CHECK(queue_.empty(), "begin_step while the previous step is still being exchanged");
  work_->grads = std::move(grads);
  compute_ = nullptr;
  work_->ctx->set_step(step);
  done_ = 0;
  processed_.clear();
  error_ = nullptr;
  for (Bucket& b : buckets_) b.pending = static_cast<int>(b.tensors.size());
}

void GradientExchange::tensor_ready(Context& compute, int t) {
  QT_CHECK(t >= 0 && t < static_cast<int>(tensors().size()), "tensor index {} out of range", t);
  if (hierarchy_) return hierarchy_->tensor_ready(compute, t);
  const int bucket = bucket_of_[static_cast<size_t>(t)];
  Bucket& b = buckets_[static_cast<size_t>(bucket)];
  if (!config_.overlap) compute_ = &compute;  // finish_step orders the exchange after it once
  if (--b.pending > 0) return;
  if (!config_.overlap) return;  // finish_step processes every bucket in order
  // The exchange reads the gradients on its own stream: process_bucket makes that stream wait for the
  // compute stream's work up to here (an event; the host goes on with backward).
  b.ready->record(compute);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(bucket);
  }
  cv_.notify_all();
}

void GradientExchange::finish_step() {
  if (hierarchy_) return hierarchy_->finish_step();
  if (!config_.overlap) {
    // The exchange reads the gradients on its own stream: it must run after the compute stream's
    // backward (on CUDA the two streams are not ordered; without this the first buckets raced the last
    // kernels). An event orders the streams; the host does not wait.
    if (compute_ != nullptr) {
      backward_done_.record(*compute_);
      backward_done_.make_wait(*work_->ctx);
    }
    try {
      for (int b = 0; b < num_buckets(); ++b) {
        QT_CHECK(buckets_[static_cast<size_t>(b)].pending == 0, "bucket {} was not complete at the end of backward", b);
        process_bucket(b);
      }
    } catch (...) {
      work_->discard_checks();
      throw;
    }
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_ == num_buckets() || error_ != nullptr; });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      queue_.clear();
      work_->discard_checks();
      std::rethrow_exception(e);
    }
  }
  // The one wait of the step: the optimizer reads the exchanged gradients on the compute stream. The
  // quantizers' deferred checks are read back with it, and raise here.
  work_->settle_checks();
  ++work_->stats.steps;
}

void GradientExchange::wait_buckets(int n, Context& consumer) {
  QT_CHECK(!hierarchy_ && config_.overlap, "wait_buckets needs the communication thread (communication.overlap)");
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return done_ >= n || error_ != nullptr; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    queue_.clear();
    std::rethrow_exception(e);
  }
  for (int i = 0; i < n; ++i)
    buckets_[static_cast<size_t>(processed_[static_cast<size_t>(i)])].done->make_wait(consumer);
}

void GradientExchange::exchange(Context& compute, Tensor grads, uint64_t step) {
  begin_step(std::move(grads), step);
  for (int t = static_cast<int>(tensors().size()) - 1; t >= 0; --t) tensor_ready(compute, t);
  finish_step();
}

ExchangeStats GradientExchange::take_stats() {
  if (hierarchy_) return hierarchy_->take_stats();
  std::lock_guard<std::mutex> lock(mutex_);
  ExchangeStats out = work_->stats;
  out.bytes_sent = 0;
  for (double b : out.bytes_sent_per_tensor) out.bytes_sent += b;
  work_->stats = ExchangeStats{};
  work_->stats.bytes_sent_per_tensor.assign(tensors().size(), 0.0);
  return out;
}

std::vector<std::pair<std::string, Tensor>> GradientExchange::state() {
  if (hierarchy_) return hierarchy_->state();
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t t = 0; t < tensors().size(); ++t) {
    exchange::TensorPlan& p = work_->plans[t];
    auto add = [&](QuantState& s, const std::string& role) {
      for (auto& [name, tensor] : s.state()) out.emplace_back(tensors()[t].name + role + "/" + name, tensor);
    };
    auto piece = [](size_t k) { return k == 0 ? std::string() : ".piece" + std::to_string(k); };
    add(p.whole, "");
    for (size_t s = 0; s < p.stripes.size(); ++s)
      for (size_t k = 0; k < p.stripes[s].size(); ++k) add(p.stripes[s][k], "/stripe" + std::to_string(s) + piece(k));
    for (size_t k = 0; k < p.owner.size(); ++k) add(p.owner[k], "/owner" + piece(k));
    if (p.low_rank.q_t.defined()) out.emplace_back(tensors()[t].name + "/powersgd/q", p.low_rank.q_t);
    if (p.low_rank.residual.defined()) out.emplace_back(tensors()[t].name + "/powersgd/residual", p.low_rank.residual);
  }
  return out;
}

void GradientExchange::run_thread() {
  flush_subnormals();
  bool device_selected = false;
  for (;;) {
    int b = -1;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      b = queue_.front();
    }
    try {
      // The thread's CUDA calls (encode kernels, copies, NCCL) must address this rank's GPU; CUDA's
      // current device is per thread and would otherwise be GPU 0. A failure is reported like a
      // failed bucket.
      if (!device_selected) use_device_on_this_thread(device_);
      device_selected = true;
      process_bucket(b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      queue_.clear();
      cv_.notify_all();
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!queue_.empty()) queue_.pop_front();
      processed_.push_back(b);
      ++done_;
    }
    cv_.notify_all();
  }
}

void GradientExchange::process_bucket(int b) {
  const WatchActivity activity(
      fmt::format("step {}, exchange of bucket {} of {}", work_->ctx->step(), b + 1, num_buckets()));
  if (config_.overlap) buckets_[static_cast<size_t>(b)].ready->make_wait(*work_->ctx);
  // The quantizers called below report their errors to the step's deferred checks (CUDA).
  std::optional<DeferredChecks::Scope> deferring;
  if (work_->checks) deferring.emplace(*work_->checks);
  std::vector<int> native, gathered, striped, compact;
  std::vector<int> low_rank;  // powersgd
  for (int t : buckets_[static_cast<size_t>(b)].tensors) {
    switch (work_->plan(t).algorithm) {
      case ReduceAlgorithm::allreduce: native.push_back(t); break;
      case ReduceAlgorithm::allgather: gathered.push_back(t); break;
      case ReduceAlgorithm::reduce_scatter_allgather: striped.push_back(t); break;
      case ReduceAlgorithm::powersgd: low_rank.push_back(t); break;
      case ReduceAlgorithm::allreduce_compact: compact.push_back(t); break;
    }
  }
  if (!compact.empty()) exchange::reduce_allreduce_compact(*work_, compact);
  if (!native.empty()) exchange::reduce_allreduce(*work_, native);
  if (!gathered.empty()) exchange::reduce_allgather(*work_, gathered);
  if (!striped.empty()) exchange::reduce_scatter_allgather(*work_, striped);
  if (!low_rank.empty()) exchange::reduce_powersgd(*work_, low_rank);
  buckets_[static_cast<size_t>(b)].done->record(*work_->ctx);
}

}  // namespace qtrain
