// winograd: the transforms and products of F(2x2, 3x3) and F(3x3, 2x2) (see winograd.h for the
// algebra). Every transform runs over whole rows of tiles with vectorizable inner loops over the
// tile column tx: the vertical transform of a tile row over its input columns, then the horizontal
// one, which writes 16 streams of consecutive tiles, one per transformed position. Inner loops whose
// streams are offsets into one buffer take them as separate __restrict parameters or carry
// `#pragma GCC ivdep`: GCC ignores __restrict on local pointers and gives up on versioning that many
// pairs, and left them scalar.
// The forward and dx products run in this file's own register-blocked kernel fused with the output
// transform (multiply_output); the weight gradient's, reductions over all tiles, in the same kernel on
// a transposed dy transform (channels contiguous, written by an AVX2 transform with in-register 8x8
// transposes), accumulating straight into the transformed sum.
#include "layers/winograd.h"

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "layers/cpu_prefetch.h"
#include "layers/winograd_kernel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace qtrain {

using namespace winograd_detail;  // NOLINT(google-build-using-namespace): this file's own internals

namespace {

// Width of a zero-padded input row: the 2*tw + 2 columns the tiles of one tile row read.
int64_t row_width(const WinogradConv& g) { return 2 * g.tw + 2; }

// The row buffer of the input transform's loops: 4 transformed rows of row_width and a zero input row
// (w <= row_width).
int64_t rows_size(const WinogradConv& g) { return padded(4 * row_width(g)) + padded(g.w); }

// Columns of the weight gradient's transposed dy transform and of its transformed sum: OC rounded up to
// whole column blocks of the product kernel.
int64_t grad_columns(int64_t oc) { return (oc + 15) / 16 * 16; }

// B^T down the columns of one tile row: t0..t3 = (d0 - d2, d1 + d2, d2 - d1, d1 - d3) for the input
// rows d0..d3 (each `w` long).
template <typename T>
void input_columns(const T* __restrict d0, const T* __restrict d1, const T* __restrict d2, const T* __restrict d3,
                   int64_t w, T* __restrict t0, T* __restrict t1, T* __restrict t2, T* __restrict t3) {
  for (int64_t j = 0; j < w; ++j) {
    t0[j] = d0[j] - d2[j];
    t1[j] = d1[j] + d2[j];
    t2[j] = d2[j] - d1[j];
    t3[j] = d1[j] - d3[j];
  }
}

// B^T along one transformed row t for each of tw tiles (tile tx reads t[2tx .. 2tx + 3]): the 4 positions
// of that row, each a stream of consecutive tiles.
template <typename T>
void input_rows(const T* __restrict t, int64_t tw, T* __restrict v0, T* __restrict v1, T* __restrict v2,
                T* __restrict v3) {
  for (int64_t tx = 0; tx < tw; ++tx) {
    const T a = t[2 * tx], b = t[2 * tx + 1], c = t[2 * tx + 2], d = t[2 * tx + 3];
    v0[tx] = a - c;
    v1[tx] = b + c;
    v2[tx] = c - b;
    v3[tx] = b - d;
  }
}

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
// transform_input in AVX-512 registers: 16 tiles per vector, the same operations in the same order as
// the loops below (the same bits). The loops store the 4 transformed rows and read them back at a
// stride of 2 right away, which stalls on store-to-load forwarding, and for the small maps of CIFAR
// networks (tw = 4 or 8 tiles) their vector loops barely start. Here each lane is one tile: the
// columns a tile reads are deinterleaved in registers (its even and odd columns by one two-source
// permute each, and the same for the columns shifted by 2), and a vector holds 16 tiles that are
// consecutive in V: 16 of one tile row, or 2 tile rows of 8 (tw = 8), or 4 of 4 (tw = 4).

template <int L>
void transform_input_avx512(const WinogradConv& g, const float* x, int64_t n, float* v, int64_t ldv,
                            int64_t xi_stride) {
  constexpr int kSegments = 16 / L;  // tile rows per vector
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const int64_t tiles = g.tiles();
  const int64_t plane_size = g.h * g.w;
  const float* const x_end = x + n * g.c * plane_size;
  const int64_t step = 2 * kSegments * g.w;  // the rows a vector of tile rows begins
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t c = 0; c < g.c; ++c) {
      const float* plane = x + (s * g.c + c) * plane_size;
      float* out = v + c * ldv + s * tiles;
      for (int64_t ty0 = 0; ty0 < g.th; ty0 += kSegments) {
        const float* ahead = plane + 2 * ty0 * g.w + kPrefetchAhead / sizeof(float);
        if (ahead < x_end)
          prefetch_lines(ahead, static_cast<size_t>(std::min<int64_t>(step, x_end - ahead)) * sizeof(float));
        for (int64_t tx0 = 0; tx0 < g.tw; tx0 += L) {
          const int64_t lanes =
              L == 16 ? std::min<int64_t>(16, g.tw - tx0) : std::min<int64_t>(kSegments, g.th - ty0) * L;
          const int64_t s0 = 2 * tx0 - g.pw;
          // t[k][j]: B^T down the columns (t0..t3 = d0 - d2, d1 + d2, d2 - d1, d1 - d3) of the sources
          // j = 0, 1 (from column s0) and 2, 3 (from s0 + 2).
          __m512 t[4][4];
          __m512 d[4][4];
          for (int r = 0; r < 4; ++r) {
            const float* seg[kSegments];
            for (int i = 0; i < kSegments; ++i) {
              const int64_t ty = ty0 + i, iy = 2 * ty - g.ph + r;
              seg[i] = ty < g.th && iy >= 0 && iy < g.h ? plane + iy * g.w : nullptr;
            }
            load_sources<L>(seg, s0, g.w, d[r][0], d[r][1]);
            load_sources<L>(seg, s0 + 2, g.w, d[r][2], d[r][3]);
          }
          for (int j = 0; j < 4; ++j) {
            t[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
            t[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
            t[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
            t[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
          }
          // B^T along the rows: tile columns a, b, c, d = t[2tx], t[2tx + 1], t[2tx + 2], t[2tx + 3].
          const __mmask16 store = static_cast<__mmask16>((1u << lanes) - 1u);
          float* o = out + ty0 * g.tw + tx0;
          for (int k = 0; k < 4; ++k) {
            const __m512 a = _mm512_permutex2var_ps(t[k][0], even, t[k][1]);
            const __m512 b = _mm512_permutex2var_ps(t[k][0], odd, t[k][1]);
            const __m512 cc = _mm512_permutex2var_ps(t[k][2], even, t[k][3]);
            const __m512 dd = _mm512_permutex2var_ps(t[k][2], odd, t[k][3]);
            _mm512_mask_storeu_ps(o + (4 * k) * xi_stride, store, _mm512_sub_ps(a, cc));
            _mm512_mask_storeu_ps(o + (4 * k + 1) * xi_stride, store, _mm512_add_ps(b, cc));
            _mm512_mask_storeu_ps(o + (4 * k + 2) * xi_stride, store, _mm512_sub_ps(cc, b));
            _mm512_mask_storeu_ps(o + (4 * k + 3) * xi_stride, store, _mm512_sub_ps(b, dd));
          }
        }
      }
    }
  }
}
#endif

// v: B^T d B for every tile of n samples x (n, C, H, W); V[xi] (C, ldv) at v + xi * xi_stride, tile
// (s, ty, tx) in column s*tiles + ty*tw + tx. Rows above or below the image read a zero row; the
// column padding is the zero margin of the 4 transformed rows (width row_width), which only their
// middle w columns overwrite. Without `reference` a float transform runs in AVX-512 where the build
// has it (the same bits).
template <typename T>
void transform_input(const WinogradConv& g, const T* x, int64_t n, T* v, int64_t ldv, int64_t xi_stride, T* rows,
                     bool reference = false) {
#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
  if constexpr (std::is_same_v<T, float>) {
    if (!reference) {
      if (g.tw == 4) return transform_input_avx512<4>(g, x, n, v, ldv, xi_stride);
      if (g.tw == 8) return transform_input_avx512<8>(g, x, n, v, ldv, xi_stride);
      return transform_input_avx512<16>(g, x, n, v, ldv, xi_stride);
    }
  }
#endif
  const int64_t wp = row_width(g), tw = g.tw;
  T* t = rows;  // 4 rows of wp
  T* zero = rows + 4 * wp;
  std::fill_n(t, 4 * wp, T(0));
  std::fill_n(zero, g.w, T(0));
  for_tile_rows<4>(g, x, n, v, ldv, zero, !reference, [&](const T* const(&d)[4], T* out) {
    input_columns(d[0], d[1], d[2], d[3], g.w, t + g.pw, t + wp + g.pw, t + 2 * wp + g.pw, t + 3 * wp + g.pw);
    for (int64_t k = 0; k < 4; ++k)
      input_rows(t + k * wp, tw, out + 4 * k * xi_stride, out + (4 * k + 1) * xi_stride, out + (4 * k + 2) * xi_stride,
                 out + (4 * k + 3) * xi_stride);
  });
}

// The products M[xi] = U[xi] V[xi] and the output transform, fused: for each column block of kCols
// tiles and each group of kRows output channels, a register-blocked kernel computes the 16 positions'
// (kRows, kCols) products into a small buffer (16 * kRows * kCols elements, L1-resident) and the
// output transform turns them into the 2x2 output tiles right away. Against 16 OpenBLAS GEMMs this
// skips packing V (already in the kernel's layout: rows of consecutive tiles), zeroing M (beta = 0)
// and writing and re-reading M (as large as V) through the caches: with C = 16, each GEMM output
// entry is only 16 multiply-adds, so those passes cost as much as the arithmetic.
// The kernel (product) is in winograd_kernel.h, shared with F(4x4, 3x3).
//
// The product buffer of multiply_output, in elements of either type.
constexpr int64_t kProductBuffer = 16 * std::max(kRows<float> * kCols<float>, kRows<double>* kCols<double>);

// One output row of a run of tiles: out[2j] = left[j] + b, out[2j + 1] = right[j] + b for `whole`
// tiles, then the left column of a cut last tile.
template <typename T>
void store_row(T* __restrict out, const T* __restrict left, const T* __restrict right, int whole, bool cut, T b) {
  for (int j = 0; j < whole; ++j) {
    out[2 * j] = left[j] + b;
    out[2 * j + 1] = right[j] + b;
  }
  if (cut) out[2 * whole] = left[whole] + b;
}

// y (n, OC, OH, OW) (+ bias) from V of one block (V[xi] (C, ldv) at v + xi * xi_stride, t tiles in
// transform_input's order, columns t..ldv zero, ldv a multiple of kCols) and u (16, OC, C).
// `buf` holds 16 * kRows * kCols elements.
template <typename T>
void multiply_output(const WinogradConv& g, const T* u, const T* v, int64_t ldv, int64_t xi_stride, int64_t t,
                     const T* bias, T* y, T* buf) {
  constexpr int L = kCols<T>;
  const int64_t plane = g.oh * g.ow, tiles = g.tiles();
  // The block's tiles as runs of consecutive tiles along one tile row: each run's outputs are two
  // contiguous output rows (or one at an odd OH's end), the last tile cut to one column at an odd OW's end.
  struct Run {
    int first, count;
    int64_t at;      // offset in y of the run's first output, less its channel's plane
    bool down;       // the second output row exists
    bool cut_right;  // the run ends at an odd OW: its last tile has one column
  };
  Run runs[L];
  for (int64_t t0 = 0; t0 < t; t0 += L) {
    const int nt = static_cast<int>(std::min<int64_t>(L, t - t0));
    int nruns = 0;
    for (int j = 0; j < nt;) {
      const int64_t s = (t0 + j) / tiles, in_sample = (t0 + j) % tiles, ty = in_sample / g.tw, tx = in_sample % g.tw;
      const int count = static_cast<int>(std::min<int64_t>(nt - j, g.tw - tx));
      runs[nruns++] = {j, count, s * g.oc * plane + 2 * ty * g.ow + 2 * tx, 2 * ty + 1 < g.oh, 2 * (tx + count) > g.ow};
      j += count;
    }
    for (int64_t o0 = 0; o0 < g.oc; o0 += kRows<T>) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows<T>, g.oc - o0));
      for (int64_t xi = 0; xi < 16; ++xi)
        product(rows, u + (xi * g.oc + o0) * g.c, g.c, v + xi * xi_stride + t0, ldv, g.c, buf + xi * kRows<T> * L, L,
                false);
      for (int r = 0; r < rows; ++r) {
        // A^T m A: rows m0 + m1 + m2 and m1 - m2 - m3 of the 4x4 m, then the same along each row.
        const T* __restrict m = buf + r * L;
        constexpr int64_t xs = kRows<T> * L;
        T y00[L], y01[L], y10[L], y11[L];
        for (int j = 0; j < L; ++j) {
          const T a0 = m[j] + m[4 * xs + j] + m[8 * xs + j];
          const T a1 = m[xs + j] + m[5 * xs + j] + m[9 * xs + j];
          const T a2 = m[2 * xs + j] + m[6 * xs + j] + m[10 * xs + j];
          const T a3 = m[3 * xs + j] + m[7 * xs + j] + m[11 * xs + j];
          const T c0 = m[4 * xs + j] - m[8 * xs + j] - m[12 * xs + j];
          const T c1 = m[5 * xs + j] - m[9 * xs + j] - m[13 * xs + j];
          const T c2 = m[6 * xs + j] - m[10 * xs + j] - m[14 * xs + j];
          const T c3 = m[7 * xs + j] - m[11 * xs + j] - m[15 * xs + j];
          y00[j] = a0 + a1 + a2;
          y01[j] = a1 - a2 - a3;
          y10[j] = c0 + c1 + c2;
          y11[j] = c1 - c2 - c3;
        }
        const T b = bias ? bias[o0 + r] : T(0);
        T* yo = y + (o0 + r) * plane;
        for (int q = 0; q < nruns; ++q) {
          const Run& run = runs[q];
          const int whole = run.cut_right ? run.count - 1 : run.count;
          store_row(yo + run.at, y00 + run.first, y01 + run.first, whole, run.cut_right, b);
          if (run.down) store_row(yo + run.at + g.ow, y10 + run.first, y11 + run.first, whole, run.cut_right, b);
        }
      }
    }
  }
}

