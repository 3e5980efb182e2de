// im2col / col2im on the CPU: the lowering that turns a convolution into one matrix product. For one
// image x (C, H, W) and a window (kh, kw, stride, padding), col has K = C*kh*kw rows and OH*OW
// columns: col[(c*kh + i)*kw + j][oh*OW + ow] = x[c][oh*sh - ph + i][ow*sw - pw + j] (0 in the
// padding). `ldcol` is the distance between rows, so several images can sit side by side in one
// matrix (K, n*OH*OW) and share one GEMM (conv2d does this). col2im is the exact adjoint: it adds each
// column entry back onto the input element it was copied from.
// The inner loops run over output columns; for stride 1 the valid range of each row is a contiguous
// copy, which the compiler turns into memcpy/vector moves, and with "same" width the whole row is one
// copy (im2col_shifted).
#pragma once

#include <algorithm>
#include <cstdint>

#include "layers/conv_geometry.h"

namespace qtrain::im2col_detail {

// The range [lo, hi) of output columns ow whose input column ow*s - p + j lies inside [0, w).
inline void valid_range(int64_t out, int64_t w, int64_t s, int64_t p, int64_t j, int64_t& lo, int64_t& hi) {
  // ow*s >= p - j  and  ow*s <= w - 1 + p - j
  const int64_t a = p - j;
  lo = a <= 0 ? 0 : (a + s - 1) / s;
  const int64_t b = w - 1 + p - j;
  hi = b < 0 ? 0 : std::min(out, b / s + 1);
  if (lo > hi) lo = hi;
}

// im2col for stride 1 when the output is as wide as the input (kw = 2*pw + 1, "same" padding): the
// row (c, i, j) is then the plane shifted by one offset, out[oh*W + ow] = x[c][oh*W + ow + delta], so
// it is one long copy and a few zeroed padding positions instead of OH copies of W elements (for
// CIFAR's 8x8 maps, copies of 32 bytes, dominated by the call).
template <typename T>
void im2col_shifted(const T* __restrict x, const ImageGeometry& g, const Window2d& win, T* __restrict col,
                    int64_t ldcol) {
  const int64_t plane_size = g.h * g.w, row_size = g.oh * g.ow;
  for (int64_t c = 0; c < g.c; ++c) {
    const T* __restrict plane = x + c * plane_size;
    for (int64_t i = 0; i < win.kh; ++i) {
      // Output rows whose input row oh - ph + i lies in [0, h).
      const int64_t oh_lo = std::clamp<int64_t>(win.ph - i, 0, g.oh);
      const int64_t oh_hi = std::clamp<int64_t>(g.h + win.ph - i, oh_lo, g.oh);
      for (int64_t j = 0; j < win.kw; ++j) {
        T* __restrict row = col + ((c * win.kh + i) * win.kw + j) * ldcol;
        const int64_t delta = (i - win.ph) * g.w + (j - win.pw);
        // The copied span of the row, limited to source positions inside the plane.
        const int64_t a = std::max(oh_lo * g.w, -delta), b = std::min(oh_hi * g.w, plane_size - delta);
        if (a >= b) {
          std::fill_n(row, row_size, T(0));
          continue;
        }
        std::fill(row, row + a, T(0));
        std::copy(plane + a + delta, plane + b + delta, row + a);
        std::fill(row + b, row + row_size, T(0));
        // Columns whose input column ow - pw + j falls outside [0, w) read a neighbouring row: zero them.
        int64_t lo, hi;
        valid_range(g.ow, g.w, 1, win.pw, j, lo, hi);
        if (lo == 0 && hi == g.ow) continue;
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
          T* __restrict out = row + oh * g.ow;
          for (int64_t ow = 0; ow < lo; ++ow) out[ow] = T(0);
          for (int64_t ow = hi; ow < g.ow; ++ow) out[ow] = T(0);
        }
      }
    }
  }
}

}  // namespace qtrain::im2col_detail

namespace qtrain {

template <typename T>
void im2col(const T* __restrict x, const ImageGeometry& g, const Window2d& win, T* __restrict col, int64_t ldcol) {
  using im2col_detail::valid_range;
  if (win.sh == 1 && win.sw == 1 && g.ow == g.w) return im2col_detail::im2col_shifted(x, g, win, col, ldcol);
  for (int64_t c = 0; c < g.c; ++c) {
    const T* __restrict plane = x + c * g.h * g.w;
    for (int64_t i = 0; i < win.kh; ++i) {
      for (int64_t j = 0; j < win.kw; ++j) {
        T* __restrict row = col + ((c * win.kh + i) * win.kw + j) * ldcol;
        int64_t lo, hi;
        valid_range(g.ow, g.w, win.sw, win.pw, j, lo, hi);
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          T* __restrict out = row + oh * g.ow;
          const int64_t iy = oh * win.sh - win.ph + i;
          if (iy < 0 || iy >= g.h) {
            std::fill_n(out, g.ow, T(0));
            continue;
          }
          const T* __restrict in = plane + iy * g.w - win.pw + j;  // in[ow*sw] is x[c][iy][ow*sw - pw + j]
          std::fill_n(out, lo, T(0));
          if (win.sw == 1) {
            std::copy(in + lo, in + hi, out + lo);
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] = in[ow * win.sw];
          }
          std::fill(out + hi, out + g.ow, T(0));
        }
      }
    }
  }
}

// dx (C, H, W) += the adjoint of im2col applied to col. The caller zeroes dx first.
template <typename T>
void col2im_add(const T* __restrict col, int64_t ldcol, const ImageGeometry& g, const Window2d& win, T* __restrict dx) {
  using im2col_detail::valid_range;
  for (int64_t c = 0; c < g.c; ++c) {
    T* __restrict plane = dx + c * g.h * g.w;
    for (int64_t i = 0; i < win.kh; ++i) {
      for (int64_t j = 0; j < win.kw; ++j) {
        const T* __restrict row = col + ((c * win.kh + i) * win.kw + j) * ldcol;
        int64_t lo, hi;
        valid_range(g.ow, g.w, win.sw, win.pw, j, lo, hi);
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          const int64_t iy = oh * win.sh - win.ph + i;
          if (iy < 0 || iy >= g.h) continue;
          const T* __restrict in = row + oh * g.ow;
          T* __restrict out = plane + iy * g.w - win.pw + j;
          if (win.sw == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] += in[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow * win.sw] += in[ow];
          }
        }
      }
    }
  }
}

}  // namespace qtrain
