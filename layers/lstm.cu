// lstm's CUDA path through cuDNN 9's RNN API (cudnnSetRNNDescriptor_v8, cudnnRNNForward,
// cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8).
//
// The cell. cuDNN's CUDNN_LSTM with CUDNN_RNN_DOUBLE_BIAS computes (cuDNN API reference, cudnnRNNMode_t)
//   i = sigma(W_i x + R_i h + bW_i + bR_i)   f = sigma(W_f x + R_f h + bW_f + bR_f)
//   c~ = tanh(W_c x + R_c h + bW_c + bR_c)    o = sigma(W_o x + R_o h + bW_o + bR_o)
//   c' = f c + i c~,   h' = o tanh(c')
// which is qtrain's (PyTorch's) cell with W = weight_ih, R = weight_hh, bW = bias_ih, bR = bias_hh and
// c~ = g. cudnnGetRNNWeightParams numbers one pseudo-layer's matrices by linLayerID 0-3 = W_i, W_f, W_c,
// W_o and 4-7 = R_i, R_f, R_c, R_o (the biases likewise): the gate order i, f, g, o of qtrain's rows.
// Pseudo-layer l*dirs + d is layer l, direction d (0 forward, 1 reverse), as in qtrain's parameter list.
// Each gate matrix is an (H, in) row-major block, i.e. rows [kH, (k+1)H) of qtrain's (4H, in) weight;
// its descriptor is checked to be packed that way before anything is copied.
//
// Parameters. qtrain's parameter arena stays the source of truth (the optimizer, the gradient exchange
// and checkpoints all see it): a table of copy segments, built once from cudnnGetRNNWeightParams and
// merged where both sides are contiguous, packs the parameters into cuDNN's weight space before each
// forward and unpacks the weight gradients after backward (device-to-device copies on the stream).
// Weight gradients use CUDNN_WGRAD_MODE_ADD into a zeroed gradient space (the mode cuDNN's documentation
// lists for cudnnRNNBackwardWeights_v8; it equals SET's result either way); the unpack then overwrites
// the layer's gradients, which is the layer contract.
//
// Data. x (B*T, in) with sample b's frame t at row b*T + t is CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED
// [B, T, in] with seqLengthArray = the lengths (CUDNN_RNN_PADDED_IO_ENABLED); cuDNN runs each sample's
// reverse direction from the sample's own last frame, as the CPU path does. The CPU path's padding
// rules are enforced here rather than left to cuDNN's handling of padded positions: y's padded rows are
// zeroed after forward, dy reaches cuDNN with its padded rows zeroed (a masked copy), and dx's padded
// rows are zeroed after backward data. cuDNN does not accept a sequence of length 0 inside a batch
// (ONNX Runtime works around the same limit): such a sample runs one step on a zeroed input frame
// (a masked copy of x, made only for batches that have one), its output is zeroed like padding, and
// as it receives no gradient it contributes exactly zero to every gradient. A batch of only empty
// samples never reaches cuDNN.
//
// Numerics: f32 data and compute, CUDNN_FMA_MATH (no TF32, so results agree with the f32 CPU reference
// to f32 rounding), CUDNN_RNN_ALGO_STANDARD (any batch size and lengths), no dropout. Initial states are
// zero (null hx/cx) and the final states are not needed (null hy/cy, dhy/dcy).
#include <algorithm>
#include <tuple>

#include "framework/core/cuda_context.h"
#include "layers/lstm.h"

namespace qtrain {

// One copy between a qtrain parameter (index into params/grads, element offset) and cuDNN's weight
// space (float offset). Outside the anonymous namespace because LstmCudnn, which lstm.h declares,
// holds a vector of them.
struct LstmWeightSegment {
  size_t param = 0;
  int64_t param_offset = 0;
  int64_t space_offset = 0;
  int64_t count = 0;
};

namespace {

constexpr int kThreads = 256;

int as_int(int64_t v, const char* what) { return checked_int(v, "lstm", what); }

}  // namespace

struct LstmCudnn {
  // Fixed by the configuration (built on first use).
  LstmCudaShape config;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnRNNDataDescriptor_t x_desc = nullptr, y_desc = nullptr;
  cudnnTensorDescriptor_t h_desc = nullptr;  // h and c: [layers*dirs, B, H] (no projection, so c has h's shape)
  size_t weight_bytes = 0;
  Tensor weights, dweights;  // u8 on the device, cuDNN's weight space and its gradient
  std::vector<LstmWeightSegment> segments;
  float padding_fill = 0.0f;  // cuDNN reads the fill value through a host pointer

