// winograd: 3x3 stride-1 convolutions on the CPU by Winograd's minimal filtering, F(2x2, 3x3)
// (Lavin & Gray 2016, "Fast Algorithms for Convolutional Neural Networks"). conv2d uses it for the
// forward pass and for dx (which with stride 1 is the convolution of dy with the flipped, transposed
// kernel), and F(3x3, 2x2) for the weight gradient.
//
// The output is cut into 2x2 tiles; tile t reads the 4x4 input patch d_t starting at (2ty - ph,
// 2tx - pw). With B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5;
// 0 0 1] and A^T = [1 1 1 0; 0 1 -1 -1], one output tile is
//   y_t[o] = A^T ( sum_c (G g[o][c] G^T) .* (B^T d_t[c] B) ) A
// so at each of the 16 positions xi of the 4x4 transformed domain the sum over channels is one matrix
// product over all tiles at once: M[xi] (OC, T) = U[xi] (OC, C) . V[xi] (C, T). That is 16 products of
// 16*OC*C*T multiplies in all, against im2col's 9*OC*C*(4T): 2.25x fewer, and V holds 4x the input
// where im2col's column matrix holds 9x. They run in a register-blocked AVX2 kernel fused with the
// output transform, so M never leaves the L1 cache (winograd.cpp says why not OpenBLAS).
// The weight gradient dW[o][c] = sum_t correlation(d_t[c], dy tile t[o] (2x2)) is F(3x3, 2x2) in
// each tile: dW = A'^T ( sum_t (G' dy_t G'^T) .* (B^T d_t B) ) A' with the same input transform
// B^T, G' = [1 0; .5 .5; .5 -.5; 0 -1] and A'^T = [1 1 1 0; 0 1 -1 0; 0 1 1 1]. The sum over tiles
// is again 16 products, long reductions over the tiles: dWhat[xi]^T (C, OC) = V[xi] (C, T) . D[xi]^T
// (T, OC), in the forward's kernel on a transposed dy transform, and the output transform runs once
// on the sum. (The textbook F(3, 2) has B'^T's last row negated; negating G''s last row instead gives
// the same products and lets both gradients share the forward's input transform.)
// Per position the transforms use only additions and halvings, which in float lose about as much as
// the im2col sum's rounding: tests/layers/test_winograd.cpp compares both paths.
//
// Layouts in the lane's work buffer (T = tiles of a block of samples, tile index (s, ty, tx)
// row-major): V (16, C, T) and D^T (16, T, OC'), each V[xi] a cache line apart more than its size
// (see position_stride); transformed weights U (16, OC, C) shared by the lanes. OC' is OC rounded up
// to a multiple of 16 (the kernel's column block), its extra columns zero.
#pragma once

#include <cstdint>

#include "layers/conv_geometry.h"

namespace qtrain {

// Whether Winograd F(2x2, 3x3) applies: a 3x3 kernel, stride 1, padding at most 2 on each axis (so
// that the flipped padding of the dx convolution, 2 - p, is >= 0 too).
inline bool winograd_fits(const Window2d& win) {
  return win.kh == 3 && win.kw == 3 && win.sh == 1 && win.sw == 1 && win.ph <= 2 && win.pw <= 2;
}

// One 3x3 stride-1 convolution: input (c, h, w) per sample, zero padding (ph, pw), output (oc, oh, ow)
// with oh = h + 2ph - 2, ow = w + 2pw - 2, cut into th x tw tiles of m x m outputs (the last ones
// partial when m does not divide oh or ow): m = 2 for this file's F(2x2, 3x3) and F(3x3, 2x2), 4 for
// winograd4.h's F(4x4, 3x3).
struct WinogradConv {
  int64_t c = 0, h = 0, w = 0, oc = 0, oh = 0, ow = 0, ph = 0, pw = 0, th = 0, tw = 0, m = 2;

  // conv2d's forward (and weight gradient): x (C, H, W) -> y (OC, OH, OW).
  static WinogradConv forward_of(const ImageGeometry& g, const Window2d& win, int64_t out_channels, int64_t m = 2);
  // Its dx as a convolution: dy (OC, OH, OW) with padding 2 - p -> dx (C, H, W).
  static WinogradConv dx_of(const ImageGeometry& g, const Window2d& win, int64_t out_channels, int64_t m = 2);

  int64_t tiles() const { return th * tw; }
  int64_t in_size() const { return c * h * w; }
  int64_t out_size() const { return oc * oh * ow; }
};

// Samples per block of a lane: as many as keep the block's V and D near a fixed budget (a core's
// cache), at least 1 and at most `samples`.
int64_t winograd_block_samples(const WinogradConv& g, int64_t samples);
// Elements of one lane's work buffer for blocks of `block` samples (winograd_conv and
// winograd_weight_grad on the same geometry need the same size).
int64_t winograd_work_size(const WinogradConv& g, int64_t block);

// u (16, OC, C) = G w[o][c] G^T for w (OC, C, 3, 3). With `flipped`, w is read as the dx
// convolution's kernel W'[c][o][i][j] = w[o][c][2-i][2-j] instead, and u is (16, C, OC): here oc and
// c are the counts of w's own layout.
template <typename T>
void winograd_weights(const T* w, int64_t oc, int64_t c, bool flipped, T* u);

// y (n, OC, OH, OW) = the convolution of x (n, C, H, W) with the weights transformed into u, plus
// bias (OC) when not null. Processes the samples in blocks of `block`; `work` holds
// winograd_work_size(g, block) elements. Single-threaded (one lane's samples).
template <typename T>
void winograd_conv(const WinogradConv& g, const T* u, const T* bias, const T* x, T* y, int64_t n, int64_t block,
                   T* work);

// Elements of winograd_weight_grad's transformed weight gradient: 16 * C * OC'.
int64_t winograd_weight_grad_size(const WinogradConv& g);

// dwt (16, C, OC') = the transformed weight gradient of n samples, transposed (overwritten, or with
// `accumulate` added to dwt's value): x (n, C, H, W) and dy (n, OC, OH, OW) of the forward geometry g.
// `work` as for winograd_conv. Each entry is one sum over the tiles in order, continued across calls
// with `accumulate`: the same bits for any block size and any split of the samples into calls.
template <typename T>
void winograd_weight_grad(const WinogradConv& g, const T* x, const T* dy, int64_t n, int64_t block, T* work, T* dwt,
                          bool accumulate = false);

// The input transform on its own, for tests: v (16, C, n * tiles) = B^T d B of every tile of x (n, C,
// H, W), each position's matrix right after the previous one. With `reference` the scalar loops,
// otherwise the one winograd_conv runs (AVX-512 in float where the build has it): both write the same
// bits.
template <typename T>
void winograd_input_transform(const WinogradConv& g, const T* x, int64_t n, T* v, bool reference);

// The weight gradient's dy transform on its own, for tests: d (16, n * tiles, OC') = G' e G'^T of
// every 2x2 tile e of dy (n, OC, OH, OW), each position's matrix right after the previous one. With
// `reference` the scalar loop, otherwise the one winograd_weight_grad runs (AVX2 in float where the
// build has it): both write the same bits.
template <typename T>
void winograd_weight_grad_transform(const WinogradConv& g, const T* dy, int64_t n, T* d, bool reference);

// dw (OC, C, 3, 3) = A'^T dwt[.][c][o] A', the weight gradient from its transformed sum (16, C, OC').
template <typename T>
void winograd_weight_grad_output(const T* dwt, int64_t oc, int64_t c, T* dw);

}  // namespace qtrain
