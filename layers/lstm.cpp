// lstm: configuration, argument checks and the CPU reference (see lstm.h for the equations, layout
// and the handling of padded sequences).
#include "layers/lstm.h"

#include <algorithm>
#include <cmath>

#include "layers/blas.h"
#include "layers/dispatch.h"
#include "layers/lane_gemm.h"
#include "layers/vector_math.h"

namespace qtrain {

using layer_detail::dispatch_float;
using vector_math::sigmoid_inplace;
using vector_math::tanh_inplace;

namespace {

// c' = f c + i g from a row's activated gates (i, f, g, o, each n wide), into c (in place), the
// frame's saved cell and h (tanh and the output gate follow).
template <typename T>
void cell_update(const T* __restrict gates, T* __restrict c, T* __restrict saved, T* __restrict h, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const T cn = gates[n + j] * c[j] + gates[j] * gates[2 * n + j];
    c[j] = cn;
    saved[j] = cn;
    h[j] = cn;
  }
}

// One frame's gate gradients (i, f, g, o, each n wide) from its activated gates, tanh(c_t), c_{t-1}
// (a zero row at a sequence's first frame), the output's gradient and the recurrent dh; dc carries
// the cell's gradient from frame t to t - 1 (in place).
template <typename T>
void gate_gradients(const T* __restrict gates, const T* __restrict tanh_c, const T* __restrict c_prev,
                    const T* __restrict dy, const T* __restrict dh, T* __restrict dc, T* __restrict dgates, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const T i = gates[j], f = gates[n + j], g = gates[2 * n + j], o = gates[3 * n + j];
    const T tc = tanh_c[j];
    const T dht = dy[j] + dh[j];
    const T dct = dc[j] + dht * o * (T(1) - tc * tc);
    dgates[j] = dct * g * i * (T(1) - i);
    dgates[n + j] = dct * c_prev[j] * f * (T(1) - f);
    dgates[2 * n + j] = dct * i * (T(1) - g * g);
    dgates[3 * n + j] = dht * tc * o * (T(1) - o);
    dc[j] = dct * f;
  }
}

// Zeroes the padding rows (frames t >= n_b of each sample b) of a (B*T, width) buffer.
template <typename T>
void zero_padding_rows(T* buffer, int64_t width, int64_t frames, const std::vector<int32_t>& lengths) {
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t first = static_cast<int64_t>(b) * frames;
    std::fill(buffer + (first + lengths[b]) * width, buffer + (first + frames) * width, T(0));
  }
}

// The frame of sample b (length n) processed at step k by direction dir, or -1 when k >= n.
inline int64_t frame_at(int dir, int64_t k, int64_t n) { return k >= n ? -1 : dir == 0 ? k : n - 1 - k; }

}  // namespace

Lstm::Lstm(LstmOptions options) : options_(options), dirs_(options.bidirectional ? 2 : 1) {
  QT_CHECK(options.hidden_size > 0, "lstm: hidden_size must be > 0, got {}", options.hidden_size);
  QT_CHECK(options.num_layers > 0, "lstm: num_layers must be > 0, got {}", options.num_layers);
}

Shape Lstm::configure(const Shape& input) {
  if (input.size() != 1 || input[0] <= 0)
    input_error("lstm expects one feature dimension per frame, got {}", shape_str(input));
  input_ = input[0];
  return {dirs_ * options_.hidden_size};
}

std::vector<ParamSpec> Lstm::param_specs() const {
  QT_CHECK(input_ > 0, "{}: param_specs() before setup()", describe());
  const int64_t h = options_.hidden_size;
  std::vector<ParamSpec> specs;
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    for (int d = 0; d < dirs_; ++d) {
      const std::string suffix = fmt::format("_l{}{}", l, d == 1 ? "_reverse" : "");
      // PyTorch initializes every LSTM parameter with U(+-1/sqrt(hidden_size)): fan_in = H.
      specs.push_back({"weight_ih" + suffix, {4 * h, layer_input(l)}, Init::uniform_fan_in, h, 4 * h});
      specs.push_back({"weight_hh" + suffix, {4 * h, h}, Init::uniform_fan_in, h, 4 * h});
      ParamSpec bias_ih{"bias_ih" + suffix, {4 * h}, Init::uniform_fan_in, h, 4 * h};
      bias_ih.fill_begin = h;  // forget-gate rows [H, 2H)
      bias_ih.fill_end = 2 * h;
      bias_ih.fill_value = options_.forget_bias;
      ParamSpec bias_hh = bias_ih;
      bias_hh.name = "bias_hh" + suffix;
      bias_hh.fill_value = 0.0;
      specs.push_back(bias_ih);
      specs.push_back(bias_hh);
    }
  }
  return specs;
}

void Lstm::set_sequence_lengths(const Tensor& lengths) {
  QT_CHECK(lengths.defined() && lengths.dtype() == DType::i32 && lengths.device().is_cpu(),
           "{}: sequence lengths must be i32 on the CPU", describe());
  lengths_.assign(lengths.data<int32_t>(), lengths.data<int32_t>() + lengths.numel());
}

int64_t Lstm::frames_of(const Tensor& x) const {
  const int64_t batch = static_cast<int64_t>(lengths_.size());
  QT_CHECK(batch > 0, "{}: no sequence lengths; an lstm runs on sequence batches (a speech dataset)", describe());
  QT_CHECK(x.ndim() == 2 && x.dim(0) % batch == 0, "{}: {} rows are not {} sequences of equal padded length",
           describe(), x.ndim() > 0 ? x.dim(0) : 0, batch);
  const int64_t frames = x.dim(0) / batch;
  for (int64_t b = 0; b < batch; ++b)
    QT_CHECK(lengths_[static_cast<size_t>(b)] >= 0 && lengths_[static_cast<size_t>(b)] <= frames,
             "{}: sample {} has length {}, outside [0, {}]", describe(), b, lengths_[static_cast<size_t>(b)], frames);
  return frames;
}

LstmCudaShape Lstm::cuda_shape(int64_t batch, int64_t frames) const {
  return {input_, options_.hidden_size, options_.num_layers, dirs_, batch, frames};
}

// Runs fn(d) for every direction: on two lanes of the context's pool at once when the LSTM is
// bidirectional and the pool has them (the directions share nothing but their inputs; each lane's
// GEMMs then run on OpenBLAS's calling thread), else one after the other. Every direction does the
// same arithmetic either way: the split changes the time, never a bit.
template <typename F>
void Lstm::for_each_direction(Context& ctx, F&& fn) {
  if (dirs_ == 2 && ctx.cpu_pool().lanes() >= 2) {
    const SerialBlas serial(ctx.cpu_threads());
    ctx.cpu_pool().run([&](int lane) {
      if (lane < 2) fn(lane);
    });
    return;
  }
  for (int d = 0; d < dirs_; ++d) fn(d);
}

template <typename T>
void Lstm::forward_reference(Context& ctx, const T* x, T* y, int64_t batch, int64_t frames, Workspace& ws) {
  const int64_t H = options_.hidden_size, G = 4 * H, rows = batch * frames, out = dirs_ * H;
  const size_t L = static_cast<size_t>(options_.num_layers);
  ws.outputs.resize(L);
  ws.gates.resize(L * dirs_);
  ws.cells.resize(L * dirs_);
  // Per direction: h, c (B, H) and the recurrent products (B, 4H).
  T* h_all = ws.h.get<T>(static_cast<size_t>(dirs_ * batch * H));
  T* c_all = ws.c.get<T>(static_cast<size_t>(dirs_ * batch * H));
  T* step_all = ws.step.get<T>(static_cast<size_t>(dirs_ * batch * G));
  for (size_t l = 0; l < L; ++l) {
    const int64_t in = layer_input(static_cast<int64_t>(l));
    const T* input = l == 0 ? x : ws.outputs[l - 1].get<T>(static_cast<size_t>(rows * out));
    T* output = l + 1 < L ? ws.outputs[l].get<T>(static_cast<size_t>(rows * out)) : y;
    // Padding rows are zero; every other row gets both directions' halves below.
    zero_padding_rows(output, out, frames, lengths_);
    // Per direction, on its own lane when they run side by side: the input projection of every frame
    // at once, gates (rows, 4H) = input W_ih^T + b_ih + b_hh, then the recurrence, frame after frame,
    // one small GEMM each.
    for_each_direction(ctx, [&](int d) {
      const size_t slot = l * dirs_ + static_cast<size_t>(d);
      T* gates = ws.gates[slot].get<T>(static_cast<size_t>(rows * G));  // each lane its own slot's
      T* cells = ws.cells[slot].get<T>(static_cast<size_t>(rows * H));
      const T* w_ih = param(static_cast<int64_t>(l), d, 0).template data<T>();
      const T* b_ih = param(static_cast<int64_t>(l), d, 2).template data<T>();
      const T* b_hh = param(static_cast<int64_t>(l), d, 3).template data<T>();
      for (int64_t g = 0; g < G; ++g) gates[g] = b_ih[g] + b_hh[g];  // the biases' sum once, then per row
      for (int64_t r = 1; r < rows; ++r) std::copy_n(gates, G, gates + r * G);
      blas_gemm<T>(false, true, rows, G, in, input, in, w_ih, in, T(1), gates, G);
      const T* w_hh = param(static_cast<int64_t>(l), d, 1).template data<T>();
      T* h = h_all + d * batch * H;
      T* c = c_all + d * batch * H;
      T* step = step_all + d * batch * G;
      std::fill(h, h + batch * H, T(0));
      std::fill(c, c + batch * H, T(0));
      for (int64_t k = 0; k < frames; ++k) {
        // step (B, 4H) = h W_hh^T: the recurrent part of every sample's gates.
        blas_gemm<T>(false, true, batch, G, H, h, H, w_hh, H, T(0), step, G);
        for (int64_t b = 0; b < batch; ++b) {
          const int64_t t = frame_at(d, k, lengths_[static_cast<size_t>(b)]);
          if (t < 0) continue;
          const int64_t row = b * frames + t;
          T* __restrict gr = gates + row * G;
          const T* __restrict sr = step + b * G;
          T* __restrict hb = h + b * H;
          T* __restrict cb = c + b * H;
          T* __restrict cr = cells + row * H;
          T* __restrict yr = output + row * out + d * H;
          // Gates i, f, g, o activated in place (whole rows: the loops vectorize, see vector_math.h).
          for (int64_t j = 0; j < G; ++j) gr[j] += sr[j];
          sigmoid_inplace(gr, 2 * H);
          tanh_inplace(gr + 2 * H, H);
          sigmoid_inplace(gr + 3 * H, H);
          cell_update(gr, cb, cr, hb, H);
          tanh_inplace(hb, H);
          for (int64_t j = 0; j < H; ++j) hb[j] = yr[j] = gr[3 * H + j] * hb[j];
        }
      }
    });
  }
}

template <typename T>
void Lstm::backward_reference(Context& ctx, const T* x, const T* y, const T* dy, T* dx, int64_t batch, int64_t frames,
                              Workspace& ws) {
  const int64_t H = options_.hidden_size, G = 4 * H, rows = batch * frames, out = dirs_ * H;
  const int64_t L = options_.num_layers;
  // Per direction: dh, dc, hprev (B, H), the step's gate gradients (B, 4H) and all frames' (rows, 4H).
  T* dh_all = ws.dh.get<T>(static_cast<size_t>(dirs_ * batch * H));
  T* dc_all = ws.dc.get<T>(static_cast<size_t>(dirs_ * batch * H));
  T* hprev_all = ws.hprev.get<T>(static_cast<size_t>(dirs_ * batch * H));
  T* step_all = ws.step.get<T>(static_cast<size_t>(dirs_ * batch * G));
  T* dgates_all = ws.dgates.get<T>(static_cast<size_t>(dirs_ * rows * G));
  T* tanh_c_all = ws.tanh_c.get<T>(static_cast<size_t>(dirs_ * H));
  T* zeros = ws.zeros.get<T>(static_cast<size_t>(H));  // c_{t-1} before a sequence's first frame
  std::fill(zeros, zeros + H, T(0));
  // The gradients w.r.t. a layer's output (dout) and input (din), swapped from layer to layer.
  const size_t dlayer_size = static_cast<size_t>(rows * std::max(out, input_));
  T* dout = ws.dlayer_out.get<T>(dlayer_size);
  T* dlayer_in = ws.dlayer_in.get<T>(dlayer_size);
  // The gradient w.r.t. the last layer's output; padding rows carry none.
  for (int64_t b = 0; b < batch; ++b)
    std::copy_n(dy + b * frames * out, lengths_[static_cast<size_t>(b)] * out, dout + b * frames * out);
  zero_padding_rows(dout, out, frames, lengths_);

  for (int64_t l = L - 1; l >= 0; --l) {
    const int64_t in = layer_input(l);
    // The forward's buffers, of the sizes it asked for (so get() hands back their contents).
    const T* input = l == 0 ? x : ws.outputs[static_cast<size_t>(l - 1)].get<T>(static_cast<size_t>(rows * out));
    const T* output = l == L - 1 ? y : ws.outputs[static_cast<size_t>(l)].get<T>(static_cast<size_t>(rows * out));
    T* din = l == 0 ? dx : dlayer_in;  // null: the net's input needs no gradient
    // Per direction, on its own lane when they run side by side: the recurrence backwards through the
    // frames, then the weight gradients over all frames at once.
    for_each_direction(ctx, [&](int d) {
      const size_t slot = static_cast<size_t>(l * dirs_ + d);
      const T* gates = ws.gates[slot].get<T>(static_cast<size_t>(rows * G));
      const T* cells = ws.cells[slot].get<T>(static_cast<size_t>(rows * H));
      const T* w_hh = param(l, d, 1).template data<T>();
      T* dw_hh = grad(l, d, 1).template data<T>();
      T* dgates = dgates_all + d * rows * G;
      T* dh = dh_all + d * batch * H;
      T* dc = dc_all + d * batch * H;
      T* hprev = hprev_all + d * batch * H;
      T* step = step_all + d * batch * G;
      T* tanh_c = tanh_c_all + d * H;
      // Padding rows of dgates are zero (the GEMMs below run over all rows); the frames fill the rest.
      zero_padding_rows(dgates, G, frames, lengths_);
      std::fill(dh, dh + batch * H, T(0));
      std::fill(dc, dc + batch * H, T(0));
      std::fill(dw_hh, dw_hh + G * H, T(0));
      for (int64_t k = frames - 1; k >= 0; --k) {
        for (int64_t b = 0; b < batch; ++b) {
          const int64_t n = lengths_[static_cast<size_t>(b)];
          const int64_t t = frame_at(d, k, n);
          T* sb = step + b * G;
          T* hp = hprev + b * H;
          if (t < 0) {
            std::fill(sb, sb + G, T(0));
            std::fill(hp, hp + H, T(0));
            continue;
          }
          const int64_t row = b * frames + t;
          const int64_t prev_t = k == 0 ? -1 : frame_at(d, k - 1, n);
          const int64_t prev_row = b * frames + prev_t;
          const T* gr = gates + row * G;
          const T* cr = cells + row * H;
          const T* dyr = dout + row * out + d * H;
          T* dhb = dh + b * H;
          T* dcb = dc + b * H;
          std::copy_n(cr, H, tanh_c);
          tanh_inplace(tanh_c, H);
          gate_gradients(gr, tanh_c, prev_t < 0 ? zeros : cells + prev_row * H, dyr, dhb, dcb, sb, H);
          if (prev_t < 0)
            std::fill(hp, hp + H, T(0));
          else
            std::copy_n(output + prev_row * out + d * H, H, hp);
          std::copy_n(sb, G, dgates + row * G);
        }
        // dh (B, H) = step W_hh; dW_hh += step^T hprev.
        blas_gemm<T>(false, false, batch, H, G, step, G, w_hh, H, T(0), dh, H);
        blas_gemm<T>(true, false, G, H, batch, step, G, hprev, H, T(1), dw_hh, H);
      }
      // dW_ih = dgates^T input, the biases' gradients the column sums of dgates.
      T* dw_ih = grad(l, d, 0).template data<T>();
      T* db_ih = grad(l, d, 2).template data<T>();
      T* db_hh = grad(l, d, 3).template data<T>();
      blas_gemm<T>(true, false, G, in, rows, dgates, G, input, in, T(0), dw_ih, in);
      std::fill(db_ih, db_ih + G, T(0));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < G; ++g) db_ih[g] += dgates[r * G + g];
      std::copy_n(db_ih, G, db_hh);
    });
    // dinput = the directions' dgates W_ih summed, which needs both directions' dgates: rows split
    // over the lanes.
    if (din)
      for (int d = 0; d < dirs_; ++d)
        lane_gemm<T>(ctx, false, false, rows, in, G, dgates_all + d * rows * G, G, param(l, d, 0).template data<T>(),
                     in, d == 0 ? T(0) : T(1), din, in);
    if (l > 0) std::swap(dout, dlayer_in);
  }
}

void Lstm::forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool) {
  const int64_t frames = frames_of(x);
  const int64_t batch = static_cast<int64_t>(lengths_.size());
  dispatch_float(x.dtype(),
                 [&]<typename T>() { forward_reference<T>(ctx, x.data<T>(), y.data<T>(), batch, frames, ws_); });
}

#if QTRAIN_HAS_CUDA
void Lstm::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) {
  const int64_t frames = frames_of(x);
  const int64_t batch = static_cast<int64_t>(lengths_.size());
  lstm_forward_cuda(ctx, cudnn_, cuda_shape(batch, frames), lengths_, params_, x, y, training);
}
#endif

void Lstm::backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t frames = frames_of(x);
  const int64_t batch = static_cast<int64_t>(lengths_.size());
  dispatch_float(x.dtype(), [&]<typename T>() {
    T* dxp = dx.defined() ? dx.data<T>() : nullptr;
    backward_reference<T>(ctx, x.data<T>(), y.data<T>(), dy.data<T>(), dxp, batch, frames, ws_);
  });
}

#if QTRAIN_HAS_CUDA
void Lstm::backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t frames = frames_of(x);
  const int64_t batch = static_cast<int64_t>(lengths_.size());
  lstm_backward_cuda(ctx, cudnn_, cuda_shape(batch, frames), params_, grads_, x, y, dy, dx.defined() ? &dx : nullptr);
}
#endif

std::unique_ptr<Layer> make_lstm(ConfigNode& cfg) {
  LstmOptions o;
  if (!cfg.has("hidden_size")) cfg.fail("hidden_size", "is required (the LSTM's state size)");
  o.hidden_size = cfg.get_int("hidden_size", 1, 1, 1 << 16);
  o.num_layers = cfg.get_int("num_layers", o.num_layers, 1, 64);
  o.bidirectional = cfg.get<bool>("bidirectional", o.bidirectional);
  o.forget_bias = cfg.get_double("forget_bias", o.forget_bias, -100.0, 100.0);
  cfg.finish();
  return std::make_unique<Lstm>(o);
}

#if !QTRAIN_HAS_CUDA
// Without the toolkit no cuDNN state is ever created, so there is nothing to free (lstm.cu defines
// the deleter otherwise).
void LstmCudnnDeleter::operator()(LstmCudnn*) const noexcept {}
#endif

}  // namespace qtrain
