// winograd4: the transforms and products of F(4x4, 3x3) (see winograd4.h for the algebra). The input
// transform runs B^T down the columns of a tile row, then along its rows; the scalar loops (double,
// builds without AVX-512, and the reference of the tests) and the AVX-512 transform (a lane per tile)
// evaluate each 6-point transform by the same additions and exact scalings by 2 and 4 (input6), so
// they write the same bits. The products run in winograd_kernel.h's register-blocked kernel, fused
// with the output transform (multiply_output4) as in F(2x2, 3x3).
#include "layers/winograd4.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "framework/core/check.h"
#include "layers/cpu_prefetch.h"
#include "layers/winograd_kernel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace qtrain {

using namespace winograd_detail;  // NOLINT(google-build-using-namespace): this file's own internals

namespace {

constexpr int kPositions = 36;  // the 6x6 transformed domain, position xi = 6k + l (row k, column l)

// Output channels per product block of multiply_output4: its buffer holds the 36 positions' (rows,
// kCols) products, 36 x 8 x 16 floats = 18 KiB with AVX-512, which beside the streams of U and V
// stays in a 32 KiB L1 cache (F(2x2, 3x3)'s 16 rows would make it 36 KiB).
template <typename T>
constexpr int kRows4 = std::min(kRows<T>, 8);

// multiply_output4's product buffer, in elements of either type.
constexpr int64_t kProductBuffer4 = kPositions * std::max(kRows4<float> * kCols<float>, kRows4<double>* kCols<double>);

// Width of a zero-padded row of the reference transform: the 4*tw + 2 columns the tiles of one tile
// row read.
int64_t row_width4(const WinogradConv& g) { return 4 * g.tw + 2; }

// The reference transform's row buffer: 6 transformed rows of row_width4 and a zero input row.
int64_t rows_size4(const WinogradConv& g) { return padded(6 * row_width4(g)) + padded(g.w); }

// x * k for k = 2, 4 or 8: exact short of overflow, one multiplication in scalar and vector code alike.
inline float scaled(float x, float k) { return x * k; }
inline double scaled(double x, double k) { return x * k; }
#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
inline __m512 scaled(__m512 x, float k) { return _mm512_mul_ps(x, _mm512_set1_ps(k)); }
#endif

// t = B^T d for the 6 values of one column or row of a tile, by additions, subtractions and exact
// scalings: t0 = 4(d0 - d2) + (d4 - d2), t1, t2 = (d4 - 4 d2) +- (d3 - 4 d1), t3, t4 = (d4 - d2) +-
// 2(d3 - d1), t5 = 4(d1 - d3) + (d5 - d3). V is float or double, or __m512 (GCC's vector operators).
// Each output carries at most 2 roundings.
template <typename V>
inline void input6(const V (&d)[6], V (&t)[6]) {
  const V a = d[4] - scaled(d[2], 4), b = d[3] - scaled(d[1], 4);
  const V c = d[4] - d[2], e = scaled(d[3] - d[1], 2);
  t[0] = scaled(d[0] - d[2], 4) + c;
  t[1] = a + b;
  t[2] = a - b;
  t[3] = c + e;
  t[4] = c - e;
  t[5] = scaled(d[1] - d[3], 4) + (d[5] - d[3]);
}

// y = A^T m for the 6 values of one column or row of the transformed product: y0 = m0 + s12 + s34,
// y1 = d12 + 2 d34, y2 = s12 + 4 s34, y3 = d12 + 8 d34 + m5 (s12 = m1 + m2, d12 = m1 - m2, and the
// same for m3, m4). Each output carries at most 3 roundings.
template <typename T>
inline void output6(T m0, T m1, T m2, T m3, T m4, T m5, T& y0, T& y1, T& y2, T& y3) {
  const T s12 = m1 + m2, d12 = m1 - m2, s34 = m3 + m4, d34 = m3 - m4;
  y0 = m0 + s12 + s34;
  y1 = d12 + scaled(d34, 2);
  y2 = s12 + scaled(s34, 4);
  y3 = d12 + scaled(d34, 8) + m5;
}

// B^T down the columns of one tile row: t_k[j] for the 6 input rows d0..d5 (each `w` long).
template <typename T>
void input_columns4(const T* __restrict d0, const T* __restrict d1, const T* __restrict d2, const T* __restrict d3,
                    const T* __restrict d4, const T* __restrict d5, int64_t w, T* __restrict t0, T* __restrict t1,
                    T* __restrict t2, T* __restrict t3, T* __restrict t4, T* __restrict t5) {
  for (int64_t j = 0; j < w; ++j) {
    const T d[6] = {d0[j], d1[j], d2[j], d3[j], d4[j], d5[j]};
    T t[6];
    input6(d, t);
    t0[j] = t[0];
    t1[j] = t[1];
    t2[j] = t[2];
    t3[j] = t[3];
    t4[j] = t[4];
    t5[j] = t[5];
  }
}

// B^T along one transformed row t for each of tw tiles (tile tx reads t[4tx .. 4tx + 5]): the 6
// positions of that row, each a stream of consecutive tiles.
template <typename T>
void input_rows4(const T* __restrict t, int64_t tw, T* __restrict v0, T* __restrict v1, T* __restrict v2,
                 T* __restrict v3, T* __restrict v4, T* __restrict v5) {
  for (int64_t tx = 0; tx < tw; ++tx) {
    const T* p = t + 4 * tx;
    const T d[6] = {p[0], p[1], p[2], p[3], p[4], p[5]};
    T o[6];
    input6(d, o);
    v0[tx] = o[0];
    v1[tx] = o[1];
    v2[tx] = o[2];
    v3[tx] = o[3];
    v4[tx] = o[4];
    v5[tx] = o[5];
  }
}

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
// transform_input4 in AVX-512 registers, a lane per tile as in F(2x2, 3x3)'s transform_input_avx512:
// a vector holds 16 tiles that are consecutive in V. V's columns run over the tile rows of all the
// block's samples (column (s * th + ty) * tw + tx), so a vector takes 16/L whole tile rows of L = tw
// tiles (L = 8, 4, 2: the 32x32, 16x16 and 8x8 maps; at 8x8 the 4 tile rows of 2 samples or more),
// or, for other widths (L = 16), up to 16 tiles of one tile row. Each half of the vector (8 lanes)
// deinterleaves 32 input columns, load_sources's, by two-source permutes: column j < 4 of the lane i
// is source column 4i + j, and columns 4 and 5 come the same way from the columns loaded 2 further
// right. B^T then runs down the columns and along the rows (input6, the scalar loops' operations).
template <int L>
void transform_input4_avx512(const WinogradConv& g, const float* x, int64_t n, float* v, int64_t ldv,
                             int64_t xi_stride) {
  constexpr int kSegments = 16 / L;           // tile rows per vector
  constexpr int kHalf = L == 16 ? 0 : 8 / L;  // tile rows per half vector
  constexpr int kSource = std::min(2 * L, 16);
  __m512i index[4];  // lane i: 4 (i mod 8) + j
  for (int j = 0; j < 4; ++j)
    index[j] = _mm512_setr_epi32(j, 4 + j, 8 + j, 12 + j, 16 + j, 20 + j, 24 + j, 28 + j, j, 4 + j, 8 + j, 12 + j,
                                 16 + j, 20 + j, 24 + j, 28 + j);
  const int64_t tile_rows = n * g.th, plane_size = g.h * g.w;
  // The reads jump from sample to sample (a plane each) within a channel: fetch the 4 rows that begin
  // each tile row about kPrefetchAhead bytes of x later (in the next channel past the last sample).
  const int64_t ahead = std::max<int64_t>(1, kPrefetchAhead / static_cast<int64_t>(4 * sizeof(float) * g.w));
  for (int64_t c = 0; c < g.c; ++c) {
    float* out = v + c * ldv;
    for (int64_t gr0 = 0; gr0 < tile_rows; gr0 += kSegments) {
      {
        int64_t gr = gr0 + ahead, cc = c;
        if (gr >= tile_rows) {
          gr -= tile_rows;
          ++cc;
        }
        int64_t s = gr / g.th, ty = gr % g.th;
        for (int i = 0; i < kSegments && cc < g.c && s < n; ++i) {
          if (4 * ty < g.h)
            prefetch_lines(x + ((s * g.c + cc) * g.h + 4 * ty) * g.w,
                           static_cast<size_t>(std::min<int64_t>(4, g.h - 4 * ty) * g.w) * sizeof(float));
          if (++ty == g.th) {
            ty = 0;
            ++s;
          }
        }
      }
      // The plane and the first input row (that of r = 0) of each tile row; no plane past the last.
      const float* plane[kSegments];
      int64_t first_row[kSegments];
      {
        int64_t s = gr0 / g.th, ty = gr0 % g.th;
        for (int i = 0; i < kSegments; ++i) {
          plane[i] = s < n ? x + (s * g.c + c) * plane_size : nullptr;
          first_row[i] = 4 * ty - g.ph;
          if (++ty == g.th) {
            ty = 0;
            ++s;
          }
        }
      }
      for (int64_t tx0 = 0; tx0 < g.tw; tx0 += L) {
        const int64_t lanes =
            L == 16 ? std::min<int64_t>(16, g.tw - tx0) : std::min<int64_t>(kSegments, tile_rows - gr0) * L;
        const int64_t s0 = 4 * tx0 - g.pw;
        __m512 d[6][6];  // d[r][j]: input row r, column j of each lane's patch
        for (int r = 0; r < 6; ++r) {
          const float* seg[kSegments];  // null outside the image
          for (int i = 0; i < kSegments; ++i) {
            const int64_t iy = first_row[i] + r;
            seg[i] = plane[i] && iy >= 0 && iy < g.h ? plane[i] + iy * g.w : nullptr;
          }
          __m512 src[2][4];  // per half: 32 columns from its first column, then from 2 further right
          for (int h = 0; h < 2; ++h) {
            const float* const* first = seg + h * kHalf;
            const int64_t col = s0 + (L == 16 ? 32 * h : 0);
            load_sources<kSource>(first, col, g.w, src[h][0], src[h][1]);
            load_sources<kSource>(first, col + 2, g.w, src[h][2], src[h][3]);
          }
          for (int j = 0; j < 6; ++j) {
            const int q = j < 4 ? 0 : 2;
            const __m512i ix = index[j < 4 ? j : j - 2];
            const __m512 lo = _mm512_permutex2var_ps(src[0][q], ix, src[0][q + 1]);
            const __m512 hi = _mm512_permutex2var_ps(src[1][q], ix, src[1][q + 1]);
            d[r][j] = _mm512_mask_blend_ps(0xFF00, lo, hi);
          }
        }
        __m512 t[6][6];  // t[k][j]: B^T down column j
        for (int j = 0; j < 6; ++j) {
          const __m512 col[6] = {d[0][j], d[1][j], d[2][j], d[3][j], d[4][j], d[5][j]};
          __m512 tc[6];
          input6(col, tc);
          for (int k = 0; k < 6; ++k) t[k][j] = tc[k];
        }
        const __mmask16 store = static_cast<__mmask16>((1u << lanes) - 1u);
        float* o = out + gr0 * g.tw + tx0;
        for (int k = 0; k < 6; ++k) {
          __m512 tv[6];
          input6(t[k], tv);
          for (int l = 0; l < 6; ++l) _mm512_mask_storeu_ps(o + (6 * k + l) * xi_stride, store, tv[l]);
        }
      }
    }
  }
}
#endif

// v: B^T d B for every tile of n samples x (n, C, H, W); V[xi] (C, ldv) at v + xi * xi_stride, tile
// (s, ty, tx) in column s*tiles + ty*tw + tx. Rows above or below the image read a zero row; the
// column padding is the zero margin of the 6 transformed rows (width row_width4), which only their
// middle w columns overwrite. Without `reference` a float transform runs in AVX-512 where the build
// has it (the same bits), and the loops prefetch x.
template <typename T>
void transform_input4(const WinogradConv& g, const T* x, int64_t n, T* v, int64_t ldv, int64_t xi_stride, T* rows,
                      bool reference = false) {
#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
  if constexpr (std::is_same_v<T, float>) {
    if (!reference) {
      if (g.tw == 2) return transform_input4_avx512<2>(g, x, n, v, ldv, xi_stride);
      if (g.tw == 4) return transform_input4_avx512<4>(g, x, n, v, ldv, xi_stride);
      if (g.tw == 8) return transform_input4_avx512<8>(g, x, n, v, ldv, xi_stride);
      return transform_input4_avx512<16>(g, x, n, v, ldv, xi_stride);
    }
  }
#endif
  const int64_t wp = row_width4(g), tw = g.tw;
  T* t = rows;  // 6 rows of wp
  T* zero = rows + 6 * wp;
  std::fill_n(t, 6 * wp, T(0));
  std::fill_n(zero, g.w, T(0));
  for_tile_rows<6>(g, x, n, v, ldv, zero, !reference, [&](const T* const(&d)[6], T* o) {
    input_columns4(d[0], d[1], d[2], d[3], d[4], d[5], g.w, t + g.pw, t + wp + g.pw, t + 2 * wp + g.pw,
                   t + 3 * wp + g.pw, t + 4 * wp + g.pw, t + 5 * wp + g.pw);
    for (int64_t k = 0; k < 6; ++k)
      input_rows4(t + k * wp, tw, o + 6 * k * xi_stride, o + (6 * k + 1) * xi_stride, o + (6 * k + 2) * xi_stride,
                  o + (6 * k + 3) * xi_stride, o + (6 * k + 4) * xi_stride, o + (6 * k + 5) * xi_stride);
  });
}

// One output row of a run of tiles: out[4j + q] = o_q[j] + b for `whole` tiles, then the first `cut`
// columns (0..3) of a last tile cut short by the map's right edge.
template <typename T>
void store_row4(T* __restrict out, const T* __restrict o0, const T* __restrict o1, const T* __restrict o2,
                const T* __restrict o3, int whole, int cut, T b) {
  for (int j = 0; j < whole; ++j) {
    out[4 * j] = o0[j] + b;
    out[4 * j + 1] = o1[j] + b;
    out[4 * j + 2] = o2[j] + b;
    out[4 * j + 3] = o3[j] + b;
  }
  const T* const last[3] = {o0, o1, o2};
  for (int q = 0; q < cut; ++q) out[4 * whole + q] = last[q][whole] + b;
}

// y (n, OC, OH, OW) (+ bias) from V of one block (V[xi] (C, ldv) at v + xi * xi_stride, t tiles in
// transform_input4's order, columns t..ldv zero, ldv a multiple of kCols) and u (36, OC, C). For each
// column block of kCols tiles and each group of kRows4 output channels, the 36 positions' products go
// to `buf` (kProductBuffer4 elements) and the output transform A^T m A turns them into the 4x4 tiles.
template <typename T>
void multiply_output4(const WinogradConv& g, const T* u, const T* v, int64_t ldv, int64_t xi_stride, int64_t t,
                      const T* bias, T* y, T* buf) {
  constexpr int L = kCols<T>, R = kRows4<T>;
  constexpr int64_t xs = R * L;  // distance between two positions' products in buf
  const int64_t plane = g.oh * g.ow, tiles = g.tiles();
  // The block's tiles as runs of consecutive tiles along one tile row, as in F(2x2, 3x3).
  struct Run {
    int first, count;
    int64_t at;  // offset in y of the run's first output, less its channel's plane
    int down;    // output rows of the run: 4, or fewer at the map's bottom edge
    int cut;     // columns of a last tile cut short by the right edge (1..3), else 0
  };
  Run runs[L];
  for (int64_t t0 = 0; t0 < t; t0 += L) {
    const int nt = static_cast<int>(std::min<int64_t>(L, t - t0));
    int nruns = 0;
    for (int j = 0; j < nt;) {
      const int64_t s = (t0 + j) / tiles, in_sample = (t0 + j) % tiles, ty = in_sample / g.tw, tx = in_sample % g.tw;
      const int count = static_cast<int>(std::min<int64_t>(nt - j, g.tw - tx));
      const int64_t right = g.ow - 4 * (tx + count - 1);  // columns of the run's last tile
      runs[nruns++] = {j, count, s * g.oc * plane + 4 * ty * g.ow + 4 * tx,
                       static_cast<int>(std::min<int64_t>(4, g.oh - 4 * ty)), right < 4 ? static_cast<int>(right) : 0};
      j += count;
    }
    for (int64_t o0 = 0; o0 < g.oc; o0 += R) {
      const int rows = static_cast<int>(std::min<int64_t>(R, g.oc - o0));
      for (int64_t xi = 0; xi < kPositions; ++xi)
        product(rows, u + (xi * g.oc + o0) * g.c, g.c, v + xi * xi_stride + t0, ldv, g.c, buf + xi * xs, L, false);
      for (int r = 0; r < rows; ++r) {
        const T* __restrict m = buf + r * L;
        T a[4][6][L];  // A^T down each column l of the 6x6 products
        for (int l = 0; l < 6; ++l)
          for (int j = 0; j < L; ++j)
            output6(m[l * xs + j], m[(6 + l) * xs + j], m[(12 + l) * xs + j], m[(18 + l) * xs + j],
                    m[(24 + l) * xs + j], m[(30 + l) * xs + j], a[0][l][j], a[1][l][j], a[2][l][j], a[3][l][j]);
        T o[4][4][L];  // then along each row: output (i, q) of each tile
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < L; ++j)
            output6(a[i][0][j], a[i][1][j], a[i][2][j], a[i][3][j], a[i][4][j], a[i][5][j], o[i][0][j], o[i][1][j],
                    o[i][2][j], o[i][3][j]);
        const T b = bias ? bias[o0 + r] : T(0);
        T* yo = y + (o0 + r) * plane;
        for (int q = 0; q < nruns; ++q) {
          const Run& run = runs[q];
          const int whole = run.cut ? run.count - 1 : run.count;
          for (int i = 0; i < run.down; ++i)
            store_row4(yo + run.at + i * g.ow, o[i][0] + run.first, o[i][1] + run.first, o[i][2] + run.first,
                       o[i][3] + run.first, whole, run.cut, b);
        }
      }
    }
  }
}

