// softmax_cross_entropy: the classification loss. Per sample, loss = logsumexp(z) - z[label], computed
// with the max subtracted first so no exp overflows; the gradient of the batch mean is
// (softmax(z) - onehot(label)) / B. Accuracy counts the first arg-max (ties go to the lower class).
#pragma once

#include <memory>

#include "framework/core/loss.h"

namespace qtrain {

// Per-call buffers of the CUDA path, sized on first use and grown only when a larger batch arrives.
struct SoftmaxCrossEntropyScratch {
  Tensor row_loss;    // (B) f32 on the GPU: per-sample loss
  Tensor row_status;  // (B) i32 on the GPU: 1 correct, 0 wrong, -1 label out of range
  Tensor host_loss;   // host copies of the two above
  Tensor host_status;
};

class SoftmaxCrossEntropy : public Loss {
 public:
  const char* type() const override { return "softmax_cross_entropy"; }
  LossStats compute(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor* dlogits) override;

 private:
  SoftmaxCrossEntropyScratch scratch_;
};

// Factory for the loss registry: no keys besides type and name.
std::unique_ptr<Loss> make_softmax_cross_entropy(ConfigNode& cfg);

// CUDA entry point (softmax_cross_entropy.cu; built with the CUDA toolkit only): logits (B, C) f32,
// labels (B) i32, dlogits (B, C) or null, scratch at least B long. Copies the per-sample values to the
// host to build LossStats, which synchronizes ctx's stream.
LossStats softmax_cross_entropy_cuda(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                     SoftmaxCrossEntropyScratch& scratch);

}  // namespace qtrain
