// softmax_cross_entropy: argument checks and the CPU reference, one pass per row: max, sum of
// exponentials, then the loss and (optionally) the gradient. The per-sample losses are summed in
// double so the reported loss does not depend on the batch size's rounding.
#include "layers/softmax_cross_entropy.h"

#include <cmath>

#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

[[noreturn]] void bad_label(int64_t sample, int32_t label, int64_t classes) {
  input_error("softmax_cross_entropy: label {} of sample {} is outside [0, {})", label, sample, classes);
}

template <typename T>
LossStats compute_cpu(const T* __restrict z, const int32_t* __restrict labels, T* __restrict dz, int64_t batch,
                      int64_t classes) {
  // Validate all labels first so that an error leaves dlogits untouched.
  for (int64_t r = 0; r < batch; ++r)
    if (labels[r] < 0 || labels[r] >= classes) bad_label(r, labels[r], classes);
  LossStats stats;
  stats.count = batch;
  const T inv_batch = T(1) / static_cast<T>(batch);
  for (int64_t r = 0; r < batch; ++r) {
    const T* __restrict row = z + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;
    const T max = row[best];
    T* __restrict drow = dz ? dz + r * classes : nullptr;
    T sum = 0;
    if (drow) {
      // Keep the exponentials in the gradient row: the second pass only scales them.
      for (int64_t c = 0; c < classes; ++c) sum += (drow[c] = std::exp(row[c] - max));
    } else {
      for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - max);
    }
    const int32_t label = labels[r];
    stats.loss_sum += static_cast<double>(std::log(sum) - (row[label] - max));
    stats.correct += best == label ? 1 : 0;
    if (drow) {
      const T scale = T(1) / sum * inv_batch;
      for (int64_t c = 0; c < classes; ++c) drow[c] *= scale;
      drow[label] -= inv_batch;
    }
  }
  return stats;
}

}  // namespace

LossStats SoftmaxCrossEntropy::compute(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor* dlogits) {
  const char* who = "softmax_cross_entropy";
  layer_detail::check_float(who, "logits", logits, ctx);
  QT_CHECK(logits.ndim() == 2 && logits.dim(1) > 0, "{}: logits must be (batch, classes), got {}", who,
           shape_str(logits.shape()));
  const int64_t batch = logits.dim(0), classes = logits.dim(1);
  QT_CHECK(
      labels.defined() && labels.dtype() == DType::i32 && labels.numel() == batch && labels.device() == logits.device(),
      "{}: labels must be {} i32 values on {}, got {} {} on {}", who, batch, logits.device().str(), labels.numel(),
      dtype_name(labels.dtype()), labels.device().str());
  if (dlogits) {
    layer_detail::check_float(who, "dlogits", *dlogits, ctx);
    layer_detail::check_batch(who, "dlogits", *dlogits, batch, classes, logits.dtype());
  }
  if (batch == 0) return {};
#if QTRAIN_HAS_CUDA  // a CUDA tensor exists only in builds with the toolkit
  if (logits.device().is_cuda()) {
    if (scratch_.row_loss.numel() < batch) {
      scratch_.row_loss = Tensor::empty({batch}, DType::f32, logits.device());
      scratch_.row_status = Tensor::empty({batch}, DType::i32, logits.device());
      scratch_.host_loss = Tensor::empty({batch}, DType::f32);
      scratch_.host_status = Tensor::empty({batch}, DType::i32);
    }
    return softmax_cross_entropy_cuda(ctx, logits, labels, dlogits, scratch_);
  }
#endif
  LossStats stats;
  dispatch_float(logits.dtype(), [&]<typename T>() {
    stats = compute_cpu<T>(logits.data<T>(), labels.data<int32_t>(), dlogits ? dlogits->data<T>() : nullptr, batch,
                           classes);
  });
  return stats;
}

std::unique_ptr<Loss> make_softmax_cross_entropy(ConfigNode& cfg) {
  cfg.finish();
  return std::make_unique<SoftmaxCrossEntropy>();
}

}  // namespace qtrain