// G f for the 3 values of one column or row of a kernel, in double: (f0/4, -(f0 + f1 + f2)/6,
// -(f0 - f1 + f2)/6, (f0/4 + f1/2 + f2)/6, (f0/4 - f1/2 + f2)/6, f2), each with at most 4 roundings
// (2 additions, the rounded 1/6 and the multiplication by it: a division would cost a step's 3%).
inline void kernel6(double f0, double f1, double f2, double (&q)[6]) {
  constexpr double kSixth = 1.0 / 6;
  const double outer = f0 + f2, quarter = f0 * 0.25 + f2;
  q[0] = f0 * 0.25;
  q[1] = -(outer + f1) * kSixth;
  q[2] = -(outer - f1) * kSixth;
  q[3] = (quarter + f1 * 0.5) * kSixth;
  q[4] = (quarter - f1 * 0.5) * kSixth;
  q[5] = f2;
}

}  // namespace

template <typename T>
void winograd4_weights(const T* w, int64_t oc, int64_t c, bool flipped, T* u) {
  // Chunks of kChunk kernels in u's order (index at), each step a loop over the chunk's kernels: the
  // loops vectorize, and the 36 stores of a step are consecutive (a per-kernel loop took 3% of a
  // ResNet-110 step in scattered stores and scalar arithmetic).
  constexpr int64_t kChunk = 64;
  const int64_t stride = oc * c;
  double f[9][kChunk], q[6][3][kChunk], r[6][kChunk];
  for (int64_t at0 = 0; at0 < stride; at0 += kChunk) {
    const int64_t n = std::min(kChunk, stride - at0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = at0 + i, o = flipped ? at % oc : at / c, ci = flipped ? at / oc : at % c;
      const T* k = w + (o * c + ci) * 9;
      for (int t = 0; t < 9; ++t) f[t][i] = static_cast<double>(k[flipped ? 8 - t : t]);
    }
    for (int j = 0; j < 3; ++j)  // G down each column j
      for (int64_t i = 0; i < n; ++i) {
        double g[6];
        kernel6(f[j][i], f[3 + j][i], f[6 + j][i], g);
        for (int a = 0; a < 6; ++a) q[a][j][i] = g[a];
      }
    for (int a = 0; a < 6; ++a) {  // then along each row a
      for (int64_t i = 0; i < n; ++i) {
        double g[6];
        kernel6(q[a][0][i], q[a][1][i], q[a][2][i], g);
        for (int b = 0; b < 6; ++b) r[b][i] = g[b];
      }
      for (int b = 0; b < 6; ++b) {
        T* __restrict out = u + (6 * a + b) * stride + at0;
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(r[b][i]);
      }
    }
  }
}

