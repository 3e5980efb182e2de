// CPU-vs-CUDA parity of the sequence layers: lstm (cuDNN RNN) forward outputs, input gradients and
// parameter gradients, uni- and bidirectional, several layers, padded variable-length batches, a
// batch shape change on the same layer; ctc (the CUDA kernel) loss, error counts and gradients,
// including empty targets, repeated labels, impossible alignments and targets longer than one thread
// block. Needs a GPU; the CUDA test main reports "Skipped" without one. The lstm cases are tagged
// [cudnn]: the CUDA emulator does not stand in for cuDNN (no exact CPU equivalent), so its runs
// (test_sequence_cuda_emu) leave them out and they run only on a GPU; ctc is qtrain's own kernel.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "layers/ctc_loss.h"
#include "layers/lstm.h"
#include "tests/support/cuda_parity.h"
#include "tests/support/gradcheck.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// The rows of a (B*T, width) tensor at padded steps (t >= lengths[b]) are exactly zero.
void require_zero_padding(const Tensor& t, const std::vector<int32_t>& lengths, int64_t frames, const char* what) {
  const int64_t width = t.dim(1);
  int64_t nonzero = 0;
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t f = lengths[b]; f < frames; ++f)
      for (int64_t j = 0; j < width; ++j)
        if (t.data<float>()[(static_cast<int64_t>(b) * frames + f) * width + j] != 0.0f) ++nonzero;
  INFO(what << ": " << nonzero << " nonzero values at padded steps");
  REQUIRE(nonzero == 0);
}

// The f32 error bound of one LSTM quantity whose values are dot products of K terms, computed through
// `steps` recurrent steps (time steps x layers): each side's dot product is within ~K u of the exact
// value relative to the sum of |terms| (Higham, Thm 3.1, any order, with or without FMA), the gate
// nonlinearities (glibc on the CPU, cuDNN's own kernels on the GPU) add a few ulps (the +16), and the
// recurrence carries an error forward at most once per step because the weights are kept small
// (|w| <= 0.3, so each step's Jacobian has norm about 1 or less). Factor 4: both sides err, and the
// sums of |terms| are bounded by the tensor's largest magnitude only up to a small factor. Compared
// as an absolute error relative to the tensor's largest element; a wrong gate order, bias, direction
// or mask changes values by ~1e-1 of that scale, far above the bound (about 1e-4 to 3e-3 here).
double lstm_atol(int64_t k, int64_t steps, const Tensor& ref) {
  return 4.0 * static_cast<double>(steps) * static_cast<double>(k + 16) * kUnit * std::max(max_abs(ref), 1.0);
}

struct LstmCase {
  int64_t input, hidden, layers;
  bool bidirectional;
};

