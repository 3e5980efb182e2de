// conv2d's CUDA path through cuDNN's convolution API: descriptors for x, y, the filter, the bias and
// the convolution are created on first use and rebuilt only when the batch size changes; the three
// algorithms come from cudnnGet*Algorithm_v7 (cuDNN's heuristic ranking: the first that succeeds
// within the workspace cap, its workspace queried for this descriptor's math type), and one workspace,
// sized for the largest of them, lives in the layer.
// The math type is CUDNN_FMA_MATH: plain f32 FMA, no TF32 tensor cores, so results agree with the
// f32 CPU reference to f32 rounding (TF32 would keep only 10 mantissa bits of every operand).
#include <algorithm>

#include "framework/core/cuda_context.h"
#include "layers/conv2d.h"

namespace qtrain {

namespace {
constexpr size_t kWorkspaceCap = size_t{512} << 20;  // bytes an algorithm may ask for

// The first algorithm of the heuristics' ranking that cuDNN can run within the workspace cap, with its
// workspace asked for explicitly under this descriptor: the ranking may list an algorithm under
// another math type than the descriptor's CUDNN_FMA_MATH and report that variant's workspace, too
// small for the FMA one (other frameworks hit exactly this). `need` grows to the largest size picked.
template <typename Algo, typename Perf, typename WorkspaceOf>
Algo pick_algorithm(const Perf* perf, int count, const char* direction, WorkspaceOf workspace_of, size_t& need) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    size_t bytes = 0;
    if (workspace_of(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    bytes = std::max(bytes, perf[i].memory);
    if (bytes > kWorkspaceCap) continue;
    need = std::max(need, bytes);
    return perf[i].algo;
  }
  QT_FAIL("conv2d: cuDNN offers no {} algorithm for this shape", direction);
  return Algo{};
}
}  // namespace

struct Conv2dCudnn {
  int64_t batch = -1;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  Tensor workspace;  // u8 on the device
  size_t workspace_bytes = 0;

  ~Conv2dCudnn() {
    // Destructors must not throw: errors while freeing descriptors are ignored.
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

void Conv2dCudnnDeleter::operator()(Conv2dCudnn* state) const noexcept { delete state; }

namespace {

int as_int(int64_t v, const char* what) { return checked_int(v, "conv2d", what); }

// The descriptors and algorithms for `batch` samples (rebuilt when the batch changes).
Conv2dCudnn& prepare(Context& ctx, Conv2dCudnnPtr& state, const ImageGeometry& g, const Window2d& win,
                     int64_t out_channels, int64_t batch, Device device) {
  if (state && state->batch == batch) return *state;
  if (!state) {
    state.reset(new Conv2dCudnn);
    Conv2dCudnn& s = *state;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.y));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.bias));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&s.w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&s.conv));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(s.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                           as_int(out_channels, "out_channels"), as_int(g.c, "channels"),
                                           as_int(win.kh, "kernel"), as_int(win.kw, "kernel")));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(s.conv, as_int(win.ph, "padding"), as_int(win.pw, "padding"),
                                                as_int(win.sh, "stride"), as_int(win.sw, "stride"), 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(s.conv, CUDNN_FMA_MATH));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                           as_int(out_channels, "out_channels"), 1, 1));
  }
  Conv2dCudnn& s = *state;
  const int n = as_int(batch, "batch");
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, as_int(g.c, "channels"),
                                         as_int(g.h, "height"), as_int(g.w, "width")));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(s.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n,
                                         as_int(out_channels, "out_channels"), as_int(g.oh, "height"),
                                         as_int(g.ow, "width")));
  int on = 0, oc = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(s.conv, s.x, s.w, &on, &oc, &oh, &ow));
  QT_CHECK(on == n && oc == out_channels && oh == g.oh && ow == g.ow,
           "conv2d: cuDNN computes output [{}, {}, {}, {}], the layer [{}, {}, {}, {}]", on, oc, oh, ow, n,
           out_channels, g.oh, g.ow);

  cudnnHandle_t h = ctx.cuda().cudnn;
  size_t need = 0;
  {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, s.x, s.w, s.conv, s.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                       &count, perf));
    s.fwd = pick_algorithm<cudnnConvolutionFwdAlgo_t>(
        perf, count, "forward",
        [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, s.x, s.w, s.conv, s.y, algo, bytes);
        },
        need);
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, s.w, s.y, s.conv, s.x,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
    s.bwd_data = pick_algorithm<cudnnConvolutionBwdDataAlgo_t>(
        perf, count, "backward-data",
        [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, s.w, s.y, s.conv, s.x, algo, bytes);
        },
        need);
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, s.x, s.y, s.conv, s.w,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
    s.bwd_filter = pick_algorithm<cudnnConvolutionBwdFilterAlgo_t>(
        perf, count, "backward-filter",
        [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, s.x, s.y, s.conv, s.w, algo, bytes);
        },
        need);
  }
  if (need > s.workspace_bytes) {
    // The old workspace may still be in use by queued work; let it finish before it is freed.
    CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream));
    s.workspace = Tensor::empty({static_cast<int64_t>(need)}, DType::u8, device);
    s.workspace_bytes = need;
  }
  s.batch = batch;
  return s;
}

void* workspace_ptr(Conv2dCudnn& s) { return s.workspace_bytes > 0 ? s.workspace.raw() : nullptr; }

}  // namespace

void conv2d_forward_cuda(Context& ctx, Conv2dCudnnPtr& state, const ImageGeometry& g, const Window2d& win,
                         const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  const int64_t batch = x.dim(0), out_channels = w.dim(0);
  if (batch == 0) return;
  Conv2dCudnn& s = prepare(ctx, state, g, win, out_channels, batch, x.device());
  cudnnHandle_t h = ctx.cuda().cudnn;
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionForward(h, &one, s.x, x.data<float>(), s.w, w.data<float>(), s.conv, s.fwd,
                                      workspace_ptr(s), s.workspace_bytes, &zero, s.y, y.data<float>()));
  if (b) CUDNN_CHECK(cudnnAddTensor(h, &one, s.bias, b->data<float>(), &one, s.y, y.data<float>()));
}

void conv2d_backward_cuda(Context& ctx, Conv2dCudnnPtr& state, const ImageGeometry& g, const Window2d& win,
                          const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db, Tensor* dx) {
  const int64_t batch = x.dim(0), out_channels = w.dim(0);
  cudaStream_t stream = ctx.cuda().stream;
  if (batch == 0) {
    // An empty batch contributes nothing; the gradients are still overwritten.
    CUDA_CHECK(cudaMemsetAsync(dw.raw(), 0, dw.nbytes(), stream));
    if (db) CUDA_CHECK(cudaMemsetAsync(db->raw(), 0, db->nbytes(), stream));
    return;
  }
  Conv2dCudnn& s = prepare(ctx, state, g, win, out_channels, batch, x.device());
  cudnnHandle_t h = ctx.cuda().cudnn;
  const float one = 1.0f, zero = 0.0f;
  if (db) CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, s.y, dy.data<float>(), &zero, s.bias, db->data<float>()));
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, s.x, x.data<float>(), s.y, dy.data<float>(), s.conv, s.bwd_filter,
                                             workspace_ptr(s), s.workspace_bytes, &zero, s.w, dw.data<float>()));
  if (dx)
    CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, s.w, w.data<float>(), s.y, dy.data<float>(), s.conv, s.bwd_data,
                                             workspace_ptr(s), s.workspace_bytes, &zero, s.x, dx->data<float>()));
}

}  // namespace qtrain
