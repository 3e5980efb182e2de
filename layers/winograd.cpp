// winograd: the transforms and the 16 GEMMs of F(2x2, 3x3) and F(3x3, 2x2) (see winograd.h for the
// algebra). Every transform runs over whole rows of tiles with unit-stride inner loops over the tile
// column tx, so that they vectorize: an input patch row is first copied into a zero-padded row, its
// vertical transform is split into even and odd columns (tile tx reads columns 2tx..2tx+3, that is
// even[tx], odd[tx], even[tx+1], odd[tx+1]), and the horizontal transform then writes 16 streams of
// consecutive tiles, one per transformed position. The streams never overlap, but they are offsets
// into one buffer that GCC cannot tell apart (it ignores __restrict on local pointers and gives up on
// versioning so many pairs), hence `#pragma GCC ivdep` on those loops.
#include "layers/winograd.h"

#include <algorithm>

#include "layers/blas.h"

namespace qtrain {

namespace {

// Elements of V and M (or D) of one block: 128 Ki floats, 512 KiB, one Zen 3 core's L2 cache, so that
// the GEMMs find the transformed tiles still cached. (Measured against 64 Ki and 256 Ki on the
// ResNet-110 stages: docs/performance.md.)
constexpr int64_t kBlockBudget = int64_t{1} << 17;

// Rounds a region of the work buffer up to 16 elements (64 bytes in float).
int64_t padded(int64_t n) { return (n + 15) / 16 * 16; }

// Distance between the 16 matrices V[xi] (rows x t) of a block: rounded up to a cache line, plus one
// more line. Without the skew, rows*t floats are often a multiple of 4 KiB (16 channels x 256 tiles of
// a 32x32 map: 16 KiB), and the transforms' 16 streams, one per xi, then all fall into the same set
// of the 8-way L1 cache and evict each other.
int64_t position_stride(int64_t rows, int64_t t) { return padded(rows * t) + 16; }

// Width of a zero-padded input row: the 2*tw + 2 columns the tiles of one tile row read.
int64_t row_width(const WinogradConv& g) { return 2 * g.tw + 2; }

// The row buffers behind V and M: 4 padded input rows, the even and odd columns of their vertical
// transform (2 x 4 rows of tw + 1), and 2 output rows of 2*tw.
int64_t rows_size(const WinogradConv& g) {
  return padded(4 * row_width(g)) + padded(8 * (g.tw + 1)) + padded(4 * g.tw);
}

// out[0, row_width) = input row iy of `plane` shifted right by pw, zero outside the image.
template <typename T>
void padded_row(const T* __restrict plane, const WinogradConv& g, int64_t iy, T* __restrict out) {
  const int64_t wp = row_width(g);
  if (iy < 0 || iy >= g.h) {
    std::fill_n(out, wp, T(0));
    return;
  }
  // pw + w <= wp: 2*tw >= ow = w + 2pw - 2.
  std::fill_n(out, g.pw, T(0));
  std::copy_n(plane + iy * g.w, g.w, out + g.pw);
  std::fill(out + g.pw + g.w, out + wp, T(0));
}

// v: B^T d B for every tile of n samples x (n, C, H, W); V[xi] (C, ldv) at v + xi * xi_stride, tile
// (s, ty, tx) in column s*tiles + ty*tw + tx.
template <typename T>
void transform_input(const WinogradConv& g, const T* x, int64_t n, T* v, int64_t ldv, int64_t xi_stride, T* rows) {
  const int64_t wp = row_width(g), tw = g.tw, te = tw + 1;
  T* pr = rows;
  T* ev = rows + padded(4 * wp);  // 4 rows of te: the vertical transform at columns 0, 2, 4, ...
  T* od = ev + 4 * te;            // and at columns 1, 3, 5, ...
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t c = 0; c < g.c; ++c) {
      const T* plane = x + (s * g.c + c) * g.h * g.w;
      for (int64_t ty = 0; ty < g.th; ++ty) {
        for (int64_t r = 0; r < 4; ++r) padded_row(plane, g, 2 * ty - g.ph + r, pr + r * wp);
        {
          // B^T down each column: (d0 - d2, d1 + d2, d2 - d1, d1 - d3).
          const T* __restrict r0 = pr;
          const T* __restrict r1 = pr + wp;
          const T* __restrict r2 = pr + 2 * wp;
          const T* __restrict r3 = pr + 3 * wp;
          T* __restrict e0 = ev;
          T* __restrict e1 = ev + te;
          T* __restrict e2 = ev + 2 * te;
          T* __restrict e3 = ev + 3 * te;
          T* __restrict o0 = od;
          T* __restrict o1 = od + te;
          T* __restrict o2 = od + 2 * te;
          T* __restrict o3 = od + 3 * te;
          #pragma GCC ivdep
          for (int64_t j = 0; j < te; ++j) {
            const int64_t a = 2 * j, b = 2 * j + 1;
            e0[j] = r0[a] - r2[a];
            e1[j] = r1[a] + r2[a];
            e2[j] = r2[a] - r1[a];
            e3[j] = r1[a] - r3[a];
            o0[j] = r0[b] - r2[b];
            o1[j] = r1[b] + r2[b];
            o2[j] = r2[b] - r1[b];
            o3[j] = r1[b] - r3[b];
          }
        }
        T* out = v + c * ldv + s * g.tiles() + ty * tw;
        for (int64_t k = 0; k < 4; ++k) {
          // B^T along row k of each tile: columns (a, b, c, d) = (even[tx], odd[tx], even[tx+1], odd[tx+1]).
          const T* __restrict e = ev + k * te;
          const T* __restrict o = od + k * te;
          T* __restrict v0 = out + (4 * k) * xi_stride;
          T* __restrict v1 = out + (4 * k + 1) * xi_stride;
          T* __restrict v2 = out + (4 * k + 2) * xi_stride;
          T* __restrict v3 = out + (4 * k + 3) * xi_stride;
          #pragma GCC ivdep
          for (int64_t tx = 0; tx < tw; ++tx) {
            v0[tx] = e[tx] - e[tx + 1];
            v1[tx] = o[tx] + e[tx + 1];
            v2[tx] = e[tx + 1] - o[tx];
            v3[tx] = o[tx] - o[tx + 1];
          }
        }
      }
    }
  }
}