// The weight gradient's dy transform, transposed: D^T[xi] (T, ldo) at d + xi * xi_stride holds
// G' e G'^T of every 2x2 tile e of dy (n, OC, OH, OW) (zero beyond OH or OW), tile (s, ty, tx) in row
// s*tiles + ty*tw + tx, output channel o in column o (columns OC..ldo zero, some -0). G' e: rows
// (e0, (e0 + e1)/2, (e0 - e1)/2, -e1). Transposed, each row of D^T is one tile's channels: the product
// kernel's (k, kCols) operand, so the weight gradient's products run in it without packing.
// This is the scalar loop (double, builds without AVX2, and the reference of the AVX2 one's tests).
template <typename T>
void transform_grad_reference(const WinogradConv& g, const T* dy, int64_t n, T* d, int64_t ldo, int64_t xi_stride) {
  const T half = T(0.5);
  const int64_t tiles = g.tiles();
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t o = 0; o < ldo; ++o) {  // channels OC..ldo: the transform of zeros, as in the AVX2 loop
      const T* plane = dy + (s * g.oc + std::min(o, g.oc - 1)) * g.oh * g.ow;
      auto at = [&](int64_t y, int64_t x) { return o < g.oc && y < g.oh && x < g.ow ? plane[y * g.ow + x] : T(0); };
      for (int64_t ty = 0; ty < g.th; ++ty) {
        for (int64_t tx = 0; tx < g.tw; ++tx) {
          const T al = at(2 * ty, 2 * tx), ar = at(2 * ty, 2 * tx + 1);
          const T bl = at(2 * ty + 1, 2 * tx), br = at(2 * ty + 1, 2 * tx + 1);
          const T e[4] = {al, (al + bl) * half, (al - bl) * half, -bl};
          const T f[4] = {ar, (ar + br) * half, (ar - br) * half, -br};
          T* out = d + (s * tiles + ty * g.tw + tx) * ldo + o;
          for (int64_t k = 0; k < 4; ++k) {
            out[(4 * k) * xi_stride] = e[k];
            out[(4 * k + 1) * xi_stride] = (e[k] + f[k]) * half;
            out[(4 * k + 2) * xi_stride] = (e[k] - f[k]) * half;
            out[(4 * k + 3) * xi_stride] = -f[k];
          }
        }
      }
    }
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// r[j] (j = 0..7) becomes the column j of the 8x8 matrix whose rows were r[0..7].
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// transform_grad_reference in AVX2, 8 output channels per vector: each 8x8 block of the two dy rows of
// a tile row of 8 channels (8 channels x 4 tiles' columns, read in place, zero past OW and for rows or
// channels that do not exist) is transposed in registers into one vector of channels per column, and
// the transform of each tile then writes its 16 positions as one vector store each. The same
// operations as the reference: the same bits. (The rows were first copied into a zero-padded buffer:
// 3% of a ResNet-110 step in memmove.)
void transform_grad_avx2(const WinogradConv& g, const float* dy, int64_t n, float* d, int64_t ldo, int64_t xi_stride) {
  const int64_t tw = g.tw, tiles = g.tiles();
  const __m256 half = _mm256_set1_ps(0.5f), sign = _mm256_set1_ps(-0.0f);
  const __m256i lane_index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // The 8 channels' planes are 8 streams, each in a page of its own (a 32x32 plane is one 4 KiB page),
  // where the hardware's prefetchers stop: fetch the rows kAheadRows ahead in the same planes, and
  // near a plane's end the first rows of the next group's planes.
  constexpr int64_t kAheadRows = 4;
  const float* const dy_end = dy + n * g.oc * g.oh * g.ow;
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t o0 = 0; o0 < ldo; o0 += 8) {
      for (int64_t ty = 0; ty < g.th; ++ty) {
        {
          int64_t iy = 2 * ty + kAheadRows, group = s * g.oc + o0;
          if (iy >= g.oh) {
            iy -= g.oh;
            group += 8;
          }
          for (int64_t r = 0; r < 2 && iy + r < g.oh; ++r)
            for (int64_t ch = 0; ch < 8; ++ch) {
              const float* p = dy + ((group + ch) * g.oh + iy + r) * g.ow;
              if (p < dy_end)
                prefetch_lines(p, static_cast<size_t>(std::min<int64_t>(g.ow, dy_end - p)) * sizeof(float));
            }
        }
        // The 16 dy rows of this tile row (8 channels x 2 rows), null where the channel or the row does
        // not exist: read in place, 8 columns at a time, the columns past OW masked to zero.
        const float* src[16];
        for (int64_t r = 0; r < 2; ++r) {
          const int64_t iy = 2 * ty + r;
          for (int64_t ch = 0; ch < 8; ++ch)
            src[r * 8 + ch] = o0 + ch < g.oc && iy < g.oh ? dy + ((s * g.oc + o0 + ch) * g.oh + iy) * g.ow : nullptr;
        }
        float* out = d + (s * tiles + ty * tw) * ldo + o0;
        for (int64_t x0 = 0; x0 < 2 * tw; x0 += 8) {
          const int64_t inside = std::clamp<int64_t>(g.ow - x0, 0, 8);
          const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(inside)), lane_index);
          auto load = [&](const float* row) {
            if (!row) return _mm256_setzero_ps();
            return inside == 8 ? _mm256_loadu_ps(row + x0) : _mm256_maskload_ps(row + x0, mask);
          };
          __m256 a[8], b[8];
          for (int ch = 0; ch < 8; ++ch) {
            a[ch] = load(src[ch]);
            b[ch] = load(src[8 + ch]);
          }
          transpose8(a);
          transpose8(b);
          const int64_t nt = std::min<int64_t>(4, tw - x0 / 2);
          for (int64_t m = 0; m < nt; ++m) {
            const __m256 al = a[2 * m], ar = a[2 * m + 1], bl = b[2 * m], br = b[2 * m + 1];
            const __m256 e[4] = {al, _mm256_mul_ps(_mm256_add_ps(al, bl), half),
                                 _mm256_mul_ps(_mm256_sub_ps(al, bl), half), _mm256_xor_ps(bl, sign)};
            const __m256 f[4] = {ar, _mm256_mul_ps(_mm256_add_ps(ar, br), half),
                                 _mm256_mul_ps(_mm256_sub_ps(ar, br), half), _mm256_xor_ps(br, sign)};
            float* p = out + (x0 / 2 + m) * ldo;
            for (int k = 0; k < 4; ++k) {
              _mm256_storeu_ps(p + (4 * k) * xi_stride, e[k]);
              _mm256_storeu_ps(p + (4 * k + 1) * xi_stride, _mm256_mul_ps(_mm256_add_ps(e[k], f[k]), half));
              _mm256_storeu_ps(p + (4 * k + 2) * xi_stride, _mm256_mul_ps(_mm256_sub_ps(e[k], f[k]), half));
              _mm256_storeu_ps(p + (4 * k + 3) * xi_stride, _mm256_xor_ps(f[k], sign));
            }
          }
        }
      }
    }
  }
}
#endif

