// locally_connected2d on CUDA: the CPU path's arithmetic (locally_connected2d.cpp), with kernels for the
// gathers and scatters and cublasSgemmStridedBatched for the P per-position products.
//   cols (P, K, B), outs / dys (P, OC, B), w (P, OC, K): every per-position matrix is contiguous and
//   P matrices apart by a fixed stride, which is what the strided-batched GEMM wants. (The CPU
//   gathers cols as (P, B, K) for cache locality; here b is innermost so that the threads of a warp,
//   which differ in b, write adjacent addresses.)
// cuBLAS is column-major: a row-major (r, c) matrix is the column-major (c, r) matrix at the same
// address, so each row-major product below is issued as its transpose (written out at each call).
// The col2im step gathers (each dx element sums its windows), so no atomics and deterministic sums.
#include "framework/core/cuda_context.h"
#include "layers/locally_connected2d.h"

namespace qtrain {
namespace {

constexpr int kThreads = 256;

struct Dims {
  int b, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, oc;
  __host__ __device__ int k() const { return c * kh * kw; }
  __host__ __device__ int p() const { return oh * ow; }
};

#define QT_GRID_STRIDE(i, n)                                                                 \
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<long long>(gridDim.x) * blockDim.x)

// cols[p][k][b] = x[b][c][oh*sh - ph + i][ow*sw - pw + j] (0 in the padding), k = (c*kh + i)*kw + j.
__global__ void gather_windows_kernel(Dims d, const float* __restrict__ x, float* __restrict__ cols, long long n) {
  QT_GRID_STRIDE(t, n) {
    const int b = static_cast<int>(t % d.b);
    const int k = static_cast<int>((t / d.b) % d.k());
    const int p = static_cast<int>(t / (static_cast<long long>(d.b) * d.k()));
    const int c = k / (d.kh * d.kw), r = k % (d.kh * d.kw);
    const int iy = (p / d.ow) * d.sh - d.ph + r / d.kw, ix = (p % d.ow) * d.sw - d.pw + r % d.kw;
    cols[t] = (iy >= 0 && iy < d.h && ix >= 0 && ix < d.w)
                  ? x[((static_cast<long long>(b) * d.c + c) * d.h + iy) * d.w + ix]
                  : 0.0f;
  }
}

// y[b][oc][p] = outs[p][oc][b] + bias[oc][p]
__global__ void scatter_outputs_kernel(Dims d, const float* __restrict__ outs, const float* __restrict__ bias,
                                       float* __restrict__ y, long long n) {
  QT_GRID_STRIDE(t, n) {
    const int p = static_cast<int>(t % d.p());
    const int o = static_cast<int>((t / d.p()) % d.oc);
    const int b = static_cast<int>(t / (static_cast<long long>(d.p()) * d.oc));
    y[t] = outs[(static_cast<long long>(p) * d.oc + o) * d.b + b] + (bias ? bias[o * d.p() + p] : 0.0f);
  }
}

// dys[p][oc][b] = dy[b][oc][p]
__global__ void gather_grads_kernel(Dims d, const float* __restrict__ dy, float* __restrict__ dys, long long n) {
  QT_GRID_STRIDE(t, n) {
    const int b = static_cast<int>(t % d.b);
    const int o = static_cast<int>((t / d.b) % d.oc);
    const int p = static_cast<int>(t / (static_cast<long long>(d.b) * d.oc));
    dys[t] = dy[(static_cast<long long>(b) * d.oc + o) * d.p() + p];
  }
}

// db[oc][p] = sum over b of dy[b][oc][p], one thread per (oc, p), samples in order.
__global__ void bias_grad_kernel(Dims d, const float* __restrict__ dy, float* __restrict__ db, long long n) {
  QT_GRID_STRIDE(t, n) {
    float s = 0.0f;
    for (int b = 0; b < d.b; ++b) s += dy[static_cast<long long>(b) * n + t];
    db[t] = s;
  }
}

// dx[b][c][iy][ix] = sum of dcols[p][k][b] over the windows (p, k) that copied this element.
__global__ void col2im_kernel(Dims d, const float* __restrict__ dcols, float* __restrict__ dx, long long n) {
  QT_GRID_STRIDE(t, n) {
    const int ix = static_cast<int>(t % d.w), iy = static_cast<int>((t / d.w) % d.h);
    const int c = static_cast<int>((t / (static_cast<long long>(d.w) * d.h)) % d.c);
    const int b = static_cast<int>(t / (static_cast<long long>(d.w) * d.h * d.c));
    float s = 0.0f;
    for (int i = 0; i < d.kh; ++i) {
      const int ty = iy + d.ph - i;  // = oh * sh
      if (ty < 0 || ty % d.sh != 0 || ty / d.sh >= d.oh) continue;
      for (int j = 0; j < d.kw; ++j) {
        const int tx = ix + d.pw - j;
        if (tx < 0 || tx % d.sw != 0 || tx / d.sw >= d.ow) continue;
        const int p = (ty / d.sh) * d.ow + tx / d.sw, k = (c * d.kh + i) * d.kw + j;
        s += dcols[(static_cast<long long>(p) * d.k() + k) * d.b + b];
      }
    }
    dx[t] = s;
  }
}

#undef QT_GRID_STRIDE

int as_int(int64_t v, const char* what) { return checked_int(v, "locally_connected2d", what); }

Dims make_dims(const ImageGeometry& g, const Window2d& win, int64_t batch, int64_t out_channels) {
  Dims d{as_int(batch, "batch"),
         as_int(g.c, "channels"),
         as_int(g.h, "height"),
         as_int(g.w, "width"),
         as_int(g.oh, "output height"),
         as_int(g.ow, "output width"),
         as_int(win.kh, "kernel"),
         as_int(win.kw, "kernel"),
         as_int(win.sh, "stride"),
         as_int(win.sw, "stride"),
         as_int(win.ph, "padding"),
         as_int(win.pw, "padding"),
         as_int(out_channels, "out_channels")};
  // Element counts of the scratch matrices must fit the 64-bit indices, and one matrix cuBLAS's ints.
  as_int(static_cast<int64_t>(d.k()) * d.b, "window matrix size");
  return d;
}

// cols then outs/dys, grown to the largest batch. The old buffer may still be read by queued work.
float* ensure_scratch(Context& ctx, Tensor& scratch, int64_t elements, Device device) {
  if (!scratch.defined() || scratch.numel() < elements) {
    CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream));
    scratch = Tensor::empty({elements}, DType::f32, device);
  }
  return scratch.data<float>();
}

}  // namespace

