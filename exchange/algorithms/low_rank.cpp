// PowerSGD's arithmetic on the CPU (low_rank.h); CUDA buffers go to low_rank.cu. Plain loops: the
// matrices are multiplied by thin ones (rank <= 64 columns), so every product reads M once.
#include "exchange/algorithms/low_rank.h"

#include <cmath>
#include <vector>

#include "framework/core/check.h"

namespace qtrain::exchange {
namespace {

// a . b over n floats: 8 float lanes (j mod 8), folded pairwise.
float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float lane[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lane[l] += a[j + l] * b[j + l];
  for (int l = 0; j + l < n; ++l) lane[l] += a[j + l] * b[j + l];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// The orthogonalization's dot product (low_rank.h: kOrthoLanes double lanes, pairwise fold). The
// products of two floats are exact in double, so a fused multiply-add gives the same bits.
double ortho_dot(const float* a, const float* b, int64_t n) {
  double lane[kOrthoLanes] = {};
  for (int64_t j = 0; j < n; ++j) lane[j % kOrthoLanes] += static_cast<double>(a[j]) * static_cast<double>(b[j]);
  for (int width = kOrthoLanes / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

}  // namespace

void project_low_rank(Context& ctx, const float* m, int64_t rows, int64_t cols, const float* q_t, int rank,
                      float* p_t) {
  if (ctx.device().is_cuda()) return low_rank_cuda::project(ctx, m, rows, cols, q_t, rank, p_t);
  for (int64_t i = 0; i < rows; ++i)
    for (int k = 0; k < rank; ++k) p_t[k * rows + i] = dot(m + i * cols, q_t + k * cols, cols);
}

void back_project_low_rank(Context& ctx, const float* m, int64_t rows, int64_t cols, const float* p_t, int rank,
                           float* q_t) {
  if (ctx.device().is_cuda()) return low_rank_cuda::back_project(ctx, m, rows, cols, p_t, rank, q_t);
  for (int64_t j = 0; j < rank * cols; ++j) q_t[j] = 0.0f;
  // Row by row of M (read once), each row added into every column of Q: sums in ascending i.
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict row = m + i * cols;
    for (int k = 0; k < rank; ++k) {
      const float p = p_t[k * rows + i];
      float* __restrict q = q_t + k * cols;
      for (int64_t j = 0; j < cols; ++j) q[j] += p * row[j];
    }
  }
}

void expand_low_rank(Context& ctx, const float* p_t, const float* q_t, int64_t rows, int64_t cols, int rank, float* out,
                     float* residual) {
  if (ctx.device().is_cuda()) return low_rank_cuda::expand(ctx, p_t, q_t, rows, cols, rank, out, residual);
  std::vector<double> acc(static_cast<size_t>(cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) acc[static_cast<size_t>(j)] = 0.0;
    for (int k = 0; k < rank; ++k) {
      const double p = p_t[k * rows + i];
      const float* q = q_t + k * cols;
      for (int64_t j = 0; j < cols; ++j) acc[static_cast<size_t>(j)] += p * static_cast<double>(q[j]);
    }
    float* o = out + i * cols;
    for (int64_t j = 0; j < cols; ++j) o[j] = static_cast<float>(acc[static_cast<size_t>(j)]);
    if (residual) {
      float* e = residual + i * cols;
      for (int64_t j = 0; j < cols; ++j) e[j] -= o[j];
    }
  }
}

void orthonormalize_rows(Context& ctx, float* x, int count, int64_t len, float epsilon) {
  if (ctx.device().is_cuda()) return low_rank_cuda::orthonormalize(ctx, x, count, len, epsilon);
  for (int c = 0; c < count; ++c) {
    float* col = x + c * len;
    const float divisor = static_cast<float>(std::sqrt(ortho_dot(col, col, len))) + epsilon;
    if (divisor != 0.0f)
      for (int64_t j = 0; j < len; ++j) col[j] /= divisor;
    for (int r = c + 1; r < count; ++r) {
      float* rest = x + r * len;
      // The projection rounded to float, so that its products with the column stay exact in double.
      const double d = static_cast<float>(ortho_dot(col, rest, len));
      for (int64_t j = 0; j < len; ++j) rest[j] = static_cast<float>(static_cast<double>(rest[j]) - d * col[j]);
    }
  }
}

void add_into(Context& ctx, float* y, const float* x, int64_t n) {
  if (ctx.device().is_cuda()) return low_rank_cuda::add_into(ctx, y, x, n);
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace qtrain::exchange