template <typename T>
void transform_grad(const WinogradConv& g, const T* dy, int64_t n, T* d, int64_t ldo, int64_t xi_stride,
                    bool reference) {
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {
    if (!reference) return transform_grad_avx2(g, dy, n, d, ldo, xi_stride);
  }
#endif
  (void)reference;
  transform_grad_reference(g, dy, n, d, ldo, xi_stride);
}

}  // namespace

WinogradConv WinogradConv::forward_of(const ImageGeometry& g, const Window2d& win, int64_t out_channels, int64_t m) {
  WinogradConv w;
  w.m = m;
  w.c = g.c;
  w.h = g.h;
  w.w = g.w;
  w.oc = out_channels;
  w.oh = g.oh;
  w.ow = g.ow;
  w.ph = win.ph;
  w.pw = win.pw;
  w.th = (w.oh + m - 1) / m;
  w.tw = (w.ow + m - 1) / m;
  return w;
}

WinogradConv WinogradConv::dx_of(const ImageGeometry& g, const Window2d& win, int64_t out_channels, int64_t m) {
  // dx is the convolution of dy with the flipped, transposed kernel and padding k - 1 - p = 2 - p.
  Window2d flipped = win;
  flipped.ph = 2 - win.ph;
  flipped.pw = 2 - win.pw;
  return forward_of(g.transposed(out_channels), flipped, g.c, m);
}