// y (n, OC, OH, OW) = A^T m A (+ bias) for every tile, M[xi] (OC, ldm) at m + xi * xi_stride in
// transform_input's tile order; the parts of partial tiles beyond OH or OW are dropped.
template <typename T>
void transform_output(const WinogradConv& g, const T* m, int64_t ldm, int64_t xi_stride, const T* bias, int64_t n,
                      T* y, T* rows) {
  const int64_t tw = g.tw;
  T* buf0 = rows + padded(4 * row_width(g)) + padded(8 * (tw + 1));
  T* buf1 = buf0 + 2 * tw;
  const bool full_width = 2 * tw == g.ow;
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t o = 0; o < g.oc; ++o) {
      const T b = bias ? bias[o] : T(0);
      T* plane = y + (s * g.oc + o) * g.oh * g.ow;
      for (int64_t ty = 0; ty < g.th; ++ty) {
        const bool second = 2 * ty + 1 < g.oh;
        // Whole rows are written in place; partial ones go through buf0/buf1.
        T* __restrict y0 = full_width ? plane + 2 * ty * g.ow : buf0;
        T* __restrict y1 = full_width && second ? plane + (2 * ty + 1) * g.ow : buf1;
        const T* in = m + o * ldm + s * g.tiles() + ty * tw;
        const T* __restrict m0 = in;
        const T* __restrict m1 = in + xi_stride;
        const T* __restrict m2 = in + 2 * xi_stride;
        const T* __restrict m3 = in + 3 * xi_stride;
        const T* __restrict m4 = in + 4 * xi_stride;
        const T* __restrict m5 = in + 5 * xi_stride;
        const T* __restrict m6 = in + 6 * xi_stride;
        const T* __restrict m7 = in + 7 * xi_stride;
        const T* __restrict m8 = in + 8 * xi_stride;
        const T* __restrict m9 = in + 9 * xi_stride;
        const T* __restrict m10 = in + 10 * xi_stride;
        const T* __restrict m11 = in + 11 * xi_stride;
        const T* __restrict m12 = in + 12 * xi_stride;
        const T* __restrict m13 = in + 13 * xi_stride;
        const T* __restrict m14 = in + 14 * xi_stride;
        const T* __restrict m15 = in + 15 * xi_stride;
        #pragma GCC ivdep
        for (int64_t tx = 0; tx < tw; ++tx) {
          // A^T down the columns: row 0 = m0 + m1 + m2, row 1 = m1 - m2 - m3 (rows of the 4x4 m).
          const T a0 = m0[tx] + m4[tx] + m8[tx], a1 = m1[tx] + m5[tx] + m9[tx], a2 = m2[tx] + m6[tx] + m10[tx],
                  a3 = m3[tx] + m7[tx] + m11[tx];
          const T c0 = m4[tx] - m8[tx] - m12[tx], c1 = m5[tx] - m9[tx] - m13[tx], c2 = m6[tx] - m10[tx] - m14[tx],
                  c3 = m7[tx] - m11[tx] - m15[tx];
          y0[2 * tx] = a0 + a1 + a2 + b;
          y0[2 * tx + 1] = a1 - a2 - a3 + b;
          y1[2 * tx] = c0 + c1 + c2 + b;
          y1[2 * tx + 1] = c1 - c2 - c3 + b;
        }
        if (!full_width) {
          std::copy_n(buf0, g.ow, plane + 2 * ty * g.ow);
          if (second) std::copy_n(buf1, g.ow, plane + (2 * ty + 1) * g.ow);
        }
      }
    }
  }
}