// One batch through the CPU and CUDA layers (already bound to the same parameters): y, dx and every
// parameter gradient compared, padding checked to be exactly zero on the GPU.
void compare_lstm_batch(Lstm& cpu_layer, Lstm& gpu_layer, Context& cpu, Context& gpu, const BoundParams& pa,
                        const BoundParams& pb, const LstmCase& c, const std::vector<int32_t>& lengths, int64_t frames,
                        uint64_t seed) {
  const int64_t batch = static_cast<int64_t>(lengths.size()), rows = batch * frames;
  const int64_t dirs = c.bidirectional ? 2 : 1, out = dirs * c.hidden;
  const int64_t steps = frames * c.layers;
  cpu_layer.set_sequence_lengths(i32(lengths));
  gpu_layer.set_sequence_lengths(i32(lengths));
  const Tensor x = random_tensor({rows, c.input}, seed, -1, 1, DType::f32);
  const Tensor dy = random_tensor({rows, out}, seed + 1, -1, 1, DType::f32);
  const Tensor x_gpu = upload(x), dy_gpu = upload(dy);

  Tensor y = Tensor::empty({rows, out}, DType::f32), y_gpu = Tensor::empty({rows, out}, DType::f32, kGpu);
  cpu_layer.forward(cpu, x, y, true);
  gpu_layer.forward(gpu, x_gpu, y_gpu, true);
  const Tensor y_got = download(gpu, y_gpu);
  // Pre-activations sum in + H (first layer) or dirs*H + H products and two biases.
  const int64_t k_forward = std::max(c.input, dirs * c.hidden) + c.hidden + 2;
  require_close(y_got, y, lstm_atol(k_forward, steps, y), 0.0, "lstm y");
  require_zero_padding(y_got, lengths, frames, "lstm y");

  Tensor dx = Tensor::empty({rows, c.input}, DType::f32), dx_gpu = Tensor::empty({rows, c.input}, DType::f32, kGpu);
  cpu_layer.backward(cpu, x, y, dy, dx);
  gpu_layer.backward(gpu, x_gpu, y_gpu, dy_gpu, dx_gpu);
  const Tensor dx_got = download(gpu, dx_gpu);
  // dx = dgates W_ih: 4H products per element, dgates themselves carried back through every step.
  require_close(dx_got, dx, lstm_atol(4 * c.hidden + k_forward, steps, dx), 0.0, "lstm dx");
  require_zero_padding(dx_got, lengths, frames, "lstm dx");

  // Parameter gradients: sums over all B*T frames of dgates times inputs or states.
  const Tensor grads_got = download(gpu, pb.grads);
  const std::vector<ParamSpec> specs = cpu_layer.param_specs();
  int64_t offset = 0;
  for (const ParamSpec& spec : specs) {
    const int64_t n = shape_numel(spec.shape);
    const Tensor ref = pa.grads.view(offset, {n});
    require_close(grads_got.view(offset, {n}), ref, lstm_atol(rows + k_forward, steps, ref), 0.0, "lstm d" + spec.name);
    offset += n;
  }
}

// The same lstm on the CPU (a) and on CUDA (b), with the same random parameters (seed).
struct LstmPair {
  LstmPair(const LstmCase& c, uint64_t seed)
      : a({c.hidden, c.layers, c.bidirectional, 1.0}), b({c.hidden, c.layers, c.bidirectional, 1.0}) {
    a.setup({c.input});
    b.setup({c.input});
    pa = bind_random_params(a, seed, DType::f32, Device::cpu(), 0.3);
    pb = bind_random_params(b, seed, DType::f32, kGpu, 0.3);
    fence_legacy_stream(pb.params);
    fence_legacy_stream(pb.grads);
  }
  Lstm a, b;
  BoundParams pa, pb;
};

}  // namespace

TEST_CASE("lstm: cuDNN matches the CPU reference (outputs, dx, parameter gradients, padding)", "[cuda][lstm][cudnn]") {
  for (const LstmCase& c :
       {LstmCase{5, 8, 2, false}, LstmCase{5, 8, 2, true}, LstmCase{1, 3, 1, false}, LstmCase{40, 64, 3, true}}) {
    INFO("input " << c.input << ", hidden " << c.hidden << ", layers " << c.layers << ", bidirectional "
                  << c.bidirectional);
    Context cpu = Context::cpu(1, 1);
    Context gpu = Context::cuda(0, 1);
    LstmPair p(c, 21);
    // Unequal lengths with padding (the reverse direction must start at each sample's own end), one
    // full-length sample, then a second batch of another shape on the same layers (descriptors rebuilt,
    // buffers grown) and a third, smaller one (buffers reused).
    compare_lstm_batch(p.a, p.b, cpu, gpu, p.pa, p.pb, c, {7, 3, 5, 1}, 7, 100);
    compare_lstm_batch(p.a, p.b, cpu, gpu, p.pa, p.pb, c, {2, 9, 9, 4, 6, 1}, 11, 200);
    compare_lstm_batch(p.a, p.b, cpu, gpu, p.pa, p.pb, c, {3, 2}, 4, 300);
  }
}

