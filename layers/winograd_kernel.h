// winograd_kernel: what the Winograd convolutions F(2x2, 3x3) (winograd.cpp) and F(4x4, 3x3)
// (winograd4.cpp) share, internal to those two files: the work buffer's layout helpers, the AVX-512
// masked row loads of the input transforms, and the register-blocked product kernel that both fuse
// with their output transforms.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "layers/cpu_prefetch.h"
#include "layers/winograd.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace qtrain::winograd_detail {

// Elements of V and D (the weight gradient's transformed dy) of one block of samples: 128 Ki floats,
// 512 KiB, one Zen 3 core's L2 cache, so that the products find the transformed tiles still cached. 64 Ki and
// 256 Ki measured the same on the three ResNet-110 stages (docs/performance.md).
constexpr int64_t kBlockBudget = int64_t{1} << 17;

// Rounds a region of the work buffer up to 16 elements (64 bytes in float).
inline int64_t padded(int64_t n) { return (n + 15) / 16 * 16; }

// Distance between the matrices V[xi] (rows x t) of a block, one per transformed position (16 or 36):
// rounded up to a cache line, plus one more line. Without the skew, rows*t floats are often a multiple
// of 4 KiB (16 channels x 256 tiles of a 32x32 map: 16 KiB), and the transforms' streams, one per xi,
// then all fall into the same set of the 8-way L1 cache and evict each other.
inline int64_t position_stride(int64_t rows, int64_t t) { return padded(rows * t) + 16; }

// Columns of V in winograd_conv: the block's tiles rounded up to whole column blocks of the product
// kernel (kCols<float> is a multiple of kCols<double>).
inline int64_t block_columns(int64_t t) { return (t + 15) / 16 * 16; }

// How far ahead of its reads an input transform prefetches x, in bytes: x is read in order, 2 (or 4)
// rows per tile row, and the hardware's prefetchers stop at each 4 KiB page (one 32x32 plane), so each
// new plane would begin with cache misses.
constexpr int64_t kPrefetchAhead = 4096;

// The loops of the scalar input transforms (double, builds without AVX-512, and the tests' reference):
// tile_row(d, out) for every tile row of every plane of x (n, C, H, W), in memory order, with d the
// P = m + 2 input rows its m x m tiles read (`zero`, a zero row at least w long, outside the image)
// and out its first tile's column of V (C, ldv): tile (s, ty, tx) in column s*tiles + ty*tw + tx of
// channel c's row. With `prefetch`, x is fetched kPrefetchAhead bytes ahead of the m rows a tile row
// begins.
template <int P, typename T, typename F>
void for_tile_rows(const WinogradConv& g, const T* x, int64_t n, T* v, int64_t ldv, const T* zero, bool prefetch,
                   F&& tile_row) {
  constexpr int64_t m = P - 2;
  const T* const x_end = x + n * g.c * g.h * g.w;
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t c = 0; c < g.c; ++c) {
      const T* plane = x + (s * g.c + c) * g.h * g.w;
      for (int64_t ty = 0; ty < g.th; ++ty) {
        const T* ahead = plane + m * ty * g.w + kPrefetchAhead / static_cast<int64_t>(sizeof(T));
        if (prefetch && ahead < x_end)
          prefetch_lines(ahead, static_cast<size_t>(std::min<int64_t>(m * g.w, x_end - ahead)) * sizeof(T));
        const T* d[P];
        for (int64_t r = 0; r < P; ++r) {
          const int64_t iy = m * ty - g.ph + r;
          d[r] = iy >= 0 && iy < g.h ? plane + iy * g.w : zero;
        }
        tile_row(d, v + c * ldv + s * g.tiles() + ty * g.tw);
      }
    }
  }
}

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
// Lanes l of a load of `len` columns starting at column s0 that lie inside the row [0, w).
inline unsigned inside(int64_t s0, int64_t len, int64_t w) {
  const int64_t lo = std::clamp<int64_t>(-s0, 0, len), hi = std::clamp<int64_t>(w - s0, 0, len);
  return ((1u << hi) - 1u) & ~((1u << lo) - 1u);
}

// Columns [s0, s0 + 16) or [s0, s0 + 8) of an input row, zero outside the row and for a row outside
// the image (null). A masked load touches no memory in its masked lanes (columns left or right of the
// row).
[[gnu::always_inline]] inline __m512 load16(const float* row, int64_t s0, int64_t w) {
  return row ? _mm512_maskz_loadu_ps(static_cast<__mmask16>(inside(s0, 16, w)), row + s0) : _mm512_setzero_ps();
}
[[gnu::always_inline]] inline __m256 load8(const float* row, int64_t s0, int64_t w) {
  return row ? _mm256_maskz_loadu_ps(static_cast<__mmask8>(inside(s0, 8, w)), row + s0) : _mm256_setzero_ps();
}

