// FlatExchange: the gradient exchange among all ranks as peers (GradientExchange's first
// implementation; hierarchical_exchange.h is the other). Tensors are grouped into buckets (contiguous
// groups in the order backward finishes them); a bucket is exchanged as soon as all its tensors are
// ready, on a communication thread, so communication overlaps the rest of backward. Each bucket runs
// its tensors' algorithms (exchange/algorithms/algorithms.def).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exchange/gradient_exchange.h"

namespace qtrain {

namespace exchange {
struct Workspace;
}

class FlatExchange final : public ExchangeImpl {
 public:
  FlatExchange(Communicator& comm, Device device, uint64_t seed, const ExchangeConfig& config,
               const QuantizationConfig& quantization, std::vector<ExchangeTensor> tensors);
  // Stops the thread; never runs a collective (a destructor must not block on other ranks).
  ~FlatExchange() override;

  void begin_step(Tensor grads, uint64_t step) override;
  void tensor_ready(Context& compute, int t) override;
  void finish_step() override;
  void wait_buckets(int n, Context& consumer) override;
  void exchange_now(Tensor grads, uint64_t step, const std::vector<int>& ids) override;
  ExchangeStats take_stats() override;
  std::vector<std::pair<std::string, Tensor>> state() override;
  const std::vector<ExchangeTensor>& tensors() const override;
  ReduceAlgorithm algorithm(int t) const override;
  double fraction_quantized() const override;
  bool two_levels() const override { return false; }
  int num_buckets() const override { return static_cast<int>(buckets_.size()); }
  std::string describe() const override;

 private:
  struct Bucket {
    std::vector<int> tensors;
    int pending = 0;  // tensors not yet ready this step
    // The compute stream's position when the bucket's last tensor became ready: the exchange's stream
    // waits for it on the GPU; the host does not.
    std::unique_ptr<StreamEvent> ready = std::make_unique<StreamEvent>();
    // The exchange's stream at the end of the bucket's work, for wait_buckets' consumer.
    std::unique_ptr<StreamEvent> done = std::make_unique<StreamEvent>();
  };

  // communication.small_tensors: with_quantized: the fp32 tensors' algorithm becomes the quantized
  // tensors' one, where they all share a payload algorithm.
  static void carry_small_tensors(const std::vector<QuantSpec>& specs, std::vector<ReduceAlgorithm>& algorithms);
  void make_buckets(double bucket_mb);
  void run_thread();
  void process_bucket(int b);
  // Runs the algorithms of `ids` (one bucket's tensors) on the exchange's context.
  void reduce_tensors(const std::vector<int>& ids);

  Device device_;
  ExchangeConfig config_;
  std::unique_ptr<exchange::Workspace> work_;  // the tensors, their plans and what the algorithms share
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // per tensor
  // Without overlap: the context of the tensor_ready calls, whose stream the exchange's is ordered
  // after once in finish_step (null until the step's first tensor_ready).
  Context* compute_ = nullptr;
  StreamEvent backward_done_;  // without overlap: compute_'s position at finish_step

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<int> queue_;
  int done_ = 0;
  std::vector<int> processed_;  // this step's buckets in the order they were exchanged
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace qtrain
