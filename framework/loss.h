// The loss contract: the last stage of a net, mapping logits and integer labels to a scalar.
#pragma once

#include <cstdint>

#include "framework/config_node.h"
#include "framework/context.h"
#include "framework/registry.h"
#include "framework/tensor.h"

namespace qtrain {

struct LossStats {
  double loss_sum = 0;  // sum over the batch of the per-sample loss
  int64_t correct = 0;  // samples whose arg-max logit equals the label
  int64_t count = 0;    // samples in the batch
};

class Loss {
 public:
  virtual ~Loss() = default;
  virtual const char* type() const = 0;
  // logits: (B, C) f32 or f64; labels: (B) i32, on the logits' device. Returns the batch statistics;
  // when dlogits is non-null, writes d(mean loss over the batch)/d logits into it ((B, C), same dtype).
  // Labels outside [0, C) are an error.
  virtual LossStats compute(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor* dlogits) = 0;
};

using LossRegistry = Registry<Loss, ConfigNode&>;

}  // namespace qtrain
