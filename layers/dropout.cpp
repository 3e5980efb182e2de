// dropout: configuration and the CPU reference. The keep test is float(uniform) > float(p), exactly
// what the CUDA kernel does with curand_uniform4 (a double comparison would differ for draws between
// float(p) and p), evaluated here as an equivalent integer threshold on the Philox word. Survivors are
// multiplied by one scale computed once in double, so CPU and CUDA agree bit for bit.
#include "layers/dropout.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "framework/core/philox_batch.h"
#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

// The least 32-bit word whose uniform_from_bits exceeds p (2^32 if none does). uniform_from_bits is
// non-decreasing, so "word >= threshold" is exactly the keep test "uniform > p" of the CUDA kernel,
// turned into an integer compare that vectorizes.
uint64_t keep_threshold(float p) {
  uint64_t lo = 0, hi = uint64_t{1} << 32;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (uniform_from_bits(static_cast<uint32_t>(mid)) > p)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// Random words come from framework/core/philox_batch.h, which computes many blocks per call (AVX2 lanes
// where available) with the same arithmetic as philox_subsequence_block: one block at a time is a
// chain of dependent multiplies and cost ~15% of an MLP training step.
constexpr int kBlocks = 32;
constexpr int64_t kChunk = 4 * kBlocks;  // elements per call

// out[i] = keep(i) ? in[i] * scale : 0, element i drawing word i % 4 of block i / 4.
template <typename T>
void apply_mask_cpu(PhiloxKey key, float p, T scale, const T* __restrict in, T* __restrict out, int64_t n) {
  const uint64_t threshold64 = keep_threshold(p);
  if (threshold64 > 0xffffffffu) {
    // float(p) == 1 (p within 2^-25 of 1): no draw exceeds it.
    std::fill_n(out, n, T(0));
    return;
  }
  const uint32_t threshold = static_cast<uint32_t>(threshold64);
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const int64_t chunks = n / kChunk;
  alignas(32) uint32_t words[kChunk];
  for (int64_t c = 0; c < chunks; ++c) {
    philox_subsequence_blocks(key, static_cast<uint64_t>(c) * kBlocks, kBlocks, words);
    const T* __restrict src = in + c * kChunk;
    T* __restrict dst = out + c * kChunk;
    // A select through a bit mask: GCC keeps `keep ? x * scale : 0` as a branch (the multiply might
    // raise a floating-point flag), which mispredicts half the time at p = 0.5 and never vectorizes.
    // All-zero bits are +0, what the CUDA kernel writes.
    for (int j = 0; j < kChunk; ++j) {
      const Bits mask = Bits{0} - static_cast<Bits>(words[j] >= threshold);
      dst[j] = std::bit_cast<T>(std::bit_cast<Bits>(src[j] * scale) & mask);
    }
  }
  for (int64_t i = chunks * kChunk; i < n; ++i) {
    const PhiloxBlock b = philox_subsequence_block(key, static_cast<uint64_t>(i / 4));
    out[i] = b.v[i % 4] >= threshold ? in[i] * scale : T(0);
  }
}

}  // namespace

Dropout::Dropout(double p) : p_(p) { QT_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got {}", p); }

Shape Dropout::configure(const Shape& input) {
  for (int64_t d : input)
    if (d <= 0) input_error("dropout got an input shape {} with an empty dimension", shape_str(input));
  return input;
}

PhiloxKey Dropout::mask_key(const Context& ctx) const {
  return derive_philox_key(ctx.seed(), ctx.step(), static_cast<uint64_t>(index()), kDropoutSalt);
}

void Dropout::forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) {
  if (!training) {
    if (x.nbytes() > 0) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return;
  }
  dispatch_float(x.dtype(), [&]<typename T>() {
    apply_mask_cpu<T>(mask_key(ctx), static_cast<float>(p_), static_cast<T>(1.0 / (1.0 - p_)), x.data<T>(), y.data<T>(),
                      x.numel());
  });
}

#if QTRAIN_HAS_CUDA
void Dropout::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) {
  if (!training) return dropout_copy_cuda(ctx, x, y);
  dropout_apply_cuda(ctx, mask_key(ctx), static_cast<float>(p_), static_cast<float>(1.0 / (1.0 - p_)), x, y);
}
#endif

void Dropout::backward_cpu(Context& ctx, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  dispatch_float(dy.dtype(), [&]<typename T>() {
    apply_mask_cpu<T>(mask_key(ctx), static_cast<float>(p_), static_cast<T>(1.0 / (1.0 - p_)), dy.data<T>(),
                      dx.data<T>(), dy.numel());
  });
}

#if QTRAIN_HAS_CUDA
void Dropout::backward_cuda(Context& ctx, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  dropout_apply_cuda(ctx, mask_key(ctx), static_cast<float>(p_), static_cast<float>(1.0 / (1.0 - p_)), dy, dx);
}
#endif

std::unique_ptr<Layer> make_dropout(ConfigNode& cfg) {
  const double p = cfg.get<double>("p", 0.5);
  // Written as !(in range) so that NaN is rejected too.
  if (!(p >= 0.0 && p < 1.0)) cfg.fail("p", fmt::format("must be in [0, 1), got {}", p));
  cfg.finish();
  return std::make_unique<Dropout>(p);
}

}  // namespace qtrain