int64_t winograd_block_samples(const WinogradConv& g, int64_t samples) {
  const int64_t per_sample = 16 * (g.c + g.oc) * g.tiles();
  return std::clamp<int64_t>(kBlockBudget / std::max<int64_t>(per_sample, 1), 1, std::max<int64_t>(samples, 1));
}

int64_t winograd_work_size(const WinogradConv& g, int64_t block) {
  // winograd_conv: V with whole column blocks, the row buffers and the product buffer;
  // winograd_weight_grad: V, the transposed D and the row buffers.
  const int64_t t = block * g.tiles();
  return std::max(16 * position_stride(g.c, block_columns(t)) + rows_size(g) + kProductBuffer,
                  16 * (position_stride(g.c, t) + position_stride(t, grad_columns(g.oc))) + rows_size(g));
}

int64_t winograd_weight_grad_size(const WinogradConv& g) { return 16 * g.c * grad_columns(g.oc); }

template <typename T>
void winograd_weights(const T* w, int64_t oc, int64_t c, bool flipped, T* u) {
  const T half = T(0.5);
  for (int64_t o = 0; o < oc; ++o) {
    for (int64_t ci = 0; ci < c; ++ci) {
      const T* k = w + (o * c + ci) * 9;
      T f[3][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) f[i][j] = flipped ? k[(2 - i) * 3 + (2 - j)] : k[i * 3 + j];
      // G f: rows (f0, (f0 + f1 + f2)/2, (f0 - f1 + f2)/2, f2); then the same along each row.
      T q[4][3];
      for (int j = 0; j < 3; ++j) {
        q[0][j] = f[0][j];
        q[1][j] = (f[0][j] + f[1][j] + f[2][j]) * half;
        q[2][j] = (f[0][j] - f[1][j] + f[2][j]) * half;
        q[3][j] = f[2][j];
      }
      const int64_t at = flipped ? ci * oc + o : o * c + ci, stride = oc * c;
      for (int a = 0; a < 4; ++a) {
        u[(4 * a) * stride + at] = q[a][0];
        u[(4 * a + 1) * stride + at] = (q[a][0] + q[a][1] + q[a][2]) * half;
        u[(4 * a + 2) * stride + at] = (q[a][0] - q[a][1] + q[a][2]) * half;
        u[(4 * a + 3) * stride + at] = q[a][2];
      }
    }
  }
}

