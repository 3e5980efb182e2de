// The loss contract: the last stage of a net, mapping logits and integer labels to a scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/check.h"
#include "framework/core/config_node.h"
#include "framework/core/context.h"
#include "framework/core/registry.h"
#include "framework/core/tensor.h"

namespace qtrain {

struct LossStats {
  double loss_sum = 0;  // sum over the batch of the per-sample loss
  int64_t correct = 0;  // samples whose arg-max logit equals the label
  int64_t count = 0;    // samples in the batch
  // Sequence losses only (CTC): edit distances of the decoded outputs to the targets, summed over the
  // batch. CER = char_errors / chars, WER = word_errors / words; `correct` counts exact decodings.
  int64_t char_errors = 0, chars = 0;
  int64_t word_errors = 0, words = 0;
};

// The targets of a sequence loss, on the CPU: each sample's valid frames of the (B, T, C) logits and
// its target classes, concatenated (Batch::lengths, targets, target_lengths of data/loader.h).
struct SequenceTargets {
  Tensor input_lengths;   // (B) i32
  Tensor targets;         // (>= sum of target_lengths) i32
  Tensor target_lengths;  // (B) i32
};

class Loss {
 public:
  virtual ~Loss() = default;
  virtual const char* type() const = 0;
  // logits: (B, C) f32 or f64; labels: (B) i32, on the logits' device. Returns the batch statistics;
  // when dlogits is non-null, writes d(mean loss over the batch)/d logits into it ((B, C), same dtype).
  // Labels outside [0, C) are an error.
  virtual LossStats compute(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor* dlogits) = 0;

  // Sequence losses (CTC) take (B, T, C) logits and SequenceTargets instead of labels.
  virtual bool is_sequence_loss() const { return false; }
  virtual LossStats compute_sequence(Context& /*ctx*/, const Tensor& /*logits*/, const SequenceTargets& /*targets*/,
                                     Tensor* /*dlogits*/) {
    QT_FAIL("loss {} does not take sequence targets", type());
  }
  // The text of each class (Dataset::vocabulary()), for losses that report word error rates.
  virtual void set_vocabulary(const std::vector<std::string>& /*vocabulary*/) {}
};

using LossRegistry = Registry<Loss, ConfigNode&>;

}  // namespace qtrain