int64_t winograd4_block_samples(const WinogradConv& g, int64_t samples) {
  QT_CHECK(g.m == 4, "winograd4: a geometry of {}x{} tiles", g.m, g.m);
  // V (36 values per tile and input channel) and the block's output (16 per tile and output channel).
  const int64_t tiles = g.tiles(), per_sample = (kPositions * g.c + 16 * g.oc) * tiles;
  const int64_t most =
      std::clamp<int64_t>(kBlockBudget / std::max<int64_t>(per_sample, 1), 1, std::max<int64_t>(samples, 1));
  // Small maps (fewer than 16 tiles a sample): rather a few samples fewer than a partial column block.
  for (int64_t b = most; b > most / 2; --b)
    if (b * tiles % 16 == 0) return b;
  return most;
}

int64_t winograd4_work_size(const WinogradConv& g, int64_t block) {
  return kPositions * position_stride(g.c, block_columns(block * g.tiles())) + rows_size4(g) + kProductBuffer4;
}

template <typename T>
void winograd4_conv(const WinogradConv& g, const T* u, const T* bias, const T* x, T* y, int64_t n, int64_t block,
                    T* work) {
  QT_CHECK(g.m == 4, "winograd4_conv: a geometry of {}x{} tiles", g.m, g.m);
  const int64_t tiles = g.tiles();
  T* v = work;
  T* rows = v + kPositions * position_stride(g.c, block_columns(block * tiles));
  T* buf = rows + rows_size4(g);
  for (int64_t s0 = 0; s0 < n; s0 += block) {
    const int64_t nb = std::min(block, n - s0), t = nb * tiles, ldv = block_columns(t);
    const int64_t vs = position_stride(g.c, ldv);
    transform_input4(g, x + s0 * g.in_size(), nb, v, ldv, vs, rows);
    // The product kernel reads whole column blocks: zero the columns past the last tile.
    if (ldv > t)
      for (int64_t xi = 0; xi < kPositions; ++xi)
        for (int64_t c = 0; c < g.c; ++c) std::fill(v + xi * vs + c * ldv + t, v + xi * vs + (c + 1) * ldv, T(0));
    multiply_output4(g, u, v, ldv, vs, t, bias, y + s0 * g.out_size(), buf);
  }
}

template <typename T>
void winograd4_input_transform(const WinogradConv& g, const T* x, int64_t n, T* v, bool reference) {
  QT_CHECK(g.m == 4, "winograd4_input_transform: a geometry of {}x{} tiles", g.m, g.m);
  const int64_t t = n * g.tiles();
  std::vector<T> rows(static_cast<size_t>(rows_size4(g)));
  transform_input4(g, x, n, v, t, g.c * t, rows.data(), reference);
}

#define QTRAIN_WINOGRAD4_INSTANTIATE(T)                                                                         \
  template void winograd4_weights<T>(const T*, int64_t, int64_t, bool, T*);                                     \
  template void winograd4_conv<T>(const WinogradConv&, const T*, const T*, const T*, T*, int64_t, int64_t, T*); \
  template void winograd4_input_transform<T>(const WinogradConv&, const T*, int64_t, T*, bool);
QTRAIN_WINOGRAD4_INSTANTIATE(float)
QTRAIN_WINOGRAD4_INSTANTIATE(double)
#undef QTRAIN_WINOGRAD4_INSTANTIATE

}  // namespace qtrain