template <typename T>
void winograd_conv(const WinogradConv& g, const T* u, const T* bias, const T* x, T* y, int64_t n, int64_t block,
                   T* work) {
  const int64_t tiles = g.tiles();
  T* v = work;
  T* rows = v + 16 * position_stride(g.c, block_columns(block * tiles));
  T* buf = rows + rows_size(g);
  for (int64_t s0 = 0; s0 < n; s0 += block) {
    const int64_t nb = std::min(block, n - s0), t = nb * tiles, ldv = block_columns(t);
    const int64_t vs = position_stride(g.c, ldv);
    transform_input(g, x + s0 * g.in_size(), nb, v, ldv, vs, rows);
    // The product kernel reads whole column blocks: zero the columns past the last tile.
    if (ldv > t)
      for (int64_t xi = 0; xi < 16; ++xi)
        for (int64_t c = 0; c < g.c; ++c) std::fill(v + xi * vs + c * ldv + t, v + xi * vs + (c + 1) * ldv, T(0));
    multiply_output(g, u, v, ldv, vs, t, bias, y + s0 * g.out_size(), buf);
  }
}

template <typename T>
void winograd_weight_grad(const WinogradConv& g, const T* x, const T* dy, int64_t n, int64_t block, T* work, T* dwt,
                          bool accumulate) {
  const int64_t ldo = grad_columns(g.oc);
  if (n == 0) {
    if (!accumulate) std::fill_n(dwt, winograd_weight_grad_size(g), T(0));
    return;
  }
  const int64_t tiles = g.tiles();
  T* v = work;
  T* d = v + 16 * position_stride(g.c, block * tiles);
  T* rows = d + 16 * position_stride(block * tiles, ldo);
  for (int64_t s0 = 0; s0 < n; s0 += block) {
    const int64_t nb = std::min(block, n - s0), t = nb * tiles;
    const int64_t vs = position_stride(g.c, t), ds = position_stride(t, ldo);
    transform_input(g, x + s0 * g.in_size(), nb, v, t, vs, rows);
    transform_grad(g, dy + s0 * g.out_size(), nb, d, ldo, ds, false);
    // dWhat^T[xi] (C, ldo) (+)= V[xi] (C, T) . D^T[xi] (T, ldo): per entry one sum over the tiles in
    // order, continued from the previous block's value (the same order for any block size).
    for (int64_t xi = 0; xi < 16; ++xi)
      for (int64_t c0 = 0; c0 < g.c; c0 += kRows<T>) {
        const int rows_here = static_cast<int>(std::min<int64_t>(kRows<T>, g.c - c0));
        for (int64_t o0 = 0; o0 < ldo; o0 += kCols<T>)
          product(rows_here, v + xi * vs + c0 * t, t, d + xi * ds + o0, ldo, t, dwt + (xi * g.c + c0) * ldo + o0, ldo,
                  s0 > 0 || accumulate);
      }
  }
}

