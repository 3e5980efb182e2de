// dense's CUDA path: cuBLAS SGEMMs on the context's stream plus two small kernels (bias broadcast and
// bias-gradient column sums). cuBLAS is column-major; a row-major (r, c) matrix is the column-major
// (c, r) matrix with the same pointer and leading dimension, so each row-major product below is the
// transposed column-major product (the "row-major trick"), written out at each call.
#include "framework/core/cuda_context.h"
#include "layers/dense.h"

namespace qtrain {
namespace {

constexpr int kThreads = 256;

// y (B, out) += b broadcast over rows. Grid-stride over all B*out elements.
__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ b, long long rows, long long out) {
  const long long n = rows * out;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    y[i] += b[i % out];
}

// db[o] = sum over rows of dy[r, o]. A block owns 32 adjacent columns (coalesced loads across
// threadIdx.x) and splits the rows over threadIdx.y; the partial sums are combined in shared memory in
// a fixed order, so the result is deterministic (no atomics): replicas must stay bit-identical.
constexpr int kReduceCols = 32;
constexpr int kReduceRows = 8;
__global__ void bias_grad_kernel(const float* __restrict__ dy, float* __restrict__ db, long long rows, long long out) {
  __shared__ float partial[kReduceRows][kReduceCols];
  const long long col = blockIdx.x * static_cast<long long>(kReduceCols) + threadIdx.x;
  float sum = 0.0f;
  if (col < out)
    for (long long r = threadIdx.y; r < rows; r += kReduceRows) sum += dy[r * out + col];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < out) {
    float total = partial[0][threadIdx.x];
    for (int k = 1; k < kReduceRows; ++k) total += partial[k][threadIdx.x];
    db[col] = total;
  }
}

void add_bias(const Tensor& b, Tensor& y, cudaStream_t stream) {
  const long long rows = y.dim(0), out = y.dim(1);
  QT_CHECK(b.numel() == out, "dense: bias of {} for {} outputs", b.numel(), out);
  if (rows * out == 0) return;
  add_bias_kernel<<<blocks_for(rows * out, kThreads), kThreads, 0, stream>>>(y.data<float>(), b.data<float>(), rows,
                                                                             out);
  CUDA_CHECK(cudaGetLastError());
}

void bias_grad(const Tensor& dy, Tensor& db, cudaStream_t stream) {
  const long long rows = dy.dim(0), out = dy.dim(1);
  QT_CHECK(db.numel() == out, "dense: bias gradient of {} for {} outputs", db.numel(), out);
  if (out == 0) return;
  const long long blocks = (out + kReduceCols - 1) / kReduceCols;
  QT_CHECK(blocks <= 0x7fffffffLL, "dense: {} outputs exceed one grid", out);
  bias_grad_kernel<<<static_cast<unsigned>(blocks), dim3(kReduceCols, kReduceRows), 0, stream>>>(
      dy.data<float>(), db.data<float>(), rows, out);
  CUDA_CHECK(cudaGetLastError());
}

int as_int(int64_t v, const char* what) { return checked_int(v, "dense", what); }

}  // namespace

void dense_forward_cuda(Context& ctx, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  CudaHandles& h = ctx.cuda();
  const int batch = as_int(x.dim(0), "batch"), in = as_int(x.dim(1), "inputs"), out = as_int(w.dim(0), "units");
  if (batch == 0) return;
  const float one = 1.0f, zero = 0.0f;
  // Row-major y (B, out) = x (B, in) W^T  <=>  column-major y^T (out, B) = op_T(W^T as (in, out)) x^T (in, B).
  CUBLAS_CHECK(cublasSgemm(h.cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, &one, w.data<float>(), in,
                           x.data<float>(), in, &zero, y.data<float>(), out));
  if (b) add_bias(*b, y, h.stream);
}

void dense_backward_cuda(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                         Tensor* dx) {
  CudaHandles& h = ctx.cuda();
  const int batch = as_int(x.dim(0), "batch"), in = as_int(x.dim(1), "inputs"), out = as_int(w.dim(0), "units");
  const float one = 1.0f, zero = 0.0f;
  if (batch == 0) {
    // An empty batch contributes nothing; the gradients are still overwritten.
    CUDA_CHECK(cudaMemsetAsync(dw.raw(), 0, dw.nbytes(), h.stream));
    if (db) CUDA_CHECK(cudaMemsetAsync(db->raw(), 0, db->nbytes(), h.stream));
    return;
  }
  // Row-major dW (out, in) = dy^T x  <=>  column-major dW^T (in, out) = x^T (in, B) op_T(dy^T as (out, B)).
  CUBLAS_CHECK(cublasSgemm(h.cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, &one, x.data<float>(), in,
                           dy.data<float>(), out, &zero, dw.data<float>(), in));
  if (db) bias_grad(dy, *db, h.stream);
  if (dx) {
    // Row-major dx (B, in) = dy W  <=>  column-major dx^T (in, B) = W^T (in, out) dy^T (out, B).
    CUBLAS_CHECK(cublasSgemm(h.cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, &one, w.data<float>(), in,
                             dy.data<float>(), out, &zero, dx->data<float>(), in));
  }
}

}  // namespace qtrain