// d: G' e G'^T for every 2x2 tile e of dy (n, OC, OH, OW) (zero beyond OH or OW); D[xi] (OC, ldd) at
// d + xi * xi_stride in transform_input's tile order. G' e: rows (e0, (e0 + e1)/2, (e0 - e1)/2, -e1).
template <typename T>
void transform_grad(const WinogradConv& g, const T* dy, int64_t n, T* d, int64_t ldd, int64_t xi_stride, T* rows) {
  const int64_t tw = g.tw;
  T* pa = rows;           // dy rows 2ty and 2ty + 1, zero-padded to 2*tw columns
  T* pb = rows + 2 * tw;  // (fits in the 4 padded input rows of rows_size)
  T* ev = rows + padded(4 * row_width(g));
  T* od = ev + 4 * tw;
  const T half = T(0.5);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t o = 0; o < g.oc; ++o) {
      const T* plane = dy + (s * g.oc + o) * g.oh * g.ow;
      for (int64_t ty = 0; ty < g.th; ++ty) {
        for (int64_t r = 0; r < 2; ++r) {
          T* row = r == 0 ? pa : pb;
          const int64_t iy = 2 * ty + r;
          if (iy >= g.oh) {
            std::fill_n(row, 2 * tw, T(0));
          } else {
            std::copy_n(plane + iy * g.ow, g.ow, row);
            std::fill(row + g.ow, row + 2 * tw, T(0));
          }
        }
        {
          const T* __restrict a = pa;
          const T* __restrict b = pb;
          T* __restrict e0 = ev;
          T* __restrict e1 = ev + tw;
          T* __restrict e2 = ev + 2 * tw;
          T* __restrict e3 = ev + 3 * tw;
          T* __restrict o0 = od;
          T* __restrict o1 = od + tw;
          T* __restrict o2 = od + 2 * tw;
          T* __restrict o3 = od + 3 * tw;
          #pragma GCC ivdep
          for (int64_t j = 0; j < tw; ++j) {
            const int64_t l = 2 * j, r = 2 * j + 1;
            e0[j] = a[l];
            e1[j] = (a[l] + b[l]) * half;
            e2[j] = (a[l] - b[l]) * half;
            e3[j] = -b[l];
            o0[j] = a[r];
            o1[j] = (a[r] + b[r]) * half;
            o2[j] = (a[r] - b[r]) * half;
            o3[j] = -b[r];
          }
        }
        T* out = d + o * ldd + s * g.tiles() + ty * tw;
        for (int64_t k = 0; k < 4; ++k) {
          const T* __restrict e = ev + k * tw;
          const T* __restrict f = od + k * tw;
          T* __restrict d0 = out + (4 * k) * xi_stride;
          T* __restrict d1 = out + (4 * k + 1) * xi_stride;
          T* __restrict d2 = out + (4 * k + 2) * xi_stride;
          T* __restrict d3 = out + (4 * k + 3) * xi_stride;
          #pragma GCC ivdep
          for (int64_t tx = 0; tx < tw; ++tx) {
            d0[tx] = e[tx];
            d1[tx] = (e[tx] + f[tx]) * half;
            d2[tx] = (e[tx] - f[tx]) * half;
            d3[tx] = -f[tx];
          }
        }
      }
    }
  }
}

}  // namespace

WinogradConv WinogradConv::forward_of(const ImageGeometry& g, const Window2d& win, int64_t out_channels) {
  WinogradConv w;
  w.c = g.c;
  w.h = g.h;
  w.w = g.w;
  w.oc = out_channels;
  w.oh = g.oh;
  w.ow = g.ow;
  w.ph = win.ph;
  w.pw = win.pw;
  w.th = (w.oh + 1) / 2;
  w.tw = (w.ow + 1) / 2;
  return w;
}

