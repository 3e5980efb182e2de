// allreduce_compact: for the methods whose payload bodies sum elementwise (QuantMethodInfo::
// summable_body: randomk's k values at indices from the stream every rank shares), every rank encodes
// its tensors back to back, the bodies are packed into one f32 buffer and summed with one native
// allreduce (tensor fusion), copied back behind their headers (the same on every rank), and each
// summed payload is decoded once: the sum at the shared positions, zero elsewhere, finished by the
// method's combine (the mean's 1/P). Only the bodies cross the wire, as a native allreduce of
// k values per tensor.
#include <algorithm>

#include "comm/buffer_ops.h"
#include "exchange/algorithms/algorithm.h"
#include "exchange/algorithms/workspace.h"
#include "quant/method.h"
#include "quant/wire.h"

namespace qtrain::exchange {

void reduce_allreduce_compact(Workspace& w, const std::vector<int>& ids) {
  Context& ctx = *w.ctx;
  const int P = w.comm.size();
  auto t0 = Clock::now();
  size_t capacity = 0;
  for (int t : ids) capacity += w.plan(t).quantizer->max_encoded_bytes(w.tensor(t).numel, 1);
  uint8_t* send = w.send_buffer(capacity);
  std::vector<size_t> offset(ids.size() + 1, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = ids[i];
    TensorPlan& p = w.plan(t);
    const int64_t n = w.tensor(t).numel;
    offset[i + 1] =
        offset[i] + p.quantizer->encode(ctx, {w.grad(t), static_cast<size_t>(n)}, 1, p.as<WholeState>().whole,
                                        {send + offset[i], p.quantizer->max_encoded_bytes(n, 1)});
  }
  // The bodies (padding included: zeros, which sum to zeros) back to back as f32 values.
  const size_t body_bytes = offset.back() - ids.size() * wire::kHeaderBytes;
  uint8_t* stage = w.device_bytes(w.stage_dev, std::max<size_t>(body_bytes, 4));
  size_t at = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t len = offset[i + 1] - offset[i] - wire::kHeaderBytes;
    copy_buffer(ctx, stage + at, send + offset[i] + wire::kHeaderBytes, len);
    at += len;
  }
  w.stats.phases.add(Phase::encode, since(t0));

  t0 = Clock::now();
  if (P > 1 && body_bytes > 0) w.comm.all_reduce_sum(ctx, stage, static_cast<int64_t>(body_bytes / 4), ReduceType::f32);
  w.stats.phases.add(Phase::communicate, since(t0));

  t0 = Clock::now();
  at = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = ids[i];
    const int64_t n = w.tensor(t).numel;
    const size_t len = offset[i + 1] - offset[i] - wire::kHeaderBytes;
    copy_buffer(ctx, send + offset[i] + wire::kHeaderBytes, stage + at, len);
    at += len;
    // This rank's own header (the sender's spec, column 1): under deferred checks it is compared on
    // the device and the decoder reads the key there, so nothing comes back to the host.
    w.plan(t).quantizer->decode(ctx, {send + offset[i], offset[i + 1] - offset[i]}, n,
                                {w.grad(t), static_cast<size_t>(n)}, /*column=*/1);
    w.finish_sum(t, w.grad(t), n);
    // A bandwidth-optimal (ring) allreduce sends 2(P-1)/P of the data from every rank.
    w.stats.bytes_sent_per_tensor[static_cast<size_t>(t)] += 2.0 * (P - 1) / P * static_cast<double>(len);
  }
  w.stats.phases.add(Phase::decode, since(t0));
}

namespace {

class AllreduceCompact final : public ExchangeAlgorithm {
 public:
  void plan(TensorPlan& p, const ExchangeTensor& x, int index, const PlanContext& pc) const override {
    QT_CHECK(method_info(p.spec.method).summable_body,
             "quantization method {}: allreduce_compact needs a summable body", quant_method_name(p.spec.method));
    plan_whole(p, x, index, pc);
  }
  void reduce(Workspace& w, const std::vector<int>& ids) const override { reduce_allreduce_compact(w, ids); }
  // Only the bodies are summed: a native allreduce of the payload less its header.
  WireCost cost(const QuantSpec& spec, const ExchangeTensor& x) const override {
    return payload_cost(WireCost::Pattern::allreduce,
                        static_cast<double>(make_quantizer(spec)->max_encoded_bytes(x.numel, 1) - wire::kHeaderBytes),
                        0);
  }
  void state(TensorPlan& p, const std::string& name, std::vector<std::pair<std::string, Tensor>>& out) const override {
    add_state(p.as<WholeState>().whole, name, out);
  }
};

}  // namespace

const ExchangeAlgorithm& algorithm_allreduce_compact() {
  static const AllreduceCompact algorithm;
  return algorithm;
}

}  // namespace qtrain::exchange
