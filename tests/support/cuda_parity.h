// Helpers of the CPU-vs-CUDA parity tests (label cuda): moving tensors to and from the GPU with the
// fences the layers' streams need, and an element-wise comparison that names the worst element.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "framework/core/context.h"
#include "framework/core/tensor.h"

namespace qtrain::testing {

inline constexpr double kUnit = 5.9604644775390625e-8;  // u = 2^-24, the unit roundoff of f32
inline const Device kGpu = Device::cuda(0);

// Tensor::to() copies on the legacy default stream while layers run on the context's non-blocking
// stream, which does not wait for it; a pageable host-to-device copy may return before its DMA
// lands. A device-to-host copy on the same legacy stream returns only when everything queued before
// it is done, so reading one element back fences the uploads (and any cudaMemset of Tensor::zeros).
inline void fence_legacy_stream(const Tensor& on_gpu) {
  if (on_gpu.numel() > 0) (void)on_gpu.view(0, {1}).to(Device::cpu());
}

inline Tensor upload(const Tensor& host) {
  Tensor t = host.to(kGpu);
  fence_legacy_stream(t);
  return t;
}

inline Tensor download(Context& ctx, const Tensor& t) {
  ctx.synchronize();
  return t.to(Device::cpu());
}

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(t.data<float>()[i])));
  return m;
}

// Every element within atol + rtol |ref| (f32 tensors of the same shape); reports how many are not
// and the worst one.
inline void require_close(const Tensor& got, const Tensor& ref, double atol, double rtol, const std::string& what) {
  REQUIRE(got.shape() == ref.shape());
  int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.data<float>()[i], r = ref.data<float>()[i];
    const double excess = std::fabs(g - r) - (atol + rtol * std::fabs(r));
    if (!(excess <= 0)) {
      ++bad;
      if (worst < 0 || excess > worst_excess) worst = i, worst_excess = excess;
    }
  }
  INFO(what << ": " << bad << " of " << ref.numel() << " elements outside atol " << atol << " + rtol " << rtol
            << (worst >= 0
                    ? " (worst at " + std::to_string(worst) + ": got " + std::to_string(got.data<float>()[worst]) +
                          ", want " + std::to_string(ref.data<float>()[worst]) + ")"
                    : std::string()));
  REQUIRE(bad == 0);
}

}  // namespace qtrain::testing
