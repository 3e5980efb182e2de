// The native allreduce of fp32, fp16 and bf16 gradients: the tensors of one format are packed into
// one buffer and summed with one collective (tensor fusion). 16-bit tensors are converted into a
// 16-bit buffer, summed (fp32 accumulation where the library allows it) and converted back.
#include <array>

#include "comm/buffer_ops.h"
#include "exchange/algorithms/algorithm.h"
#include "exchange/algorithms/workspace.h"
#include "quant/method.h"

namespace qtrain::exchange {
namespace {

// The element type a tensor is summed in: its cast's (fp16, bf16), else fp32 (the tensors below
// min_numel). A bucket may hold tensors of all three: each type is its own collective, as a collective
// sums one element type.
ReduceType native_type(const TensorPlan& p) {
  const QuantMethodInfo& info = method_info(p.spec.method);
  if (info.cast_bits != 16) return ReduceType::f32;
  return info.brain_float ? ReduceType::bf16 : ReduceType::f16;
}

// Copies (fp32) or converts (16-bit) the tensors of `format` back to back into `stage`.
void pack(Workspace& w, const std::vector<int>& ids, ReduceType format, uint8_t* stage) {
  int64_t at = 0;
  for (int t : ids) {
    if (native_type(w.plan(t)) != format) continue;
    const int64_t n = w.tensor(t).numel;
    if (format == ReduceType::f32)
      copy_buffer(*w.ctx, reinterpret_cast<float*>(stage) + at, w.grad(t), static_cast<size_t>(n) * 4);
    else
      pack_16bit(*w.ctx, w.grad(t), reinterpret_cast<uint16_t*>(stage) + at, n, format == ReduceType::bf16);
    at += n;
  }
}

// The reverse of pack, scaling by the mean's 1/P, and the bytes a ring allreduce sends per tensor.
void unpack(Workspace& w, const std::vector<int>& ids, ReduceType format, const uint8_t* stage) {
  const int P = w.comm.size();
  const size_t elem = format == ReduceType::f32 ? 4 : 2;
  int64_t at = 0;
  for (int t : ids) {
    if (native_type(w.plan(t)) != format) continue;
    const int64_t n = w.tensor(t).numel;
    if (format == ReduceType::f32) {
      copy_buffer(*w.ctx, w.grad(t), reinterpret_cast<const float*>(stage) + at, static_cast<size_t>(n) * 4);
      if (w.scale != 1.0f) scale_buffer(*w.ctx, w.grad(t), n, w.scale);
    } else {
      unpack_16bit(*w.ctx, reinterpret_cast<const uint16_t*>(stage) + at, w.grad(t), n, format == ReduceType::bf16,
                   w.scale);
    }
    // A bandwidth-optimal (ring) allreduce sends 2(P-1)/P of the data from every rank.
    w.stats.bytes_sent_per_tensor[static_cast<size_t>(t)] +=
        2.0 * (P - 1) / P * static_cast<double>(n * static_cast<int64_t>(elem));
    at += n;
  }
}

}  // namespace

void reduce_allreduce(Workspace& w, const std::vector<int>& ids) {
  for (const ReduceType format : std::array{ReduceType::f32, ReduceType::f16, ReduceType::bf16}) {
    int64_t total = 0;
    for (int t : ids)
      if (native_type(w.plan(t)) == format) total += w.tensor(t).numel;
    if (total == 0) continue;
    // In a world of one the fp32 sum is the gradient itself: nothing to move. (16-bit tensors still
    // go through the rounding, which is the effect being studied.)
    if (format == ReduceType::f32 && w.comm.size() == 1 && w.scale == 1.0f) continue;
    const size_t elem = format == ReduceType::f32 ? 4 : 2;
    uint8_t* stage = w.device_bytes(w.stage_dev, static_cast<size_t>(total) * elem);
    auto t0 = Clock::now();
    pack(w, ids, format, stage);
    w.stats.phases.add(Phase::encode, since(t0));
    t0 = Clock::now();
    w.comm.all_reduce_sum(*w.ctx, stage, total, format);
    w.stats.phases.add(Phase::communicate, since(t0));
    t0 = Clock::now();
    unpack(w, ids, format, stage);
    w.stats.phases.add(Phase::decode, since(t0));
  }
}

namespace {

// fp32, fp16 and bf16 values summed by the transport's own allreduce: no plan state.
class NativeAllreduce final : public ExchangeAlgorithm {
 public:
  void plan(TensorPlan&, const ExchangeTensor&, int, const PlanContext&) const override {}
  void reduce(Workspace& w, const std::vector<int>& ids) const override { reduce_allreduce(w, ids); }
  WireCost cost(const QuantSpec& spec, const ExchangeTensor& x) const override {
    const auto n = static_cast<double>(x.numel);
    WireCost c = payload_cost(WireCost::Pattern::allreduce, n * (spec.method == QuantMethod::fp32 ? 4 : 2), n);
    c.sixteen_bit = spec.method != QuantMethod::fp32;
    return c;
  }
};

}  // namespace

const ExchangeAlgorithm& algorithm_allreduce() {
  static const NativeAllreduce algorithm;
  return algorithm;
}

}  // namespace qtrain::exchange