template <typename T>
void winograd_input_transform(const WinogradConv& g, const T* x, int64_t n, T* v, bool reference) {
  const int64_t t = n * g.tiles();
  std::vector<T> rows(static_cast<size_t>(rows_size(g)));
  transform_input(g, x, n, v, t, g.c * t, rows.data(), reference);
}

template <typename T>
void winograd_weight_grad_transform(const WinogradConv& g, const T* dy, int64_t n, T* d, bool reference) {
  const int64_t t = n * g.tiles();
  transform_grad(g, dy, n, d, grad_columns(g.oc), t * grad_columns(g.oc), reference);
}

template <typename T>
void winograd_weight_grad_output(const T* dwt, int64_t oc, int64_t c, T* dw) {
  const int64_t ldo = grad_columns(oc), stride = c * ldo;
  for (int64_t o = 0; o < oc; ++o) {
    for (int64_t ci = 0; ci < c; ++ci) {
      T m[4][4];
      for (int xi = 0; xi < 16; ++xi) m[xi / 4][xi % 4] = dwt[xi * stride + ci * ldo + o];
      // A'^T m: rows (m0 + m1 + m2, m1 - m2, m1 + m2 + m3); then the same along each row.
      T r[3][4];
      for (int l = 0; l < 4; ++l) {
        r[0][l] = m[0][l] + m[1][l] + m[2][l];
        r[1][l] = m[1][l] - m[2][l];
        r[2][l] = m[1][l] + m[2][l] + m[3][l];
      }
      T* out = dw + (o * c + ci) * 9;
      for (int i = 0; i < 3; ++i) {
        out[i * 3] = r[i][0] + r[i][1] + r[i][2];
        out[i * 3 + 1] = r[i][1] - r[i][2];
        out[i * 3 + 2] = r[i][1] + r[i][2] + r[i][3];
      }
    }
  }
}

#define QTRAIN_WINOGRAD_INSTANTIATE(T)                                                                            \
  template void winograd_weights<T>(const T*, int64_t, int64_t, bool, T*);                                        \
  template void winograd_conv<T>(const WinogradConv&, const T*, const T*, const T*, T*, int64_t, int64_t, T*);    \
  template void winograd_weight_grad<T>(const WinogradConv&, const T*, const T*, int64_t, int64_t, T*, T*, bool); \
  template void winograd_input_transform<T>(const WinogradConv&, const T*, int64_t, T*, bool);                    \
  template void winograd_weight_grad_transform<T>(const WinogradConv&, const T*, int64_t, T*, bool);              \
  template void winograd_weight_grad_output<T>(const T*, int64_t, int64_t, T*);
QTRAIN_WINOGRAD_INSTANTIATE(float)
QTRAIN_WINOGRAD_INSTANTIATE(double)
#undef QTRAIN_WINOGRAD_INSTANTIATE

}  // namespace qtrain