  // The batch of the last forward (descriptors, device lengths), and whether its reserve space holds
  // a training-mode forward that no backward has consumed yet.
  int64_t batch = -1, frames = -1;
  int32_t max_length = 0;
  bool has_empty = false;  // a sample of length 0: cuDNN runs it for one step on x_masked
  bool reserve_valid = false;
  std::vector<int32_t> host_lengths;         // [the lengths (B) | cuDNN's lengths (B): 0 raised to 1]
  Tensor lengths;                            // i32 on the device, host_lengths' copy (capacity >= 2B)
  size_t work_bytes = 0, reserve_bytes = 0;  // what the last forward needed
  Tensor workspace, reserve;                 // u8, grown only
  Tensor dy_masked, dx_scratch, x_masked;    // f32, grown only

  const int32_t* true_lengths() const { return lengths.data<int32_t>(); }
  const int32_t* cudnn_lengths() const { return lengths.data<int32_t>() + batch; }

  ~LstmCudnn() {
    // Destructors must not throw: errors while freeing descriptors are ignored.
    if (x_desc) cudnnDestroyRNNDataDescriptor(x_desc);
    if (y_desc) cudnnDestroyRNNDataDescriptor(y_desc);
    if (h_desc) cudnnDestroyTensorDescriptor(h_desc);
    if (rnn) cudnnDestroyRNNDescriptor(rnn);
    if (dropout) cudnnDestroyDropoutDescriptor(dropout);
  }
};

void LstmCudnnDeleter::operator()(LstmCudnn* state) const noexcept { delete state; }

namespace {

// Rows t >= lengths[b] of a (B*T, width) tensor set to zero.
__global__ void zero_padding_kernel(float* __restrict__ data, const int* __restrict__ lengths, long long frames,
                                    long long width, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = i / width;
    if (row % frames >= lengths[row / frames]) data[i] = 0.0f;
  }
}

// dst = src on rows t < lengths[b], 0 on the padding rows.
__global__ void masked_copy_kernel(float* __restrict__ dst, const float* __restrict__ src,
                                   const int* __restrict__ lengths, long long frames, long long width, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = i / width;
    dst[i] = row % frames < lengths[row / frames] ? src[i] : 0.0f;
  }
}

void zero_padding(const LstmCudnn& s, float* data, int64_t width, cudaStream_t stream) {
  const long long n = s.batch * s.frames * width;
  if (n == 0) return;
  zero_padding_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(data, s.true_lengths(), s.frames, width, n);
  CUDA_CHECK(cudaGetLastError());
}

// dst = src with the padding rows (of the true lengths) zeroed.
void masked_copy(const LstmCudnn& s, float* dst, const float* src, int64_t width, cudaStream_t stream) {
  const long long n = s.batch * s.frames * width;
  if (n == 0) return;
  masked_copy_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dst, src, s.true_lengths(), s.frames, width, n);
  CUDA_CHECK(cudaGetLastError());
}

// A device buffer of at least `count` elements of `dtype`; the old one may still be read by queued
// work, so the stream finishes before it is freed.
void grow(Tensor& buffer, int64_t count, DType dtype, Device device, cudaStream_t stream) {
  if (buffer.defined() && buffer.numel() >= count) return;
  if (buffer.defined()) CUDA_CHECK(cudaStreamSynchronize(stream));
  buffer = Tensor::empty({std::max<int64_t>(count, 1)}, dtype, device);
}

// Element count of a packed row-major tensor descriptor; fails if cuDNN's layout is not packed.
int64_t packed_numel(cudnnTensorDescriptor_t desc, const char* what) {
  cudnnDataType_t type{};
  int nb = 0;
  int dims[8] = {}, strides[8] = {};
  CUDNN_CHECK(cudnnGetTensorNdDescriptor(desc, 8, &type, &nb, dims, strides));
  QT_CHECK(type == CUDNN_DATA_FLOAT && nb >= 1 && nb <= 8, "lstm: cuDNN describes a {} as {} dims of type {}", what, nb,
           static_cast<int>(type));
  int64_t numel = 1;
  for (int d = nb - 1; d >= 0; --d) {
    QT_CHECK(dims[d] == 1 || strides[d] == numel,
             "lstm: cuDNN's {} is not a packed row-major block (dim {} has stride {}, expected {}), which the copy "
             "between qtrain's parameters and cuDNN's weight space assumes",
             what, d, strides[d], numel);
    numel *= dims[d];
  }
  return numel;
}

