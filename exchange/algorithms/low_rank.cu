// PowerSGD's arithmetic on CUDA buffers (low_rank.h): the two thin products through cuBLAS, the
// expansion, the orthogonalization and the sum as kernels on the context's stream. The kernels
// follow low_rank.cpp's summation order in double, so their results are the CPU's bits.
#include "exchange/algorithms/low_rank.h"
#include "framework/core/check.h"
#include "framework/core/cuda_context.h"

namespace qtrain::exchange::low_rank_cuda {
namespace {

int as_int(int64_t v, const char* what) { return checked_int(v, "powersgd", what); }

__global__ void expand_kernel(const float* p_t, const float* q_t, long long rows, long long cols, int rank, float* out,
                              float* residual) {
  const long long n = rows * cols;
  for (long long at = blockIdx.x * 1LL * blockDim.x + threadIdx.x; at < n; at += 1LL * gridDim.x * blockDim.x) {
    const long long i = at / cols, j = at % cols;
    double acc = 0.0;
    for (int k = 0; k < rank; ++k)
      acc += static_cast<double>(p_t[k * rows + i]) * static_cast<double>(q_t[k * cols + j]);
    const float o = static_cast<float>(acc);
    out[at] = o;
    if (residual) residual[at] -= o;
  }
}

__global__ void add_kernel(float* y, const float* x, long long n) {
  for (long long i = blockIdx.x * 1LL * blockDim.x + threadIdx.x; i < n; i += 1LL * gridDim.x * blockDim.x)
    y[i] += x[i];
}

// a . b over len floats in kOrthoLanes double lanes (thread l sums elements l, l + kOrthoLanes, ...),
// folded pairwise in shared memory: low_rank.cpp's order. Every thread gets the sum.
__device__ double block_dot(const float* a, const float* b, long long len, double* lane) {
  double s = 0.0;
  for (long long j = threadIdx.x; j < len; j += kOrthoLanes) s += static_cast<double>(a[j]) * static_cast<double>(b[j]);
  lane[threadIdx.x] = s;
  __syncthreads();
  for (int width = kOrthoLanes / 2; width >= 1; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) lane[threadIdx.x] += lane[threadIdx.x + width];
    __syncthreads();
  }
  const double total = lane[0];
  __syncthreads();  // lane[] is reused by the next call
  return total;
}

// One block of kOrthoLanes threads: Gram-Schmidt over the `count` rows of x.
__global__ void orthonormalize_kernel(float* x, int count, long long len, float epsilon) {
  __shared__ double lane[kOrthoLanes];
  for (int c = 0; c < count; ++c) {
    float* col = x + c * len;
    const float divisor = static_cast<float>(sqrt(block_dot(col, col, len, lane))) + epsilon;
    if (divisor != 0.0f)
      for (long long j = threadIdx.x; j < len; j += kOrthoLanes) col[j] /= divisor;
    __syncthreads();
    for (int r = c + 1; r < count; ++r) {
      float* rest = x + r * len;
      const double d = static_cast<float>(block_dot(col, rest, len, lane));
      for (long long j = threadIdx.x; j < len; j += kOrthoLanes)
        rest[j] = static_cast<float>(static_cast<double>(rest[j]) - d * col[j]);
      __syncthreads();
    }
  }
}

}  // namespace

void project(Context& ctx, const float* m, int64_t rows, int64_t cols, const float* q_t, int rank, float* p_t) {
  const float one = 1.0f, zero = 0.0f;
  // Row-major M (rows x cols) is column-major M^T (cols x rows); q_t (rank x cols) is column-major Q
  // (cols x rank) and p_t column-major P (rows x rank): P = op_T(M^T) Q.
  CUBLAS_CHECK(cublasSgemm(ctx.cuda().cublas, CUBLAS_OP_T, CUBLAS_OP_N, as_int(rows, "rows"), rank,
                           as_int(cols, "cols"), &one, m, as_int(cols, "cols"), q_t, as_int(cols, "cols"), &zero, p_t,
                           as_int(rows, "rows")));
}

void back_project(Context& ctx, const float* m, int64_t rows, int64_t cols, const float* p_t, int rank, float* q_t) {
  const float one = 1.0f, zero = 0.0f;
  // Q (cols x rank, column-major) = M^T (column-major cols x rows) P (rows x rank).
  CUBLAS_CHECK(cublasSgemm(ctx.cuda().cublas, CUBLAS_OP_N, CUBLAS_OP_N, as_int(cols, "cols"), rank,
                           as_int(rows, "rows"), &one, m, as_int(cols, "cols"), p_t, as_int(rows, "rows"), &zero, q_t,
                           as_int(cols, "cols")));
}

void expand(Context& ctx, const float* p_t, const float* q_t, int64_t rows, int64_t cols, int rank, float* out,
            float* residual) {
  if (rows * cols == 0) return;
  expand_kernel<<<blocks_for(rows * cols), 256, 0, ctx.cuda().stream>>>(p_t, q_t, rows, cols, rank, out, residual);
  CUDA_CHECK(cudaGetLastError());
}

void orthonormalize(Context& ctx, float* x, int count, int64_t len, float epsilon) {
  if (count == 0 || len == 0) return;
  orthonormalize_kernel<<<1, kOrthoLanes, 0, ctx.cuda().stream>>>(x, count, len, epsilon);
  CUDA_CHECK(cudaGetLastError());
}

void add_into(Context& ctx, float* y, const float* x, int64_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), 256, 0, ctx.cuda().stream>>>(y, x, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::exchange::low_rank_cuda
