// The flat gradient exchange: the per-tensor plans, bucketing and the communication thread. The
// reduction algorithms are in exchange/algorithms/.
#include "exchange/flat_exchange.h"

#include <algorithm>
#include <optional>

#include "exchange/algorithms/algorithm.h"
#include "exchange/algorithms/plan.h"
#include "exchange/algorithms/workspace.h"
#include "comm/watchdog.h"
#include "framework/core/float_env.h"
#include "quant/deferred_checks.h"
#include "quant/method.h"

namespace qtrain {

FlatExchange::FlatExchange(Communicator& comm, Device device, uint64_t seed, const ExchangeConfig& config,
                           const QuantizationConfig& quantization, std::vector<ExchangeTensor> tensors)
    : device_(device), config_(config) {
  const int P = comm.size();
  auto ctx = std::make_unique<Context>(device.is_cuda() ? Context::cuda(device.index, seed) : Context::cpu(seed, 0));
  const exchange::PlanContext pc{seed, comm.rank(), P, config_.piece_mb, device};
  std::vector<QuantSpec> specs;
  std::vector<ReduceAlgorithm> algorithms;
  for (const ExchangeTensor& x : tensors) {
    specs.push_back(quantization.resolve(x.layer_name, x.layer_type, x.decided_numel > 0 ? x.decided_numel : x.numel));
    algorithms.push_back(config_.algorithm_for(specs.back()));
  }
  if (config_.small_tensors == "with_quantized") carry_small_tensors(specs, algorithms);
  std::vector<exchange::TensorPlan> plans;
  for (size_t t = 0; t < tensors.size(); ++t)
    plans.push_back(exchange::make_plan(tensors[t], static_cast<int>(t), specs[t], algorithms[t], pc));
  const float scale = config_.mean ? 1.0f / static_cast<float>(P) : 1.0f;
  work_ =
      std::make_unique<exchange::Workspace>(comm, device, std::move(ctx), scale, std::move(tensors), std::move(plans));
  work_->host_payloads = config_.payload_path == "host";
  make_buckets(config_.bucket_mb);
  if (config_.overlap) thread_ = std::thread([this] { run_thread(); });
}

// communication.small_tensors: with_quantized (exchange_config.h). The same choice on every rank:
// it depends on the tensors and the configuration only.
void FlatExchange::carry_small_tensors(const std::vector<QuantSpec>& specs, std::vector<ReduceAlgorithm>& algorithms) {
  std::optional<ReduceAlgorithm> carrier;
  for (size_t t = 0; t < specs.size(); ++t) {
    if (algorithms[t] == ReduceAlgorithm::allreduce) continue;
    const bool payload =
        algorithms[t] == ReduceAlgorithm::allgather || algorithms[t] == ReduceAlgorithm::reduce_scatter_allgather;
    if (!payload || (carrier && *carrier != algorithms[t])) return;  // no single payload algorithm
    carrier = algorithms[t];
  }
  if (!carrier) return;
  for (size_t t = 0; t < specs.size(); ++t)
    if (algorithms[t] == ReduceAlgorithm::allreduce && method_info(specs[t].method).cast_bits == 32)
      algorithms[t] = *carrier;
}

// Buckets in the order backward completes tensors: from the last tensor to the first (or as the
// tensors' `bucket` say).
void FlatExchange::make_buckets(double bucket_mb) {
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
  bucket_of_ = GradientExchange::bucket_of(ts, bucket_mb);
  for (size_t t = ts.size(); t-- > 0;) {
    const auto b = static_cast<size_t>(bucket_of_[t]);
    if (buckets_.size() <= b) buckets_.resize(b + 1);
    buckets_[b].tensors.push_back(static_cast<int>(t));
  }
}

FlatExchange::~FlatExchange() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

const std::vector<ExchangeTensor>& FlatExchange::tensors() const { return work_->tensors; }

ReduceAlgorithm FlatExchange::algorithm(int t) const { return work_->plan(t).algorithm; }

double FlatExchange::fraction_quantized() const {
  double total = 0, quantized = 0;
  for (size_t t = 0; t < tensors().size(); ++t) {
    const auto numel = static_cast<double>(tensors()[t].numel);
    total += numel;
    const exchange::TensorPlan& p = work_->plans[t];
    if (!exchange::exchange_algorithm(p.algorithm).sends_fp32(p)) quantized += numel;
  }
  return total > 0 ? quantized / total : 0.0;
}

std::string FlatExchange::describe() const {
  std::string s;
  for (size_t t = 0; t < tensors().size(); ++t) {
    const exchange::TensorPlan& p = work_->plans[t];
    const std::string algorithm = exchange::exchange_algorithm(p.algorithm).describe(p);
    s += fmt::format("{:<20} {:>10} values  {:<40} {:<25} bucket {}\n", tensors()[t].name, tensors()[t].numel,
                     p.spec.str(), algorithm, bucket_of_[t]);
  }
  return s;
}

void FlatExchange::begin_step(Tensor grads, uint64_t step) {
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

void FlatExchange::tensor_ready(Context& compute, int t) {
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

void FlatExchange::finish_step() {
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

void FlatExchange::wait_buckets(int n, Context& consumer) {
  QT_CHECK(config_.overlap, "wait_buckets needs the communication thread (communication.overlap)");
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

ExchangeStats FlatExchange::take_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  ExchangeStats out = work_->stats;
  out.bytes_sent = 0;
  for (double b : out.bytes_sent_per_tensor) out.bytes_sent += b;
  work_->stats = ExchangeStats{};
  work_->stats.bytes_sent_per_tensor.assign(tensors().size(), 0.0);
  return out;
}

std::vector<std::pair<std::string, Tensor>> FlatExchange::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t t = 0; t < tensors().size(); ++t) {
    exchange::TensorPlan& p = work_->plans[t];
    exchange::exchange_algorithm(p.algorithm).state(p, tensors()[t].name, out);
  }
  return out;
}

void FlatExchange::run_thread() {
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

void FlatExchange::process_bucket(int b) {
  const WatchActivity activity(
      fmt::format("step {}, exchange of bucket {} of {}", work_->ctx->step(), b + 1, num_buckets()));
  if (config_.overlap) buckets_[static_cast<size_t>(b)].ready->make_wait(*work_->ctx);
  reduce_tensors(buckets_[static_cast<size_t>(b)].tensors);
  buckets_[static_cast<size_t>(b)].done->record(*work_->ctx);
}

void FlatExchange::reduce_tensors(const std::vector<int>& ids) {
  // The quantizers called below report their errors to the step's deferred checks (CUDA).
  std::optional<DeferredChecks::Scope> deferring;
  if (work_->checks) deferring.emplace(*work_->checks);
  // Each algorithm over its tensors of the bucket, in the order of algorithms.def.
  std::vector<std::vector<int>> by_algorithm;
  for (int t : ids) {
    const auto a = static_cast<size_t>(work_->plan(t).algorithm);
    if (by_algorithm.size() <= a) by_algorithm.resize(a + 1);
    by_algorithm[a].push_back(t);
  }
  for (size_t a = 0; a < by_algorithm.size(); ++a)
    if (!by_algorithm[a].empty())
      exchange::exchange_algorithm(static_cast<ReduceAlgorithm>(a)).reduce(*work_, by_algorithm[a]);
}

void FlatExchange::exchange_now(Tensor grads, uint64_t step, const std::vector<int>& ids) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    QT_CHECK(queue_.empty(), "exchange_now while a step is being exchanged");
  }
  work_->grads = std::move(grads);
  work_->ctx->set_step(step);
  const WatchActivity activity(fmt::format("step {}, exchange of {} tensors", step, ids.size()));
  // In tensor order, whatever order the caller lists them in (DDP's first buckets list parameters in
  // model order, its rebuilt ones in the order backward finished them): a native allreduce sums the
  // concatenation of a bucket's fp32 tensors in an order that depends on their places in it.
  std::vector<int> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  try {
    reduce_tensors(sorted);
  } catch (...) {
    work_->discard_checks();
    work_->grads = Tensor();
    throw;
  }
  work_->settle_checks();
  work_->grads = Tensor();
}

}  // namespace qtrain
