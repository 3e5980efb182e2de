// Internal to the gradient exchange: the arithmetic of PowerSGD (powersgd.cpp) on CPU or CUDA
// buffers (every pointer in ctx.device()'s memory). A tensor is the row-major matrix M (rows x cols,
// as stored); P (rows x rank) and Q (cols x rank) are kept transposed, P^T and Q^T, so that the
// columns the orthogonalization walks are contiguous rows.
//
// Which results are the same bits on CPU and CUDA: orthonormalize_rows and expand_low_rank (their
// sums run in double over exact products in a fixed order, on both devices), add_into. The two
// products M Q and M^T P are float GEMMs (cuBLAS on CUDA, this file's loops on the CPU) whose sums
// run in different orders: they agree within float rounding of sums over cols (resp. rows) terms.
#pragma once

#include <cstdint>

#include "framework/core/context.h"

namespace qtrain::exchange {

// The number of partial sums (lanes) of the orthogonalization's dot products, and their fold order:
// lane l sums elements l, l + kOrthoLanes, ... in double; lanes fold pairwise, halving the width.
inline constexpr int kOrthoLanes = 256;

// p_t (rank x rows) = (M Q)^T for M (rows x cols) and q_t (rank x cols).
void project_low_rank(Context& ctx, const float* m, int64_t rows, int64_t cols, const float* q_t, int rank, float* p_t);
// q_t (rank x cols) = (M^T P)^T for M (rows x cols) and p_t (rank x rows).
void back_project_low_rank(Context& ctx, const float* m, int64_t rows, int64_t cols, const float* p_t, int rank,
                           float* q_t);
// out (rows x cols) = P Q^T, out[i][j] = sum_k p_t[k][i] q_t[k][j] (in double, k ascending, rounded
// once); then, when `residual` is not null, residual[i] -= out[i] (float).
void expand_low_rank(Context& ctx, const float* p_t, const float* q_t, int64_t rows, int64_t cols, int rank, float* out,
                     float* residual);
// Gram-Schmidt over the `count` rows of x (each `len` values), as powerSGD_hook's
// _orthogonalize_gram_schmidt: row i /= (||row i|| + epsilon), then every later row r -= (row i . r) row i.
// A row whose norm plus epsilon is 0 (all zero, epsilon 0) stays zero (the hook would divide by zero).
void orthonormalize_rows(Context& ctx, float* x, int count, int64_t len, float epsilon);
// y[i] += x[i] for n values.
void add_into(Context& ctx, float* y, const float* x, int64_t n);

namespace low_rank_cuda {  // low_rank.cu (or low_rank_nocuda.cpp)
void project(Context& ctx, const float* m, int64_t rows, int64_t cols, const float* q_t, int rank, float* p_t);
void back_project(Context& ctx, const float* m, int64_t rows, int64_t cols, const float* p_t, int rank, float* q_t);
void expand(Context& ctx, const float* p_t, const float* q_t, int64_t rows, int64_t cols, int rank, float* out,
            float* residual);
void orthonormalize(Context& ctx, float* x, int count, int64_t len, float epsilon);
void add_into(Context& ctx, float* y, const float* x, int64_t n);
}  // namespace low_rank_cuda

}  // namespace qtrain::exchange