// The copy table between qtrain's parameters (param_specs() order: per layer and direction
// weight_ih, weight_hh, bias_ih, bias_hh) and cuDNN's weight space, merged where both are contiguous.
std::vector<LstmWeightSegment> build_segments(cudnnHandle_t handle, LstmCudnn& s) {
  const LstmCudaShape& c = s.config;
  const int64_t H = c.hidden;
  cudnnTensorDescriptor_t m_desc = nullptr, b_desc = nullptr;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&m_desc));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&b_desc));
  std::vector<LstmWeightSegment> segments;
  auto* base = static_cast<char*>(s.weights.raw());
  auto space_offset = [&](void* p, const char* what) {
    const std::ptrdiff_t bytes = static_cast<char*>(p) - base;
    QT_CHECK(p && bytes >= 0 && bytes % static_cast<std::ptrdiff_t>(sizeof(float)) == 0 &&
                 static_cast<size_t>(bytes) < s.weight_bytes,
             "lstm: cuDNN places a {} outside its weight space", what);
    return static_cast<int64_t>(bytes / static_cast<std::ptrdiff_t>(sizeof(float)));
  };
  try {
    for (int64_t pseudo = 0; pseudo < c.layers * c.dirs; ++pseudo) {
      const int64_t layer = pseudo / c.dirs;
      const int64_t in = layer == 0 ? c.input : c.dirs * H;
      const size_t first = static_cast<size_t>(pseudo * 4);  // weight_ih of this layer and direction
      for (int id = 0; id < 8; ++id) {
        const bool recurrent = id >= 4;
        const int64_t gate = id % 4, cols = recurrent ? H : in;
        void* m = nullptr;
        void* b = nullptr;
        CUDNN_CHECK(cudnnGetRNNWeightParams(handle, s.rnn, static_cast<int32_t>(pseudo), s.weight_bytes,
                                            s.weights.raw(), id, m_desc, &m, b_desc, &b));
        QT_CHECK(packed_numel(m_desc, "gate matrix") == H * cols,
                 "lstm: cuDNN's gate matrix {} of pseudo-layer {} is not {} x {}", id, pseudo, H, cols);
        QT_CHECK(packed_numel(b_desc, "gate bias") == H, "lstm: cuDNN's gate bias {} of pseudo-layer {} is not {}", id,
                 pseudo, H);
        segments.push_back({first + (recurrent ? 1 : 0), gate * H * cols, space_offset(m, "gate matrix"), H * cols});
        segments.push_back({first + (recurrent ? 3 : 2), gate * H, space_offset(b, "gate bias"), H});
      }
    }
  } catch (...) {
    cudnnDestroyTensorDescriptor(m_desc);
    cudnnDestroyTensorDescriptor(b_desc);
    throw;
  }
  cudnnDestroyTensorDescriptor(m_desc);
  cudnnDestroyTensorDescriptor(b_desc);
  // Every float of the weight space is written by at most one segment, or packing would be ambiguous.
  std::sort(segments.begin(), segments.end(),
            [](const LstmWeightSegment& a, const LstmWeightSegment& b) { return a.space_offset < b.space_offset; });
  for (size_t i = 1; i < segments.size(); ++i)
    QT_CHECK(segments[i - 1].space_offset + segments[i - 1].count <= segments[i].space_offset,
             "lstm: cuDNN's weight blocks overlap");
  QT_CHECK(
      segments.empty() ||
          static_cast<size_t>(segments.back().space_offset + segments.back().count) * sizeof(float) <= s.weight_bytes,
      "lstm: cuDNN's weight blocks exceed its weight space");
  // Merge neighbours that are contiguous on both sides (the four gates of one matrix usually are).
  std::sort(segments.begin(), segments.end(), [](const LstmWeightSegment& a, const LstmWeightSegment& b) {
    return std::tie(a.param, a.param_offset) < std::tie(b.param, b.param_offset);
  });
  std::vector<LstmWeightSegment> merged;
  for (const LstmWeightSegment& seg : segments) {
    if (!merged.empty()) {
      LstmWeightSegment& last = merged.back();
      if (last.param == seg.param && last.param_offset + last.count == seg.param_offset &&
          last.space_offset + last.count == seg.space_offset) {
        last.count += seg.count;
        continue;
      }
    }
    merged.push_back(seg);
  }
  return merged;
}