TEST_CASE("lstm: a sample of length 0 stays all padding on CUDA", "[cuda][lstm][cudnn]") {
  const LstmCase c{4, 6, 2, true};
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  LstmPair p(c, 5);
  compare_lstm_batch(p.a, p.b, cpu, gpu, p.pa, p.pb, c, {5, 0, 2}, 5, 400);
  // Every sample empty: zero outputs and zero gradients, without running cuDNN.
  compare_lstm_batch(p.a, p.b, cpu, gpu, p.pa, p.pb, c, {0, 0}, 3, 500);
}

TEST_CASE("lstm: CUDA inference forward matches training forward; backward needs a training forward",
          "[cuda][lstm][cudnn]") {
  const LstmCase c{3, 5, 2, true};
  Context gpu = Context::cuda(0, 1);
  Lstm b({c.hidden, c.layers, c.bidirectional, 1.0});
  b.setup({c.input});
  const BoundParams pb = bind_random_params(b, 8, DType::f32, kGpu, 0.3);
  fence_legacy_stream(pb.params);
  const std::vector<int32_t> lengths{6, 2, 4};
  b.set_sequence_lengths(i32(lengths));
  const int64_t rows = 3 * 6, out = 2 * c.hidden;
  const Tensor x_gpu = upload(random_tensor({rows, c.input}, 9, -1, 1, DType::f32));
  const Tensor dy_gpu = upload(random_tensor({rows, out}, 10, -1, 1, DType::f32));
  Tensor y_train = Tensor::empty({rows, out}, DType::f32, kGpu), y_eval = Tensor::empty({rows, out}, DType::f32, kGpu);
  Tensor dx = Tensor::empty({rows, c.input}, DType::f32, kGpu);
  b.forward(gpu, x_gpu, y_train, true);
  b.forward(gpu, x_gpu, y_eval, false);
  const Tensor train = download(gpu, y_train), eval = download(gpu, y_eval);
  // The same cell on the same data; cuDNN may pick different kernels for the two modes, so the bound
  // is the forward bound of the parity test (6 steps x 2 layers, K = 2H + H + 2).
  require_close(eval, train, lstm_atol(3 * c.hidden + 2, 12, train), 0.0, "inference y");
  require_zero_padding(eval, lengths, 6, "inference y");
  // The inference forward leaves no reserve space for backward: a clear error, not stale gradients.
  REQUIRE_THROWS_WITH(b.backward(gpu, x_gpu, y_eval, dy_gpu, dx), Catch::Contains("training-mode forward"));
  b.forward(gpu, x_gpu, y_train, true);
  b.backward(gpu, x_gpu, y_train, dy_gpu, dx);
  // One backward per forward: cuDNN's backward data may reuse the reserve space.
  REQUIRE_THROWS_WITH(b.backward(gpu, x_gpu, y_train, dy_gpu, dx), Catch::Contains("once per forward"));
  // f64 has no CUDA path.
  Tensor y64 = Tensor::empty({rows, out}, DType::f64, kGpu);
  REQUIRE_THROWS_WITH(b.forward(gpu, Tensor::empty({rows, c.input}, DType::f64, kGpu), y64, true),
                      Catch::Contains("the CUDA path supports f32 only"));
}

namespace {

struct CtcBatch {
  int64_t frames, classes;
  std::vector<int32_t> input_lengths, targets, target_lengths;
};

// The same batch through the CPU reference and the CUDA kernel, with and without gradient.
void compare_ctc(const CtcBatch& c, bool zero_infinity, uint64_t seed) {
  const int64_t batch = static_cast<int64_t>(c.input_lengths.size());
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  CtcLoss a({zero_infinity}), b({zero_infinity});
  const Tensor z = random_tensor({batch, c.frames, c.classes}, seed, -4, 4, DType::f32);
  const Tensor z_gpu = upload(z);
  const SequenceTargets st{i32(c.input_lengths), i32(c.targets.empty() ? std::vector<int32_t>{0} : c.targets),
                           i32(c.target_lengths)};
  const Shape shape{batch, c.frames, c.classes};
  Tensor dz = Tensor::empty(shape, DType::f32);
  // NaN-filled so that an element the kernel forgets to write fails the comparison.
  Tensor dz_host_nan = Tensor::empty(shape, DType::f32);
  dz_host_nan.fill_(std::nan(""));
  Tensor dz_gpu = upload(dz_host_nan);
  const LossStats s = a.compute_sequence(cpu, z, st, &dz);
  const LossStats g = b.compute_sequence(gpu, z_gpu, st, &dz_gpu);
  REQUIRE(g.count == s.count);
  // Decoding compares the same f32 logits in the same order on both sides: identical counts.
  REQUIRE(g.correct == s.correct);
  REQUIRE(g.char_errors == s.char_errors);
  REQUIRE(g.chars == s.chars);
  REQUIRE(g.word_errors == s.word_errors);
  REQUIRE(g.words == s.words);
  // Both sides run the recursion in double in the same order; they differ only by the last bits of
  // exp/log/log1p (CUDA's and glibc's are within 1-2 ulps), accumulated over the T steps in the log
  // domain: far below 1e-9 relative.
  REQUIRE(std::fabs(g.loss_sum - s.loss_sum) <= 1e-9 * (1.0 + std::fabs(s.loss_sum)));
  // Each gradient entry lies in [-1/B, 1/B]. The kernel rounds its double value to f32 once (u/B);
  // the CPU rounds a label's entry once per occurrence of the label in the target plus once (the
  // softmax term), each time by at most u/B. So the two differ by at most (L_max + 2) u / B.
  const int64_t longest = *std::max_element(c.target_lengths.begin(), c.target_lengths.end());
  require_close(download(gpu, dz_gpu), dz, static_cast<double>(longest + 2) * kUnit / static_cast<double>(batch), 0.0,
                "ctc dlogits");

  const LossStats no_grad = b.compute_sequence(gpu, z_gpu, st, nullptr);
  REQUIRE(no_grad.loss_sum == g.loss_sum);
  REQUIRE(no_grad.char_errors == g.char_errors);
  REQUIRE(no_grad.word_errors == g.word_errors);
}

}  // namespace

TEST_CASE("ctc: the CUDA kernel matches the CPU reference", "[cuda][ctc]") {
  SECTION("unequal lengths, repeats, an empty target, padding, an impossible sample") {
    // Sample 3: 2 frames cannot emit 3 labels (zero_infinity: loss and gradient 0).
    compare_ctc({12, 6, {12, 9, 5, 2, 12}, {1, 2, 2, 3, 4, 4, 4, 5, 1, 2, 3, 5, 5}, {3, 5, 0, 3, 2}}, true, 31);
  }
  SECTION("targets longer than one thread block (2L + 1 > 256 states)") {
    std::vector<int32_t> targets;
    for (int i = 0; i < 140 + 131; ++i) targets.push_back(1 + (i * 7) % 28);
    compare_ctc({300, 29, {300, 290}, targets, {140, 131}}, true, 32);
  }
  SECTION("one frame per sample, two classes") { compare_ctc({1, 2, {1, 1}, {1}, {1, 0}}, true, 33); }
}

TEST_CASE("ctc: CUDA raises the CPU's error for an impossible alignment without zero_infinity", "[cuda][ctc]") {
  Context gpu = Context::cuda(0, 1);
  CtcLoss loss({false});
  const Tensor z_gpu = upload(random_tensor({2, 4, 3}, 40, -1, 1, DType::f32));
  const SequenceTargets st{i32({4, 2}), i32({1, 2, 1, 2, 1}), i32({2, 3})};
  REQUIRE_THROWS_WITH(loss.compute_sequence(gpu, z_gpu, st, nullptr), Catch::Contains("sample 1 cannot be aligned"));
}