void locally_connected2d_forward_cuda(Context& ctx, const ImageGeometry& g, const Window2d& win, const Tensor& x,
                                      const Tensor& w, const Tensor* b, Tensor& y, Tensor& scratch) {
  const int64_t batch = x.dim(0);
  if (batch == 0) return;
  const Dims d = make_dims(g, win, batch, w.dim(1));
  const long long ncols = static_cast<long long>(d.p()) * d.k() * d.b,
                  nouts = static_cast<long long>(d.p()) * d.oc * d.b;
  float* cols = ensure_scratch(ctx, scratch, ncols + nouts, x.device());
  float* outs = cols + ncols;
  CudaHandles& h = ctx.cuda();
  gather_windows_kernel<<<blocks_for(ncols, kThreads), kThreads, 0, h.stream>>>(d, x.data<float>(), cols, ncols);
  CUDA_CHECK(cudaGetLastError());
  const float one = 1.0f, zero = 0.0f;
  // Row-major outs_p (OC, B) = W_p (OC, K) cols_p (K, B)  <=>  column-major outs_p^T (B, OC) =
  // cols_p^T (B, K, ld B) W_p^T (K, OC, ld K).
  CUBLAS_CHECK(cublasSgemmStridedBatched(h.cublas, CUBLAS_OP_N, CUBLAS_OP_N, d.b, d.oc, d.k(), &one, cols, d.b,
                                         static_cast<long long>(d.k()) * d.b, w.data<float>(), d.k(),
                                         static_cast<long long>(d.oc) * d.k(), &zero, outs, d.b,
                                         static_cast<long long>(d.oc) * d.b, d.p()));
  scatter_outputs_kernel<<<blocks_for(nouts, kThreads), kThreads, 0, h.stream>>>(
      d, outs, b ? b->data<float>() : nullptr, y.data<float>(), nouts);
  CUDA_CHECK(cudaGetLastError());
}

