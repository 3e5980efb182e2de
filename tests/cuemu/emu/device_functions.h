// What device code sees under the emulator: the built-in variables, barriers, warp collectives,
// atomics, and the intrinsics and conversions qtrain's kernels use, with CUDA's documented semantics
// rather than x86's where the two differ (docs/gpu-checklist.md lists which are exact and which
// approximate a GPU's result).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tests/cuemu/emu/scheduler.h"

// Execution space and storage qualifiers. Static __shared__ variables are statics of one section that
// the scheduler poisons at the start of every block (the block's shared memory).
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static __attribute__((section("cuemu_shared"), aligned(16)))
#define __constant__ static
#define __launch_bounds__(...)
#define __restrict__ __restrict

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

namespace cuemu::device {
inline uint3 as_uint3(const uint3v& v) { return {v.x, v.y, v.z}; }
}  // namespace cuemu::device

#define threadIdx (::cuemu::device::as_uint3(::cuemu::thread_index()))
#define blockIdx (::cuemu::device::as_uint3(::cuemu::block_index()))
#define blockDim (::cuemu::device::as_uint3(::cuemu::block_dim()))
#define gridDim (::cuemu::device::as_uint3(::cuemu::grid_dim()))
constexpr int warpSize = 32;

// ---- Barriers and warp collectives: macros, so a message can name the line that waits ----

#define CUEMU_SITE (::cuemu::Site{__FILE__, __LINE__})
#define __syncthreads() ::cuemu::sync_block(CUEMU_SITE)
#define __syncwarp(...) ::cuemu::device::syncwarp(CUEMU_SITE, ##__VA_ARGS__)
#define __shfl_sync(...) ::cuemu::device::shfl(CUEMU_SITE, ::cuemu::Collective::ShflIdx, __VA_ARGS__)
#define __shfl_xor_sync(...) ::cuemu::device::shfl(CUEMU_SITE, ::cuemu::Collective::ShflXor, __VA_ARGS__)
#define __shfl_up_sync(...) ::cuemu::device::shfl(CUEMU_SITE, ::cuemu::Collective::ShflUp, __VA_ARGS__)
#define __shfl_down_sync(...) ::cuemu::device::shfl(CUEMU_SITE, ::cuemu::Collective::ShflDown, __VA_ARGS__)
#define __ballot_sync(mask, p) \
  static_cast<unsigned>(::cuemu::warp_collective(CUEMU_SITE, ::cuemu::Collective::Ballot, mask, (p) != 0, 0, 32))
#define __any_sync(mask, p) \
  static_cast<int>(::cuemu::warp_collective(CUEMU_SITE, ::cuemu::Collective::Any, mask, (p) != 0, 0, 32))
#define __all_sync(mask, p) \
  static_cast<int>(::cuemu::warp_collective(CUEMU_SITE, ::cuemu::Collective::All, mask, (p) != 0, 0, 32))