// The RNN descriptor, weight spaces and copy table: once per layer. Built aside and kept only when
// complete: a state left behind by a failed build (say, an unexpected weight layout) would have no
// copy table, and every later forward would then run cuDNN on a weight space of zeros.
LstmCudnn& prepare(Context& ctx, LstmCudnnPtr& state, const LstmCudaShape& shape, Device device) {
  if (state) {
    const LstmCudaShape& c = state->config;
    QT_CHECK(c.input == shape.input && c.hidden == shape.hidden && c.layers == shape.layers && c.dirs == shape.dirs,
             "lstm: the layer's shape changed after its cuDNN state was built");
    return *state;
  }
  LstmCudnnPtr fresh(new LstmCudnn);
  LstmCudnn& s = *fresh;
  s.config = shape;
  cudnnHandle_t handle = ctx.cuda().cudnn;
  CUDNN_CHECK(cudnnCreateDropoutDescriptor(&s.dropout));
  // No dropout: zero probability needs no random states (PyTorch's set_no_dropout does the same).
  CUDNN_CHECK(cudnnSetDropoutDescriptor(s.dropout, handle, 0.0f, nullptr, 0, 0));
  CUDNN_CHECK(cudnnCreateRNNDescriptor(&s.rnn));
  CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
      s.rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
      shape.dirs == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
      CUDNN_DATA_FLOAT, CUDNN_FMA_MATH, as_int(shape.input, "input size"), as_int(shape.hidden, "hidden_size"),
      as_int(shape.hidden, "hidden_size"), as_int(shape.layers, "num_layers"), s.dropout, CUDNN_RNN_PADDED_IO_ENABLED));
  CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&s.x_desc));
  CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&s.y_desc));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&s.h_desc));
  CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, s.rnn, &s.weight_bytes));
  QT_CHECK(s.weight_bytes > 0, "lstm: cuDNN reports an empty weight space");
  s.weights = Tensor::empty({static_cast<int64_t>(s.weight_bytes)}, DType::u8, device);
  s.dweights = Tensor::empty({static_cast<int64_t>(s.weight_bytes)}, DType::u8, device);
  // Bytes no segment covers (alignment padding, if any) are zero, so nothing undefined is ever read.
  // On the context's stream: a legacy-stream memset would not be ordered before the packing copies.
  CUDA_CHECK(cudaMemsetAsync(s.weights.raw(), 0, s.weight_bytes, ctx.cuda().stream));
  s.segments = build_segments(handle, s);
  state = std::move(fresh);
  return *state;
}

// Descriptors and device lengths for this batch. cuDNN needs its lengths twice: on the host in the
// data descriptors and on the device (devSeqLengths, which cuDNN >= 8.9.1 no longer reads but older
// versions require); the masking kernels need the true lengths on the device. One host-to-device copy
// from pageable memory carries both: it returns only once the values are staged, so host_lengths may
// change afterwards.
void set_batch(Context& ctx, LstmCudnn& s, const LstmCudaShape& shape, const std::vector<int32_t>& lengths,
               Device device) {
  cudaStream_t stream = ctx.cuda().stream;
  const int batch = as_int(shape.batch, "batch"), frames = as_int(shape.frames, "frames");
  QT_CHECK(static_cast<int64_t>(lengths.size()) == shape.batch, "lstm: {} lengths for a batch of {}", lengths.size(),
           shape.batch);
  s.host_lengths.resize(2 * lengths.size());
  s.max_length = 0;
  s.has_empty = false;
  for (size_t b = 0; b < lengths.size(); ++b) {
    s.host_lengths[b] = lengths[b];
    s.host_lengths[lengths.size() + b] = std::max(lengths[b], 1);
    s.max_length = std::max(s.max_length, lengths[b]);
    s.has_empty = s.has_empty || lengths[b] == 0;
  }
  s.batch = shape.batch;
  s.frames = shape.frames;
  if (s.max_length == 0) return;  // nothing for cuDNN to run (a maximum length of 0 is not a valid descriptor)
  const int* cudnn_lengths = s.host_lengths.data() + lengths.size();
  const int hidden = as_int(shape.hidden, "hidden_size");
  CUDNN_CHECK(cudnnSetRNNDataDescriptor(s.x_desc, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, frames,
                                        batch, as_int(shape.input, "input size"), cudnn_lengths, &s.padding_fill));
  CUDNN_CHECK(cudnnSetRNNDataDescriptor(s.y_desc, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, frames,
                                        batch, as_int(shape.dirs * shape.hidden, "output size"), cudnn_lengths,
                                        &s.padding_fill));
  const int h_dims[3] = {as_int(shape.layers * shape.dirs, "layers"), batch, hidden};
  const int h_strides[3] = {batch * hidden, hidden, 1};
  CUDNN_CHECK(cudnnSetTensorNdDescriptor(s.h_desc, CUDNN_DATA_FLOAT, 3, h_dims, h_strides));
  grow(s.lengths, 2 * shape.batch, DType::i32, device, stream);
  CUDA_CHECK(cudaMemcpyAsync(s.lengths.raw(), s.host_lengths.data(), s.host_lengths.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream));
}