WinogradConv WinogradConv::dx_of(const ImageGeometry& g, const Window2d& win, int64_t out_channels) {
  WinogradConv w;
  w.c = out_channels;
  w.h = g.oh;
  w.w = g.ow;
  w.oc = g.c;
  w.oh = g.h;
  w.ow = g.w;
  w.ph = 2 - win.ph;
  w.pw = 2 - win.pw;
  w.th = (w.oh + 1) / 2;
  w.tw = (w.ow + 1) / 2;
  return w;
}

int64_t winograd_block_samples(const WinogradConv& g, int64_t samples) {
  const int64_t per_sample = 16 * (g.c + g.oc) * g.tiles();
  return std::clamp<int64_t>(kBlockBudget / std::max<int64_t>(per_sample, 1), 1, std::max<int64_t>(samples, 1));
}

int64_t winograd_work_size(const WinogradConv& g, int64_t block) {
  const int64_t t = block * g.tiles();
  return 16 * (position_stride(g.c, t) + position_stride(g.oc, t)) + rows_size(g);
}

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
  T* m = v + 16 * position_stride(g.c, block * tiles);
  T* rows = m + 16 * position_stride(g.oc, block * tiles);
  for (int64_t s0 = 0; s0 < n; s0 += block) {
    const int64_t nb = std::min(block, n - s0), t = nb * tiles;
    const int64_t vs = position_stride(g.c, t), ms = position_stride(g.oc, t);
    transform_input(g, x + s0 * g.in_size(), nb, v, t, vs, rows);
    // M[xi] (OC, T) = U[xi] (OC, C) . V[xi] (C, T)
    for (int64_t xi = 0; xi < 16; ++xi)
      blas_gemm<T>(false, false, g.oc, t, g.c, u + xi * g.oc * g.c, g.c, v + xi * vs, t, T(0), m + xi * ms, t);
    transform_output(g, m, t, ms, bias, nb, y + s0 * g.out_size(), rows);
  }
}

template <typename T>
void winograd_weight_grad(const WinogradConv& g, const T* x, const T* dy, int64_t n, int64_t block, T* work, T* dwt) {
  if (n == 0) {
    std::fill_n(dwt, 16 * g.oc * g.c, T(0));
    return;
  }
  const int64_t tiles = g.tiles();
  T* v = work;
  T* d = v + 16 * position_stride(g.c, block * tiles);
  T* rows = d + 16 * position_stride(g.oc, block * tiles);
  for (int64_t s0 = 0; s0 < n; s0 += block) {
    const int64_t nb = std::min(block, n - s0), t = nb * tiles;
    const int64_t vs = position_stride(g.c, t), ds = position_stride(g.oc, t);
    transform_input(g, x + s0 * g.in_size(), nb, v, t, vs, rows);
    transform_grad(g, dy + s0 * g.out_size(), nb, d, t, ds, rows);
    // dWhat[xi] (OC, C) (+)= D[xi] (OC, T) . V[xi]^T (T, C)
    for (int64_t xi = 0; xi < 16; ++xi)
      blas_gemm<T>(false, true, g.oc, g.c, t, d + xi * ds, t, v + xi * vs, t, s0 == 0 ? T(0) : T(1),
                   dwt + xi * g.oc * g.c, g.c);
  }
}

template <typename T>
void winograd_weight_grad_output(const T* dwt, int64_t oc, int64_t c, T* dw) {
  const int64_t stride = oc * c;
  for (int64_t o = 0; o < oc; ++o) {
    for (int64_t ci = 0; ci < c; ++ci) {
      T m[4][4];
      for (int xi = 0; xi < 16; ++xi) m[xi / 4][xi % 4] = dwt[xi * stride + o * c + ci];
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

#define QTRAIN_WINOGRAD_INSTANTIATE(T)                                                                               \
  template void winograd_weights<T>(const T*, int64_t, int64_t, bool, T*);                                        \
  template void winograd_conv<T>(const WinogradConv&, const T*, const T*, const T*, T*, int64_t, int64_t, T*);    \
  template void winograd_weight_grad<T>(const WinogradConv&, const T*, const T*, int64_t, int64_t, T*, T*);       \
  template void winograd_weight_grad_output<T>(const T*, int64_t, int64_t, T*);
QTRAIN_WINOGRAD_INSTANTIATE(float)
QTRAIN_WINOGRAD_INSTANTIATE(double)
#undef QTRAIN_WINOGRAD_INSTANTIATE

}  // namespace qtrain
