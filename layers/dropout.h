// dropout: inverted dropout. In training each element is zeroed with probability p and the survivors
// are scaled by 1/(1-p), so evaluation is the identity. The mask is a pure function of
// (seed, step, layer index) through Philox (framework/core/philox.h): nothing is stored between forward and
// backward, checkpoints need only the step, and the CPU and CUDA paths draw the same mask bit for bit.
// Config key: p in [0, 1) (default 0.5, as in PyTorch).
#pragma once

#include <memory>

#include "framework/core/layer.h"
#include "framework/core/philox.h"

namespace qtrain {

// Salt of dropout's Philox key, so dropout's stream never coincides with another user of (step, layer).
constexpr uint64_t kDropoutSalt = 0xD80Du;

class Dropout : public Layer {
 public:
  explicit Dropout(double p);

  const char* type() const override { return "dropout"; }
  double p() const { return p_; }

  // The key of this layer's mask at ctx.step(). Element i uses word (i % 4) of
  // philox_subsequence_block(key, i / 4) and is kept iff uniform_from_bits(word) > float(p).
  PhiloxKey mask_key(const Context& ctx) const;

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  // Recomputes the mask of the forward call at the same ctx.step() (training mode only).
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // dropout.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  double p_;
};

// Factory for the layer registry: reads p, rejects other keys.
std::unique_ptr<Layer> make_dropout(ConfigNode& cfg);

// CUDA entry point (dropout.cu; built with the CUDA toolkit only): out = keep(i) ? in * scale : 0 with
// the mask of `key` (the same function serves forward, x -> y, and backward, dy -> dx).
void dropout_apply_cuda(Context& ctx, PhiloxKey key, float p, float scale, const Tensor& in, Tensor& out);
// Evaluation mode: a device-to-device copy on ctx's stream (Tensor::copy_from would use another stream).
void dropout_copy_cuda(Context& ctx, const Tensor& in, Tensor& out);

}  // namespace qtrain