// 32 columns of input rows as two vectors, which the AVX-512 input transforms deinterleave into a lane
// per tile: rows seg[0 .. 16/L) each give 32L/16 columns from column s0 (L = 16: columns [s0, s0 + 32)
// of one row; L = 8: 16 of each of two rows; L = 4: 8 of each of four). F(2x2, 3x3) reads 16 tiles of
// L per tile row from them, F(4x4, 3x3) 8 tiles of L/2. The loads are always inlined: GCC kept
// load_sources<4> a call, 2% of a profile of the convolutions.
template <int L>
[[gnu::always_inline]] inline void load_sources(const float* const* seg, int64_t s0, int64_t w, __m512& lo,
                                                __m512& hi) {
  if constexpr (L == 16) {
    lo = load16(seg[0], s0, w);
    hi = load16(seg[0], s0 + 16, w);
  } else if constexpr (L == 8) {
    lo = load16(seg[0], s0, w);
    hi = load16(seg[1], s0, w);
  } else {
    static_assert(L == 4);
    lo = _mm512_insertf32x8(_mm512_castps256_ps512(load8(seg[0], s0, w)), load8(seg[1], s0, w), 1);
    hi = _mm512_insertf32x8(_mm512_castps256_ps512(load8(seg[2], s0, w)), load8(seg[3], s0, w), 1);
  }
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
template <typename T>
struct Simd;
#if defined(__AVX512F__)
// With AVX-512 the float kernel keeps one 16-lane vector of tiles per row and 16 rows: 16 accumulators
// + 1 of 32 registers, each c step one load of v and 16 FMAs that broadcast u from memory (AVX-512's
// embedded broadcast, no separate vbroadcastss). Against the AVX2 kernel's 6 x 2 ymm blocks that is
// twice the lanes per FMA and 16:1 FMAs per load of v instead of 6:1. Each output entry is still one
// FMA chain over k in order, so both kernels give the same bits.
template <>
struct Simd<float> {
  using V = __m512;
  static constexpr int lanes = 16;
  static constexpr int vectors = 1;  // per row of the (R, kCols) block
  static constexpr int rows = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, float b, V c) { return _mm512_fmadd_ps(a, _mm512_set1_ps(b), c); }
};
#else
template <>
struct Simd<float> {
  using V = __m256;
  static constexpr int lanes = 8;
  static constexpr int vectors = 2;  // 6 x 2 accumulators + 2 + 1 of 16 registers
  static constexpr int rows = 6;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, float b, V c) { return _mm256_fmadd_ps(a, _mm256_set1_ps(b), c); }
};
#endif
template <>
struct Simd<double> {
  using V = __m256d;
  static constexpr int lanes = 4;
  static constexpr int vectors = 2;
  static constexpr int rows = 6;
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V fma(V a, double b, V c) { return _mm256_fmadd_pd(a, _mm256_set1_pd(b), c); }
};
// Columns (tiles) and rows (channels) of the product kernel's register block.
template <typename T>
constexpr int kCols = Simd<T>::vectors* Simd<T>::lanes;
template <typename T>
constexpr int kRows = Simd<T>::rows;
static_assert(kCols<float> == 16 && kCols<double> == 8, "block_columns and grad_columns round up to 16");
#else
template <typename T>
constexpr int kCols = 16;
template <typename T>
constexpr int kRows = 6;
#endif

// out (R, kCols) (leading dimension ldo) = u (R rows of k, leading dimension ldu) . v (k rows of kCols,
// leading dimension ldv), or with `accumulate` out plus that product; each sum runs over k in order
// after out's value (deterministic).
template <typename T, int R>
void product_kernel(const T* __restrict u, int64_t ldu, const T* __restrict v, int64_t ldv, int64_t k,
                    T* __restrict out, int64_t ldo, bool accumulate) {
#if defined(__AVX2__) && defined(__FMA__)
  using S = Simd<T>;
  constexpr int N = S::vectors;
  typename S::V a[R][N];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < N; ++i) a[r][i] = accumulate ? S::load(out + r * ldo + i * S::lanes) : S::zero();
  for (int64_t c = 0; c < k; ++c) {
    typename S::V b[N];
    for (int i = 0; i < N; ++i) b[i] = S::load(v + c * ldv + i * S::lanes);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const T w = u[r * ldu + c];
      for (int i = 0; i < N; ++i) a[r][i] = S::fma(b[i], w, a[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < N; ++i) S::store(out + r * ldo + i * S::lanes, a[r][i]);
#else
  for (int r = 0; r < R; ++r) {
    T acc[kCols<T>] = {};
    if (accumulate) std::copy_n(out + r * ldo, kCols<T>, acc);
    for (int64_t c = 0; c < k; ++c)
      for (int j = 0; j < kCols<T>; ++j) acc[j] += u[r * ldu + c] * v[c * ldv + j];
    std::copy_n(acc, kCols<T>, out + r * ldo);
  }
#endif
}

// product_kernel for `rows` (1 .. kRows<T>) rows: a table of the instantiations.
template <typename T, int... R>
void product_rows(int rows, const T* u, int64_t ldu, const T* v, int64_t ldv, int64_t k, T* out, int64_t ldo,
                  bool accumulate, std::integer_sequence<int, R...>) {
  using Kernel = void (*)(const T*, int64_t, const T*, int64_t, int64_t, T*, int64_t, bool);
  static constexpr Kernel kernels[] = {&product_kernel<T, R + 1>...};
  kernels[rows - 1](u, ldu, v, ldv, k, out, ldo, accumulate);
}

template <typename T>
void product(int rows, const T* u, int64_t ldu, const T* v, int64_t ldv, int64_t k, T* out, int64_t ldo,
             bool accumulate) {
  product_rows(rows, u, ldu, v, ldv, k, out, ldo, accumulate, std::make_integer_sequence<int, kRows<T>>{});
}

}  // namespace qtrain::winograd_detail