namespace cuemu::device {

inline void syncwarp(Site site, unsigned mask = 0xffffffffu) {
  (void)warp_collective(site, Collective::SyncWarp, mask, 0, 0, 32);
}

template <typename T>
T shfl(Site site, Collective op, unsigned mask, T value, int arg, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_collective(site, op, mask, bits, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace cuemu::device

// ---- Atomics: one launch runs at a time and its threads one after another, so a plain
// read-modify-write is atomic here; the order of the updates is the schedule's ----

template <typename T>
inline T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
inline T atomicSub(T* p, T v) {
  const T old = *p;
  *p = old - v;
  return old;
}
template <typename T>
inline T atomicOr(T* p, T v) {
  const T old = *p;
  *p = old | v;
  return old;
}
template <typename T>
inline T atomicAnd(T* p, T v) {
  const T old = *p;
  *p = old & v;
  return old;
}
template <typename T>
inline T atomicXor(T* p, T v) {
  const T old = *p;
  *p = old ^ v;
  return old;
}
template <typename T>
inline T atomicMax(T* p, T v) {
  const T old = *p;
  if (v > old) *p = v;
  return old;
}
template <typename T>
inline T atomicMin(T* p, T v) {
  const T old = *p;
  if (v < old) *p = v;
  return old;
}
template <typename T>
inline T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <typename T>
inline T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

// Memory fences: a launch's threads run one after another in one address space, so every write is
// already visible to every later read; the fence only has to exist (a last-block reduction calls it).
inline void __threadfence() {}
inline void __threadfence_block() {}

// ---- Bit intrinsics ----

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) {
  int u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __int_as_float(int u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline long long __double_as_longlong(double d) {
  long long u;
  std::memcpy(&u, &d, 8);
  return u;
}
inline double __longlong_as_double(long long u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

// ---- Conversions: CUDA's cvt saturates to the destination's range and turns NaN into 0 (PTX ISA,
// "cvt": "saturation ... NaN results are converted to 0"); x86's cvttss2si returns 0x80000000 for
// both. Plain C++ casts cannot be given these semantics here: an out-of-range cast in a kernel is
// undefined behaviour, which the UBSan variant (float-cast-overflow) reports. ----

namespace cuemu::device {

enum class Round { Nearest, Zero, Down, Up };

inline double round_as(double x, Round r) {
  switch (r) {
    case Round::Nearest: return std::nearbyint(x);  // round half to even: the default rounding mode
    case Round::Zero: return std::trunc(x);
    case Round::Down: return std::floor(x);
    case Round::Up: return std::ceil(x);
  }
  return x;
}

template <typename I>
I saturating_cvt(double x, Round r) {
  if (std::isnan(x)) return 0;
  const double v = round_as(x, r);
  if (v <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  // The largest 64-bit integers are not doubles: compare against 2^bits instead of max().
  if (v >= std::ldexp(1.0, std::numeric_limits<I>::digits)) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

}  // namespace cuemu::device

#define CUEMU_CVT(name, From, To, mode)                                                               \
  inline To name(From x) {                                                                            \
    return ::cuemu::device::saturating_cvt<To>(static_cast<double>(x), ::cuemu::device::Round::mode); \
  }
CUEMU_CVT(__float2int_rn, float, int, Nearest)
CUEMU_CVT(__float2int_rz, float, int, Zero)
CUEMU_CVT(__float2int_rd, float, int, Down)
CUEMU_CVT(__float2int_ru, float, int, Up)
CUEMU_CVT(__float2uint_rn, float, unsigned, Nearest)
CUEMU_CVT(__float2uint_rz, float, unsigned, Zero)
CUEMU_CVT(__float2uint_rd, float, unsigned, Down)
CUEMU_CVT(__float2uint_ru, float, unsigned, Up)
CUEMU_CVT(__float2ll_rn, float, long long, Nearest)
CUEMU_CVT(__float2ll_rz, float, long long, Zero)
CUEMU_CVT(__float2ull_rn, float, unsigned long long, Nearest)
CUEMU_CVT(__float2ull_rz, float, unsigned long long, Zero)
CUEMU_CVT(__double2int_rn, double, int, Nearest)
CUEMU_CVT(__double2int_rz, double, int, Zero)
CUEMU_CVT(__double2uint_rn, double, unsigned, Nearest)
CUEMU_CVT(__double2uint_rz, double, unsigned, Zero)
CUEMU_CVT(__double2ll_rn, double, long long, Nearest)
CUEMU_CVT(__double2ll_rz, double, long long, Zero)
#undef CUEMU_CVT

// int -> float with round to nearest even: x86's cvtsi2ss rounds the same way under the default mode.
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned x) { return static_cast<float>(x); }
inline float __ll2float_rn(long long x) { return static_cast<float>(x); }
inline float __double2float_rn(double x) { return static_cast<float>(x); }

// ---- Arithmetic intrinsics: exact where CUDA's result is correctly rounded, else the nearest
// deterministic stand-in (marked "approximate"; kernels compared bit for bit must not use these) ----

// Correctly rounded on both: IEEE operations with an explicit rounding that is the default one.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __saturatef(float x) { return std::isnan(x) ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

// __fdividef: documented as x/y within 2 ulp, and 0 for 2^126 < |y| < 2^128 (approximate elsewhere).
inline float __fdividef(float x, float y) {
  const float ay = std::fabs(y);
  if (ay > 8.507059173023462e37f && std::isfinite(ay))
    return std::isinf(x) ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
  return x / y;
}
// __expf: the hardware computes ex2.approx(x * log2(e)), the product rounded to float first; the
// product is exact here, ex2 is std::exp2 (approximate: the GPU's ex2.approx is within 2 ulp).
inline float __expf(float x) { return std::exp2(x * 1.44269504088896340736f); }
inline float __exp10f(float x) { return std::exp2(x * 3.32192809488736234787f); }
// __logf: lg2.approx(x) * ln(2) (approximate, as __expf).
inline float __logf(float x) { return std::log2(x) * 0.69314718055994530942f; }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log2(x) * 0.30102999566398119521f; }
inline float __powf(float x, float y) { return std::exp2(y * std::log2(x)); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
// rsqrtf: CUDA's is within 2 ulp; here the correctly rounded 1/sqrt (approximate).
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// The global min/max overloads CUDA's math headers give device code (std's are also usable).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

// The classification functions CUDA's math headers put in the global namespace for device code
// (a kernel may write isnan(v) unqualified, as layers/pool2d.cu does).
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