void check_params(const LstmCudnn& s, const std::vector<Tensor>& tensors, const char* what) {
  const LstmCudaShape& c = s.config;
  QT_CHECK(tensors.size() == static_cast<size_t>(4 * c.layers * c.dirs), "lstm: {} {} tensors, expected {}",
           tensors.size(), what, 4 * c.layers * c.dirs);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t layer = static_cast<int64_t>(i) / (4 * c.dirs);
    const int64_t in = layer == 0 ? c.input : c.dirs * c.hidden;
    const int64_t which = static_cast<int64_t>(i % 4);
    const int64_t expected = which == 0 ? 4 * c.hidden * in : which == 1 ? 4 * c.hidden * c.hidden : 4 * c.hidden;
    QT_CHECK(tensors[i].numel() == expected && tensors[i].dtype() == DType::f32,
             "lstm: {} {} has {} {} elements, expected {} f32", what, i, tensors[i].numel(),
             dtype_name(tensors[i].dtype()), expected);
  }
}

void pack_weights(LstmCudnn& s, const std::vector<Tensor>& params, cudaStream_t stream) {
  auto* space = static_cast<float*>(s.weights.raw());
  for (const LstmWeightSegment& seg : s.segments)
    CUDA_CHECK(cudaMemcpyAsync(space + seg.space_offset, params[seg.param].data<float>() + seg.param_offset,
                               static_cast<size_t>(seg.count) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

void unpack_gradients(LstmCudnn& s, std::vector<Tensor>& grads, cudaStream_t stream) {
  const auto* space = static_cast<const float*>(s.dweights.raw());
  for (const LstmWeightSegment& seg : s.segments)
    CUDA_CHECK(cudaMemcpyAsync(grads[seg.param].data<float>() + seg.param_offset, space + seg.space_offset,
                               static_cast<size_t>(seg.count) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

void* or_null(Tensor& t, size_t bytes) { return bytes > 0 ? t.raw() : nullptr; }

}  // namespace

void lstm_forward_cuda(Context& ctx, LstmCudnnPtr& state, const LstmCudaShape& shape,
                       const std::vector<int32_t>& lengths, const std::vector<Tensor>& params, const Tensor& x,
                       Tensor& y, bool training) {
  const Device device = x.device();
  LstmCudnn& s = prepare(ctx, state, shape, device);
  check_params(s, params, "parameter");
  cudaStream_t stream = ctx.cuda().stream;
  cudnnHandle_t handle = ctx.cuda().cudnn;
  s.reserve_valid = false;
  set_batch(ctx, s, shape, lengths, device);
  if (s.max_length == 0) {
    // Every sample is empty: all outputs are padding. cuDNN is not asked to run no time step at all.
    if (y.nbytes() > 0) CUDA_CHECK(cudaMemsetAsync(y.raw(), 0, y.nbytes(), stream));
    s.reserve_valid = training;
    return;
  }
  pack_weights(s, params, stream);
  // A batch with an empty sample runs it for one step on a zeroed frame (see the top of this file).
  const float* x_ptr = x.data<float>();
  if (s.has_empty) {
    grow(s.x_masked, shape.batch * shape.frames * shape.input, DType::f32, device, stream);
    masked_copy(s, s.x_masked.data<float>(), x_ptr, shape.input, stream);
    x_ptr = s.x_masked.data<float>();
  }
  const cudnnForwardMode_t mode = training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  size_t work = 0, reserve = 0;
  CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(handle, s.rnn, mode, s.x_desc, &work, &reserve));
  grow(s.workspace, static_cast<int64_t>(work), DType::u8, device, stream);
  grow(s.reserve, static_cast<int64_t>(reserve), DType::u8, device, stream);
  s.work_bytes = work;
  s.reserve_bytes = reserve;
  CUDNN_CHECK(cudnnRNNForward(handle, s.rnn, mode, s.cudnn_lengths(), s.x_desc, x_ptr, s.y_desc, y.data<float>(),
                              s.h_desc, nullptr, nullptr, s.h_desc, nullptr, nullptr, s.weight_bytes, s.weights.raw(),
                              work, or_null(s.workspace, work), reserve, or_null(s.reserve, reserve)));
  // cuDNN fills y's padding with padding_fill (0) already; zeroing it here keeps the CPU semantics
  // whatever a cuDNN version does there, for one pass over y.
  zero_padding(s, y.data<float>(), shape.dirs * shape.hidden, stream);
  s.reserve_valid = training;
}

void lstm_backward_cuda(Context& ctx, LstmCudnnPtr& state, const LstmCudaShape& shape,
                        const std::vector<Tensor>& params, std::vector<Tensor>& grads, const Tensor& x, const Tensor& y,
                        const Tensor& dy, Tensor* dx) {
  // cuDNN's backward reads what the training-mode forward left in the reserve space, and backward data
  // may overwrite it for backward weights: one backward per training forward, of the same batch.
  QT_CHECK(state && state->reserve_valid && state->batch == shape.batch && state->frames == shape.frames,
           "lstm: the CUDA backward needs the training-mode forward of the same batch just before it (and runs "
           "once per forward)");
  LstmCudnn& s = *state;
  s.reserve_valid = false;
  check_params(s, params, "parameter");
  check_params(s, grads, "gradient");
  const Device device = x.device();
  cudaStream_t stream = ctx.cuda().stream;
  cudnnHandle_t handle = ctx.cuda().cudnn;
  const int64_t rows = shape.batch * shape.frames, out = shape.dirs * shape.hidden;
  if (s.max_length == 0) {
    // No valid frame: no gradient anywhere.
    for (Tensor& g : grads) CUDA_CHECK(cudaMemsetAsync(g.raw(), 0, g.nbytes(), stream));
    if (dx && dx->nbytes() > 0) CUDA_CHECK(cudaMemsetAsync(dx->raw(), 0, dx->nbytes(), stream));
    return;
  }
  // Gradients arriving at padded steps are ignored (CPU semantics): cuDNN sees them as zeros.
  grow(s.dy_masked, rows * out, DType::f32, device, stream);
  masked_copy(s, s.dy_masked.data<float>(), dy.data<float>(), out, stream);
  // cuDNN always computes dx; without a destination it goes to scratch.
  float* dx_ptr = nullptr;
  if (dx) {
    dx_ptr = dx->data<float>();
  } else {
    grow(s.dx_scratch, rows * shape.input, DType::f32, device, stream);
    dx_ptr = s.dx_scratch.data<float>();
  }
  CUDNN_CHECK(cudnnRNNBackwardData_v8(
      handle, s.rnn, s.cudnn_lengths(), s.y_desc, y.data<float>(), s.dy_masked.data<float>(), s.x_desc, dx_ptr,
      s.h_desc, nullptr, nullptr, nullptr, s.h_desc, nullptr, nullptr, nullptr, s.weight_bytes, s.weights.raw(),
      s.work_bytes, or_null(s.workspace, s.work_bytes), s.reserve_bytes, or_null(s.reserve, s.reserve_bytes)));
  if (dx) zero_padding(s, dx_ptr, shape.input, stream);
  CUDA_CHECK(cudaMemsetAsync(s.dweights.raw(), 0, s.weight_bytes, stream));
  // The x of the forward: the masked copy when the batch has an empty sample.
  const float* x_ptr = s.has_empty ? s.x_masked.data<float>() : x.data<float>();
  CUDNN_CHECK(cudnnRNNBackwardWeights_v8(handle, s.rnn, CUDNN_WGRAD_MODE_ADD, s.cudnn_lengths(), s.x_desc, x_ptr,
                                         s.h_desc, nullptr, s.y_desc, y.data<float>(), s.weight_bytes, s.dweights.raw(),
                                         s.work_bytes, or_null(s.workspace, s.work_bytes), s.reserve_bytes,
                                         or_null(s.reserve, s.reserve_bytes)));
  unpack_gradients(s, grads, stream);
}

}  // namespace qtrain