void locally_connected2d_backward_cuda(Context& ctx, const ImageGeometry& g, const Window2d& win, const Tensor& x,
                                       const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db, Tensor* dx,
                                       Tensor& scratch) {
  const int64_t batch = x.dim(0);
  CudaHandles& h = ctx.cuda();
  if (batch == 0) {
    // An empty batch contributes nothing; the gradients are still overwritten.
    CUDA_CHECK(cudaMemsetAsync(dw.raw(), 0, dw.nbytes(), h.stream));
    if (db) CUDA_CHECK(cudaMemsetAsync(db->raw(), 0, db->nbytes(), h.stream));
    return;
  }
  const Dims d = make_dims(g, win, batch, w.dim(1));
  const long long ncols = static_cast<long long>(d.p()) * d.k() * d.b,
                  nouts = static_cast<long long>(d.p()) * d.oc * d.b;
  float* cols = ensure_scratch(ctx, scratch, ncols + nouts, x.device());
  float* dys = cols + ncols;
  if (db) {
    const long long n = static_cast<long long>(d.oc) * d.p();
    bias_grad_kernel<<<blocks_for(n, kThreads), kThreads, 0, h.stream>>>(d, dy.data<float>(), db->data<float>(), n);
    CUDA_CHECK(cudaGetLastError());
  }
  gather_windows_kernel<<<blocks_for(ncols, kThreads), kThreads, 0, h.stream>>>(d, x.data<float>(), cols, ncols);
  CUDA_CHECK(cudaGetLastError());
  gather_grads_kernel<<<blocks_for(nouts, kThreads), kThreads, 0, h.stream>>>(d, dy.data<float>(), dys, nouts);
  CUDA_CHECK(cudaGetLastError());
  const float one = 1.0f, zero = 0.0f;
  // Row-major dW_p (OC, K) = dY_p (OC, B) cols_p^T  <=>  column-major dW_p^T (K, OC) =
  // op_T(cols_p^T stored (B, K), ld B) . dY_p^T (B, OC, ld B).
  CUBLAS_CHECK(cublasSgemmStridedBatched(h.cublas, CUBLAS_OP_T, CUBLAS_OP_N, d.k(), d.oc, d.b, &one, cols, d.b,
                                         static_cast<long long>(d.k()) * d.b, dys, d.b,
                                         static_cast<long long>(d.oc) * d.b, &zero, dw.data<float>(), d.k(),
                                         static_cast<long long>(d.oc) * d.k(), d.p()));
  if (!dx) return;
  // Row-major dcols_p (K, B) = W_p^T dY_p  <=>  column-major dcols_p^T (B, K) =
  // dY_p^T (B, OC, ld B) . op_T(W_p^T stored (K, OC), ld K). Written over cols, which dW no longer needs
  // (same stream, so the dW GEMM above has read them first).
  CUBLAS_CHECK(cublasSgemmStridedBatched(h.cublas, CUBLAS_OP_N, CUBLAS_OP_T, d.b, d.k(), d.oc, &one, dys, d.b,
                                         static_cast<long long>(d.oc) * d.b, w.data<float>(), d.k(),
                                         static_cast<long long>(d.oc) * d.k(), &zero, cols, d.b,
                                         static_cast<long long>(d.k()) * d.b, d.p()));
  const long long nx = dx->numel();
  col2im_kernel<<<blocks_for(nx, kThreads), kThreads, 0, h.stream>>>(d, cols, dx->data<float>(), nx);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain
