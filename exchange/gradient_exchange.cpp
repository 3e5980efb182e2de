// The gradient exchange's facade: the flat or the two-level exchange, chosen once.
#include "exchange/gradient_exchange.h"

#include "exchange/flat_exchange.h"
#include "exchange/hierarchical_exchange.h"

namespace qtrain {

GradientExchange::GradientExchange(Communicator& comm, Device device, uint64_t seed, const ExchangeConfig& config,
                                   const QuantizationConfig& quantization, std::vector<ExchangeTensor> tensors)
    : device_(device) {
  // Every rank must hold its gradients on the same kind of device: the schedule depends on it
  // (pipelined pieces on the CPU, piece by piece on a GPU), and ranks on different schedules wait for
  // different messages (a hang); their replicas could not stay identical either. With device: auto a
  // host without a GPU would put its ranks on the CPU.
  if (const auto d = comm.first_disagreement(device.is_cuda() ? 1 : 0))
    input_error(
        "rank {} runs on {} but rank 0 on {}; every rank must train on the same kind of device (give "
        "every host a GPU, or set device: cpu)",
        d->rank, d->value ? "a GPU" : "the CPU", d->rank0_value ? "a GPU" : "the CPU");
  NodeLayout layout;
  if (wants_two_levels(comm, device, config, quantization, tensors, layout))
    impl_ =
        std::make_unique<HierarchicalExchange>(comm, device, seed, config, quantization, std::move(tensors), layout);
  else
    impl_ = std::make_unique<FlatExchange>(comm, device, seed, config, quantization, std::move(tensors));
}

GradientExchange::~GradientExchange() = default;

std::vector<int> GradientExchange::bucket_of(const std::vector<ExchangeTensor>& tensors, double bucket_mb) {
  const double bucket_bytes = bucket_mb * 1024.0 * 1024.0;
  double filled = 0;
  int buckets = 0;
  std::vector<int> out(tensors.size(), 0);
  for (int t = static_cast<int>(tensors.size()) - 1; t >= 0; --t) {
    if (buckets == 0 || filled >= bucket_bytes) {
      ++buckets;
      filled = 0;
    }
    out[static_cast<size_t>(t)] = buckets - 1;
    filled += 4.0 * static_cast<double>(tensors[static_cast<size_t>(t)].numel);
  }
  return out;
}

void GradientExchange::begin_step(Tensor grads, uint64_t step) {
  QT_CHECK(grads.dtype() == DType::f32 && grads.device() == device_, "gradients must be f32 on {}, got {} on {}",
           device_.str(), dtype_name(grads.dtype()), grads.device().str());
  for (const ExchangeTensor& x : tensors())
    QT_CHECK(x.offset + x.numel <= grads.numel(), "tensor {} lies outside the gradient arena", x.name);
  impl_->begin_step(std::move(grads), step);
}

void GradientExchange::tensor_ready(Context& compute, int t) {
  QT_CHECK(t >= 0 && t < static_cast<int>(tensors().size()), "tensor index {} out of range", t);
  impl_->tensor_ready(compute, t);
}

void GradientExchange::finish_step() { impl_->finish_step(); }

void GradientExchange::wait_buckets(int n, Context& consumer) { impl_->wait_buckets(n, consumer); }

void GradientExchange::exchange(Context& compute, Tensor grads, uint64_t step) {
  begin_step(std::move(grads), step);
  for (int t = static_cast<int>(tensors().size()) - 1; t >= 0; --t) tensor_ready(compute, t);
  finish_step();
}

void GradientExchange::exchange_now(Tensor grads, uint64_t step, const std::vector<int>& ids) {
  QT_CHECK(grads.dtype() == DType::f32 && grads.device() == device_, "gradients must be f32 on {}, got {} on {}",
           device_.str(), dtype_name(grads.dtype()), grads.device().str());
  for (int t : ids) {
    QT_CHECK(t >= 0 && t < static_cast<int>(tensors().size()), "tensor index {} out of range", t);
    const ExchangeTensor& x = tensors()[static_cast<size_t>(t)];
    QT_CHECK(x.offset + x.numel <= grads.numel(), "tensor {} lies outside the gradient arena", x.name);
  }
  impl_->exchange_now(std::move(grads), step, ids);
}

ExchangeStats GradientExchange::take_stats() { return impl_->take_stats(); }

std::vector<std::pair<std::string, Tensor>> GradientExchange::state() { return impl_->state(); }

}  // namespace qtrain
