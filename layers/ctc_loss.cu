// ctc's CUDA path: one thread block per utterance runs the CPU reference's log-space forward-backward
// recursion, in double and in the same operation order (log-softmax of each valid frame, alpha over
// the blank-extended target, beta, then the occupation sums in increasing state order), so the two
// paths differ only by the last-bit differences of CUDA's and glibc's exp/log/log1p. Within a block
// the threads split the states of one time step (and the frames, for the log-softmax and the
// gradient), with a barrier per step.
//
// Why not cudnnCTCLoss_v8: it limits label lengths (256) and takes the gradient w.r.t. its own
// normalization mode, and its summation order is unspecified; this kernel reproduces the reference's
// semantics (blank 0, zero_infinity, the 1/B normalization, zero gradient at padded frames) exactly.
//
// The per-utterance log-likelihoods and the arg-max class of every frame go back to the host, which
// sums the loss in sample order (deterministic) and does the greedy decoding and edit distances.
#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/core/cuda_context.h"
#include "layers/ctc_loss.h"
#include "layers/ctc_loss_kernel.cuh"

namespace qtrain {
namespace {

constexpr int kThreads = 256;

// A device buffer of at least `count` elements; the old one may still be read by queued work.
void grow(Tensor& buffer, int64_t count, DType dtype, Device device, cudaStream_t stream) {
  if (buffer.defined() && buffer.numel() >= count) return;
  if (buffer.defined()) CUDA_CHECK(cudaStreamSynchronize(stream));
  buffer = Tensor::empty({std::max<int64_t>(count, 1)}, dtype, device);
}

}  // namespace

void ctc_loss_cuda(Context& ctx, const Tensor& logits, const int32_t* input_lengths, const int32_t* target_lengths,
                   const int32_t* targets, Tensor* dlogits, CtcCudaScratch& scratch) {
  const int64_t batch = logits.dim(0), frames = logits.dim(1), classes = logits.dim(2);
  QT_CHECK(batch <= 0x7fffffffLL && classes <= 0x7fffffffLL, "ctc: {} samples of {} classes exceed one grid", batch,
           classes);
  const Device device = logits.device();
  cudaStream_t stream = ctx.cuda().stream;
  scratch.host_meta.resize(static_cast<size_t>(kMetaFields * batch));
  int64_t target_total = 0, work_total = 0, log_prob_total = 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t* m = scratch.host_meta.data() + kMetaFields * b;
    m[0] = input_lengths[b];
    m[1] = target_lengths[b];
    m[2] = target_total;
    m[3] = work_total;
    m[4] = log_prob_total;
    target_total += target_lengths[b];
    work_total += static_cast<int64_t>(input_lengths[b]) * (2 * static_cast<int64_t>(target_lengths[b]) + 1);
    log_prob_total += static_cast<int64_t>(input_lengths[b]) * classes;
  }
  grow(scratch.meta, kMetaFields * batch * static_cast<int64_t>(sizeof(int64_t)), DType::u8, device, stream);
  grow(scratch.targets, target_total, DType::i32, device, stream);
  grow(scratch.log_probs, log_prob_total, DType::f64, device, stream);
  grow(scratch.alpha, work_total, DType::f64, device, stream);
  if (dlogits) grow(scratch.beta, work_total, DType::f64, device, stream);
  grow(scratch.log_p, batch, DType::f64, device, stream);
  grow(scratch.best, batch * frames, DType::i32, device, stream);

  // Host-to-device copies from pageable memory return once the data is staged, so the host arrays may
  // change afterwards.
  CUDA_CHECK(cudaMemcpyAsync(scratch.meta.raw(), scratch.host_meta.data(), scratch.host_meta.size() * sizeof(int64_t),
                             cudaMemcpyHostToDevice, stream));
  if (target_total > 0)
    CUDA_CHECK(cudaMemcpyAsync(scratch.targets.raw(), targets, static_cast<size_t>(target_total) * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream));
  ctc_kernel<<<static_cast<unsigned>(batch), kThreads, 0, stream>>>(
      logits.data<float>(), frames, static_cast<int>(classes), static_cast<const long long*>(scratch.meta.raw()),
      scratch.targets.data<int32_t>(), scratch.log_probs.data<double>(), scratch.alpha.data<double>(),
      dlogits ? scratch.beta.data<double>() : nullptr, scratch.log_p.data<double>(), scratch.best.data<int32_t>(),
      dlogits ? dlogits->data<float>() : nullptr, 1.0 / static_cast<double>(batch));
  CUDA_CHECK(cudaGetLastError());

  scratch.host_log_p.resize(static_cast<size_t>(batch));
  scratch.host_best.resize(static_cast<size_t>(batch * frames));
  CUDA_CHECK(cudaMemcpyAsync(scratch.host_log_p.data(), scratch.log_p.raw(),
                             static_cast<size_t>(batch) * sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(scratch.host_best.data(), scratch.best.raw(),
                             static_cast<size_t>(batch * frames) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace qtrain
