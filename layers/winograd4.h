// winograd4: 3x3 stride-1 convolutions on the CPU by Winograd's F(4x4, 3x3) (Lavin & Gray 2016),
// for conv2d's forward pass and dx (the weight gradient stays F(3x3, 2x2) in winograd.h). The output
// is cut into 4x4 tiles; tile t reads the 6x6 input patch d_t starting at (4ty - ph, 4tx - pw). With
//   B^T = [4  0 -5  0 1 0;    G = [ 1/4     0    0;    A^T = [1 1  1 1  1 0;
//          0 -4 -4  1 1 0;         -1/6  -1/6 -1/6;           0 1 -1 2 -2 0;
//          0  4 -4 -1 1 0;         -1/6   1/6 -1/6;           0 1  1 4  4 0;
//          0 -2 -1  2 1 0;          1/24 1/12  1/6;           0 1 -1 8 -8 1]
//          0  2 -1 -2 1 0;          1/24 -1/12 1/6;
//          0  4  0 -5 0 1]             0    0    1]
// one output tile is y_t[o] = A^T ( sum_c (G g[o][c] G^T) .* (B^T d_t[c] B) ) A: at each of the 36
// positions xi of the 6x6 transformed domain one matrix product M[xi] (OC, T) = U[xi] (OC, C) .
// V[xi] (C, T), in winograd_kernel.h's product kernel fused with the output transform as in
// F(2x2, 3x3). Per output and channel pair that is 36/16 = 2.25 multiplies against F(2x2, 3x3)'s
// 16/4 = 4 (1.78x fewer) and im2col's 9, and V holds 2.25x the input against 4x.
// The price is rounding: the transforms' entries grow to 4, 5 and 8 where F(2x2, 3x3)'s are at most 1,
// and the worst-case error bound is 9x that of F(2x2, 3x3) (tests/layers/test_winograd.cpp derives both).
//
// Layouts: V (36, C, T') in the lane's work buffer, T' the block's tiles rounded up to the kernel's
// column block, each V[xi] position_stride apart; U (36, OC, C) shared by the lanes.
#pragma once

#include <cstdint>

#include "layers/winograd.h"

namespace qtrain {

// u (36, OC, C) = G w[o][c] G^T for w (OC, C, 3, 3), computed in double (for float: rounded once). With
// `flipped`, w is read as the dx convolution's kernel W'[c][o][i][j] = w[o][c][2-i][2-j] and u is
// (36, C, OC): oc and c are the counts of w's own layout.
template <typename T>
void winograd4_weights(const T* w, int64_t oc, int64_t c, bool flipped, T* u);

// Samples per block of a lane for the geometry g (g.m == 4): as many as keep the block's V and output
// near winograd_detail::kBlockBudget, at least 1 and at most `samples`, and where the budget allows a
// whole number of the product kernel's 16-tile column blocks.
int64_t winograd4_block_samples(const WinogradConv& g, int64_t samples);
// Elements of one lane's work buffer for winograd4_conv with blocks of `block` samples.
int64_t winograd4_work_size(const WinogradConv& g, int64_t block);

// y (n, OC, OH, OW) = the convolution of x (n, C, H, W) with the weights transformed into u, plus bias
// (OC) when not null; g.m == 4. Processes the samples in blocks of `block`; `work` holds
// winograd4_work_size(g, block) elements. Single-threaded. Each output is one sum over the channels in
// order (the same bits for any block size and any split of the samples).
template <typename T>
void winograd4_conv(const WinogradConv& g, const T* u, const T* bias, const T* x, T* y, int64_t n, int64_t block,
                    T* work);

// The input transform on its own, for tests: v (36, C, n * tiles) = B^T d B of every tile of x (n, C,
// H, W), each position's matrix right after the previous one. With `reference` the scalar loops,
// otherwise the one winograd4_conv runs (AVX-512 in float where the build has it): both write the same
// bits.
template <typename T>
void winograd4_input_transform(const WinogradConv& g, const T* x, int64_t n, T* v, bool reference);

}  // namespace qtrain
