// CPU-vs-CUDA parity of every layer and the loss: the same inputs and parameters (f32) through both
// paths, compared as |got - ref| <= atol + rtol |ref| with the bound derived where it is used, and the
// dropout masks compared bit for bit. Needs a GPU; the CUDA test main reports "Skipped" without one.
// Test cases tagged [cudnn] need cuDNN, which the CUDA emulator does not stand in for (no exact CPU
// equivalent): its runs (test_layers_cuda_emu) leave them out; they run only on a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "layers/activation.h"
#include "layers/add.h"
#include "layers/batchnorm.h"
#include "layers/contrast_norm.h"
#include "layers/conv2d.h"
#include "layers/dense.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/global_avgpool.h"
#include "layers/locally_connected2d.h"
#include "layers/lrn.h"
#include "layers/pad_channels.h"
#include "layers/pool2d.h"
#include "layers/softmax_cross_entropy.h"
#include "tests/support/cuda_parity.h"
#include "tests/support/gradcheck.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

void require_bitwise(const Tensor& got, const Tensor& ref, const char* what) {
  INFO(what);
  REQUIRE(got.nbytes() == ref.nbytes());
  REQUIRE(std::memcmp(got.raw(), ref.raw(), ref.nbytes()) == 0);
}

// Each side's length-K dot product is within gamma_K sum|a_k b_k| of the exact value, gamma_K ~ K u
// (Higham, Accuracy and Stability of Numerical Algorithms, Thm 3.1, any summation order, with or
// without FMA); sum|a_k b_k| <= K max|a| max|b|. The two sides differ by at most twice that.
double gemm_atol(int64_t k, double max_a, double max_b) {
  return 2.0 * static_cast<double>(k) * kUnit * static_cast<double>(k) * max_a * max_b;
}

}  // namespace

TEST_CASE("flatten: CUDA copies exactly what the CPU copies", "[cuda][layers]") {
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  Flatten a, b;
  a.setup({3, 5, 7});
  b.setup({3, 5, 7});
  const Tensor x = random_tensor({4, 3, 5, 7}, 1, -1, 1, DType::f32);
  Tensor y = Tensor::empty({4, 105}, DType::f32), y_gpu = Tensor::empty({4, 105}, DType::f32, kGpu);
  a.forward(cpu, x, y, true);
  const Tensor x_gpu = upload(x);
  b.forward(gpu, x_gpu, y_gpu, true);
  require_bitwise(download(gpu, y_gpu), y, "flatten y");
  Tensor dx = Tensor::empty(x.shape(), DType::f32), dx_gpu = Tensor::empty(x.shape(), DType::f32, kGpu);
  a.backward(cpu, x, y, y, dx);
  const Tensor y_up = upload(y);
  b.backward(gpu, x_gpu, y_up, y_up, dx_gpu);
  require_bitwise(download(gpu, dx_gpu), dx, "flatten dx");
}

TEST_CASE("dense: cuBLAS matches the OpenBLAS reference", "[cuda][layers]") {
  const int64_t batch = 32, in = 64, out = 48;
  for (bool bias : {true, false}) {
    INFO("bias " << bias);
    Context cpu = Context::cpu(1, 1);
    Context gpu = Context::cuda(0, 1);
    Dense a(out, bias), b(out, bias);
    a.setup({in});
    b.setup({in});
    BoundParams pa = bind_random_params(a, 3, DType::f32);
    BoundParams pb = bind_random_params(b, 3, DType::f32, kGpu);
    fence_legacy_stream(pb.params);
    const Tensor x = random_tensor({batch, in}, 4, -1, 1, DType::f32);
    const Tensor dy = random_tensor({batch, out}, 5, -1, 1, DType::f32);
    const Tensor x_gpu = upload(x), dy_gpu = upload(dy);

    Tensor y = Tensor::empty({batch, out}, DType::f32), y_gpu = Tensor::empty({batch, out}, DType::f32, kGpu);
    a.forward(cpu, x, y, true);
    b.forward(gpu, x_gpu, y_gpu, true);
    // K = in products per output, |x|, |W| <= 1; rtol 4u covers the bias, added before the GEMM on the
    // CPU (beta = 1) and after it on the GPU (one rounding each).
    require_close(download(gpu, y_gpu), y, gemm_atol(in, 1, 1), 4 * kUnit, "dense y");

    Tensor dx = Tensor::empty({batch, in}, DType::f32), dx_gpu = Tensor::empty({batch, in}, DType::f32, kGpu);
    a.backward(cpu, x, y, dy, dx);
    b.backward(gpu, x_gpu, y_gpu, dy_gpu, dx_gpu);
    const Tensor grads_gpu = download(gpu, pb.grads);
    // dW sums K = batch products of |dy|, |x| <= 1; db sums batch values of |dy| <= 1 (same bound with
    // one factor 1); dx sums K = out products of |dy|, |W| <= 1.
    require_close(grads_gpu.view(0, {out, in}), pa.grads.view(0, {out, in}), gemm_atol(batch, 1, 1), 0, "dense dW");
    if (bias)
      require_close(grads_gpu.view(out * in, {out}), pa.grads.view(out * in, {out}), gemm_atol(batch, 1, 1), 0,
                    "dense db");
    require_close(download(gpu, dx_gpu), dx, gemm_atol(out, 1, 1), 0, "dense dx");

    // The first layer's backward: no dx, same parameter gradients.
    Tensor none;
    b.backward(gpu, x_gpu, y_gpu, dy_gpu, none);
    require_close(download(gpu, pb.grads).view(0, {out, in}), pa.grads.view(0, {out, in}), gemm_atol(batch, 1, 1), 0,
                  "dense dW without dx");
  }
}

TEST_CASE("activations: CUDA matches the CPU within a few ulps", "[cuda][layers]") {
  const Shape shape{16, 100};
  const Tensor x = random_tensor(shape, 7, -4, 4, DType::f32);
  const Tensor dy = random_tensor(shape, 8, -1, 1, DType::f32);
  for (ActivationKind kind : {ActivationKind::relu, ActivationKind::tanh, ActivationKind::sigmoid}) {
    INFO(activation_name(kind));
    Context cpu = Context::cpu(1, 1);
    Context gpu = Context::cuda(0, 1);
    Activation a(kind), b(kind);
    a.setup({100});
    b.setup({100});
    Tensor y = Tensor::empty(shape, DType::f32), y_gpu = Tensor::empty(shape, DType::f32, kGpu);
    a.forward(cpu, x, y, true);
    const Tensor x_gpu = upload(x), y_cpu_gpu = upload(y), dy_gpu = upload(dy);
    b.forward(gpu, x_gpu, y_gpu, true);
    Tensor dx = Tensor::empty(shape, DType::f32), dx_gpu = Tensor::empty(shape, DType::f32, kGpu);
    a.backward(cpu, x, y, dy, dx);
    // Backward gets the CPU's y on both sides so that it is compared on its own.
    b.backward(gpu, x_gpu, y_cpu_gpu, dy_gpu, dx_gpu);
    if (kind == ActivationKind::relu) {
      // A comparison and a select: exact.
      require_bitwise(download(gpu, y_gpu), y, "relu y");
      require_bitwise(download(gpu, dx_gpu), dx, "relu dx");
    } else {
      // CUDA's expf/tanhf are within 2 ulps (CUDA C Programming Guide, Mathematical Functions), glibc's
      // within 1-2; sigmoid adds an addition and a division. rtol 8 ulps (2^-20) covers both sides;
      // atol one ulp of 1 (2^-23) covers outputs near 0, where |y| <= 1 sets the absolute scale.
      require_close(download(gpu, y_gpu), y, 2 * kUnit, 16 * kUnit, "activation y");
      // dy (1 - y^2) and dy y (1 - y): nvcc may fuse a multiply-add that the CPU rounds twice; each
      // rounding is u relative to a term of magnitude <= |dy| <= 1.
      require_close(download(gpu, dx_gpu), dx, 4 * kUnit, 4 * kUnit, "activation dx");
    }
  }
}

TEST_CASE("dropout: CUDA draws the CPU's mask bit for bit", "[cuda][layers]") {
  for (double p : {0.0, 0.1, 0.5, 0.9}) {
    for (int64_t features : {1, 3, 4, 257, 4096}) {
      INFO("p " << p << ", features " << features);
      Context cpu = Context::cpu(99, 1);
      Context gpu = Context::cuda(0, 99);
      cpu.set_step(12345);
      gpu.set_step(12345);
      Dropout a(p), b(p);
      a.set_identity("drop", 5);
      b.set_identity("drop", 5);
      a.setup({features});
      b.setup({features});
      const Shape shape{7, features};
      const Tensor x = random_tensor(shape, 10, -1, 1, DType::f32);
      Tensor y = Tensor::empty(shape, DType::f32), y_gpu = Tensor::empty(shape, DType::f32, kGpu);
      a.forward(cpu, x, y, true);
      const Tensor x_gpu = upload(x);
      b.forward(gpu, x_gpu, y_gpu, true);
      // Same mask and the same single multiplication by the same float scale: identical bits.
      require_bitwise(download(gpu, y_gpu), y, "dropout y");

      const Tensor dy = random_tensor(shape, 11, -1, 1, DType::f32);
      Tensor dx = Tensor::empty(shape, DType::f32), dx_gpu = Tensor::empty(shape, DType::f32, kGpu);
      a.backward(cpu, x, y, dy, dx);
      const Tensor dy_gpu = upload(dy);
      b.backward(gpu, x_gpu, y_gpu, dy_gpu, dx_gpu);
      require_bitwise(download(gpu, dx_gpu), dx, "dropout dx");

      b.forward(gpu, x_gpu, y_gpu, false);
      require_bitwise(download(gpu, y_gpu), x, "dropout in evaluation");
    }
  }
}

TEST_CASE("softmax cross-entropy: CUDA matches the CPU", "[cuda][layers]") {
  const int64_t batch = 50, classes = 37;
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  SoftmaxCrossEntropy a, b;
  const Tensor z = random_tensor({batch, classes}, 12, -8, 8, DType::f32);
  Tensor labels = Tensor::empty({batch}, DType::i32);
  for (int64_t i = 0; i < batch; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % classes);
  const Tensor z_gpu = upload(z), labels_gpu = upload(labels);
  Tensor dz = Tensor::empty({batch, classes}, DType::f32), dz_gpu = Tensor::empty({batch, classes}, DType::f32, kGpu);
  const LossStats s = a.compute(cpu, z, labels, &dz);
  const LossStats g = b.compute(gpu, z_gpu, labels_gpu, &dz_gpu);
  REQUIRE(g.count == s.count);
  REQUIRE(g.correct == s.correct);  // random logits: no near-ties for the arg-max
  // Per row, log(sum of C exponentials) differs by the summation order (C u relative) and by expf/logf
  // (a few ulps) on each side, relative to |lse| <= max|z| + log C; rows are summed in double.
  const double lse_bound = max_abs(z) + std::log(static_cast<double>(classes));
  REQUIRE(std::fabs(g.loss_sum - s.loss_sum) <= batch * (classes + 8) * kUnit * lse_bound);
  // softmax / B: each entry carries the sum's relative error ((C + 8) u); the label's entry subtracts
  // 1/B, so its absolute error is a few u / B.
  require_close(download(gpu, dz_gpu), dz, 4 * kUnit / batch, (classes + 8) * kUnit, "dlogits");

  const LossStats no_grad = b.compute(gpu, z_gpu, labels_gpu, nullptr);
  REQUIRE(no_grad.loss_sum == g.loss_sum);
  REQUIRE(no_grad.correct == g.correct);
}

TEST_CASE("CUDA paths reject what they do not implement", "[cuda][layers]") {
  Context gpu = Context::cuda(0, 1);
  SoftmaxCrossEntropy loss;
  Tensor labels = Tensor::empty({2}, DType::i32);
  labels.data<int32_t>()[0] = 0;
  labels.data<int32_t>()[1] = 3;
  const Tensor z = upload(Tensor::zeros({2, 3}, DType::f32));
  const Tensor labels_gpu = upload(labels);
  REQUIRE_THROWS_WITH(loss.compute(gpu, z, labels_gpu, nullptr),
                      Catch::Contains("label 3 of sample 1 is outside [0, 3)"));

  Activation relu(ActivationKind::relu);
  relu.setup({3});
  Tensor y64 = Tensor::empty({2, 3}, DType::f64, kGpu);
  REQUIRE_THROWS_WITH(relu.forward(gpu, Tensor::empty({2, 3}, DType::f64, kGpu), y64, true),
                      Catch::Contains("the CUDA path supports f32 only"));
  Tensor y = Tensor::empty({2, 3}, DType::f32, kGpu);
  REQUIRE_THROWS_WITH(relu.forward(gpu, Tensor::empty({2, 3}, DType::f32), y, true),
                      Catch::Contains("x is on cpu but the context is on cuda:0"));
}

TEST_CASE("add and pad_channels: CUDA matches the CPU bit for bit", "[cuda][layers][add]") {
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  const Shape s{2, 3, 4, 5};
  std::vector<Tensor> xs, xs_gpu;
  for (int k = 0; k < 3; ++k) {
    xs.push_back(random_tensor(s, 10 + k, -1, 1, DType::f32));
    xs_gpu.push_back(upload(xs.back()));
  }
  Add a, b;
  a.setup_inputs({{3, 4, 5}, {3, 4, 5}, {3, 4, 5}});
  b.setup_inputs({{3, 4, 5}, {3, 4, 5}, {3, 4, 5}});
  Tensor y = Tensor::empty(s, DType::f32), y_gpu = Tensor::empty(s, DType::f32, kGpu);
  a.forward_inputs(cpu, xs, y, true);
  b.forward_inputs(gpu, xs_gpu, y_gpu, true);
  require_bitwise(download(gpu, y_gpu), y, "add y");  // the same two roundings in the same order
  Tensor acc = xs[0].clone(), acc_gpu = upload(xs[0]);
  add_into(cpu, acc, xs[1]);
  add_into(gpu, acc_gpu, xs_gpu[1]);
  require_bitwise(download(gpu, acc_gpu), acc, "add_into");
  std::vector<Tensor> dxs{Tensor::empty(s, DType::f32, kGpu), Tensor(), Tensor::empty(s, DType::f32, kGpu)};
  b.backward_inputs(gpu, xs_gpu, y_gpu, xs_gpu[2], dxs);
  require_bitwise(download(gpu, dxs[0]), xs[2], "add dx0");
  require_bitwise(download(gpu, dxs[2]), xs[2], "add dx2");

  // With the fused relu (activation: relu), two inputs and three: the same bits as the CPU.
  for (int inputs : {2, 3}) {
    INFO(inputs << " inputs, fused relu");
    Add fa(true), fb(true);
    const std::vector<Shape> shapes(static_cast<size_t>(inputs), Shape{3, 4, 5});
    fa.setup_inputs(shapes);
    fb.setup_inputs(shapes);
    const std::span<const Tensor> in(xs.data(), static_cast<size_t>(inputs));
    const std::span<const Tensor> in_gpu(xs_gpu.data(), static_cast<size_t>(inputs));
    fa.forward_inputs(cpu, in, y, true);
    fb.forward_inputs(gpu, in_gpu, y_gpu, true);
    require_bitwise(download(gpu, y_gpu), y, "add+relu y");
    std::vector<Tensor> fdx, fdx_gpu;
    for (int k = 0; k < inputs; ++k) {
      fdx.push_back(Tensor::empty(s, DType::f32));
      fdx_gpu.push_back(Tensor::empty(s, DType::f32, kGpu));
    }
    fa.backward_inputs(cpu, in, y, xs[2], fdx);
    fb.backward_inputs(gpu, in_gpu, y_gpu, xs_gpu[2], fdx_gpu);
    for (int k = 0; k < inputs; ++k) require_bitwise(download(gpu, fdx_gpu[k]), fdx[k], "add+relu dx");
  }

  for (auto [channels, stride] : {std::pair{8, 2}, std::pair{3, 1}, std::pair{6, 3}}) {
    PadChannels pa(channels, stride), pb(channels, stride);
    const Shape out = pa.setup({3, 4, 5});
    pb.setup({3, 4, 5});
    Shape ys{2};
    ys.insert(ys.end(), out.begin(), out.end());
    Tensor py = Tensor::empty(ys, DType::f32), py_gpu = Tensor::empty(ys, DType::f32, kGpu);
    pa.forward(cpu, xs[0], py, true);
    pb.forward(gpu, xs_gpu[0], py_gpu, true);
    require_bitwise(download(gpu, py_gpu), py, "pad_channels y");
    Tensor pdx = Tensor::empty(s, DType::f32), pdx_gpu = Tensor::empty(s, DType::f32, kGpu);
    const Tensor py_up = upload(py);
    pa.backward(cpu, xs[0], py, py, pdx);
    pb.backward(gpu, xs_gpu[0], py_up, py_up, pdx_gpu);
    require_bitwise(download(gpu, pdx_gpu), pdx, "pad_channels dx");
  }
}

TEST_CASE("batchnorm2d: cuDNN matches the CPU reference", "[cuda][layers][batchnorm][cudnn]") {
  const Shape s{8, 4, 6, 5};  // 240 values per channel
  // With the fused relu (activation: relu) about half of the outputs are 0 and their dy is dropped.
  for (auto [affine, relu] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
    INFO("affine " << affine << ", relu " << relu);
    Context cpu = Context::cpu(1, 1);
    Context gpu = Context::cuda(0, 1);
    BatchNorm a(2, 1e-5, 0.1, affine, relu), b(2, 1e-5, 0.1, affine, relu);
    a.setup({4, 6, 5});
    b.setup({4, 6, 5});
    BoundParams pa = bind_random_params(a, 3, DType::f32);
    BoundParams pb = bind_random_params(b, 3, DType::f32, kGpu);
    Tensor ba = bind_initial_buffers(a, DType::f32);
    Tensor bb = bind_initial_buffers(b, DType::f32, kGpu);
    fence_legacy_stream(pb.params);
    fence_legacy_stream(bb);
    // A mean far from zero tests the variance's accuracy.
    const Tensor x = random_tensor(s, 4, 1, 3, DType::f32);
    const Tensor dy = random_tensor(s, 5, -1, 1, DType::f32);
    const Tensor x_gpu = upload(x), dy_gpu = upload(dy);
    Tensor y = Tensor::empty(s, DType::f32), y_gpu = Tensor::empty(s, DType::f32, kGpu);
    for (int step = 0; step < 3; ++step) {  // three updates of the running statistics
      a.forward(cpu, x, y, true);
      b.forward(gpu, x_gpu, y_gpu, true);
    }
    // Normalized values are O(3) with |w| <= 1; f32 statistics over 240 values: 1e-5 absolute is
    // ~100 ulps of the result, far below a wrong formula (e.g. the unbiased variance: 0.2% off).
    require_close(download(gpu, y_gpu), y, 1e-5, 1e-5, "batchnorm y");
    require_close(download(gpu, bb), ba, 1e-6, 1e-5, "batchnorm running statistics");

    Tensor dx = Tensor::empty(s, DType::f32), dx_gpu = Tensor::empty(s, DType::f32, kGpu);
    a.backward(cpu, x, y, dy, dx);
    b.backward(gpu, x_gpu, y_gpu, dy_gpu, dx_gpu);
    require_close(download(gpu, dx_gpu), dx, 1e-5, 1e-4, "batchnorm dx");
    if (affine) require_close(download(gpu, pb.grads), pa.grads, 1e-4, 1e-4, "batchnorm dweight, dbias");
    Tensor none;
    b.backward(gpu, x_gpu, y_gpu, dy_gpu, none);  // first layer: no dx, same parameter gradients
    if (affine) require_close(download(gpu, pb.grads), pa.grads, 1e-4, 1e-4, "batchnorm grads without dx");

    a.forward(cpu, x, y, false);
    b.forward(gpu, x_gpu, y_gpu, false);
    require_close(download(gpu, y_gpu), y, 1e-5, 1e-5, "batchnorm evaluation y");
  }
}
// ---- image layers ----------------------------------------------------------------------------------

namespace {

// Tolerances of one parity comparison: |got - ref| <= atol + rtol |ref| per output.
struct Tol {
  double atol = 0, rtol = 0;
};
struct ImageParityTol {
  Tol y, dx, grads;
  bool bitwise = false;  // the same operations in the same order on both sides
};

Shape batched(int64_t batch, const Shape& s) {
  Shape out{batch};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// Runs the same layer (a on the CPU, b on the GPU, both set up and bound with the same parameter
// values) forward and backward on the same x and dy, and compares y, dx and the parameter gradients.
// x may be given (distinct values for max pooling); otherwise it is uniform in [-1, 1).
void image_parity(Layer& a, Layer& b, const Shape& input, int64_t batch, const ImageParityTol& tol, const char* what,
                  const Tensor* given_x = nullptr) {
  INFO(what);
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  const Shape out = a.setup(input);
  REQUIRE(b.setup(input) == out);
  BoundParams pa = bind_random_params(a, 21, DType::f32);
  BoundParams pb = bind_random_params(b, 21, DType::f32, kGpu);
  fence_legacy_stream(pb.params);
  const Tensor x = given_x ? *given_x : random_tensor(batched(batch, input), 22, -1, 1, DType::f32);
  const Tensor dy = random_tensor(batched(batch, out), 23, -1, 1, DType::f32);
  const Tensor x_gpu = upload(x), dy_gpu = upload(dy);
  Tensor y = Tensor::empty(dy.shape(), DType::f32), y_gpu = Tensor::empty(dy.shape(), DType::f32, kGpu);
  a.forward(cpu, x, y, true);
  b.forward(gpu, x_gpu, y_gpu, true);
  // Backward gets the CPU's y on both sides so that it is compared on its own.
  const Tensor y_up = upload(y);
  Tensor dx = Tensor::empty(x.shape(), DType::f32), dx_gpu = Tensor::empty(x.shape(), DType::f32, kGpu);
  a.backward(cpu, x, y, dy, dx);
  b.backward(gpu, x_gpu, y_up, dy_gpu, dx_gpu);
  const Tensor y_got = download(gpu, y_gpu), dx_got = download(gpu, dx_gpu);
  if (tol.bitwise) {
    require_bitwise(y_got, y, "y");
    require_bitwise(dx_got, dx, "dx");
  } else {
    require_close(y_got, y, tol.y.atol, tol.y.rtol, "y");
    require_close(dx_got, dx, tol.dx.atol, tol.dx.rtol, "dx");
  }
  if (!a.param_specs().empty())
    require_close(download(gpu, pb.grads), pa.grads, tol.grads.atol, tol.grads.rtol, "parameter gradients");
}

// Distinct values in [-1, 1) in a scrambled order (no ties in any pooling window).
Tensor distinct_f32(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(-1.0 + 2.0 * ((i * 7919) % n) / n);
  return t;
}

}  // namespace

TEST_CASE("conv2d: cuDNN matches the im2col + OpenBLAS reference", "[cuda][layers][conv2d][cudnn]") {
  struct Case {
    Window2d win;
    Shape input;
    int64_t out_channels;
    bool bias;
  };
  const Case cases[] = {{{3, 3, 1, 1, 1, 1}, {16, 12, 12}, 16, true},
                        {{5, 5, 1, 1, 2, 2}, {3, 32, 32}, 64, true},
                        {{3, 2, 2, 1, 1, 0}, {5, 9, 7}, 6, false},
                        {{1, 1, 1, 1, 0, 0}, {8, 6, 6}, 4, true}};
  for (const Case& c : cases) {
    Conv2d a(c.out_channels, c.win, c.bias), b(c.out_channels, c.win, c.bias);
    const int64_t k = c.input[0] * c.win.kh * c.win.kw, batch = 4;
    const Shape out = a.setup(c.input);
    const int64_t positions = batch * out[1] * out[2];
    // Each output is a K-term dot product with |x|, |W| <= 1, the bias added once; cuDNN may pick a
    // Winograd or FFT algorithm, whose transforms add error beyond a plain sum's, so the bound is the
    // plain-sum bound (gemm_atol) times 16. dW and db sum over batch*OH*OW positions, dx over
    // OC*kh*kw terms.
    ImageParityTol tol;
    tol.y = {16 * gemm_atol(k + 1, 1, 1), 0};
    tol.dx = {16 * gemm_atol(c.out_channels * c.win.kh * c.win.kw, 1, 1), 0};
    tol.grads = {16 * gemm_atol(positions, 1, 1), 0};
    image_parity(a, b, c.input, batch, tol, "conv2d");
  }
}

TEST_CASE("pooling: the CUDA kernels repeat the CPU's arithmetic exactly", "[cuda][layers][pool]") {
  ImageParityTol exact;
  exact.bitwise = true;
  const Shape input{3, 13, 11};
  const Tensor x = distinct_f32(batched(2, input));
  for (bool ceil_mode : {false, true}) {
    Pool2d a(PoolKind::max, {{3, 3, 2, 2, 1, 1}, ceil_mode}), b(PoolKind::max, {{3, 3, 2, 2, 1, 1}, ceil_mode});
    image_parity(a, b, input, 2, exact, "maxpool2d 3x3 s2 p1", &x);
    Pool2d c(PoolKind::max, {{3, 3, 2, 2, 0, 0}, ceil_mode}), d(PoolKind::max, {{3, 3, 2, 2, 0, 0}, ceil_mode});
    image_parity(c, d, input, 2, exact, "maxpool2d 3x3 s2", &x);
    for (bool include_pad : {true, false}) {
      const PoolOptions o{{3, 2, 2, 2, 1, 1}, ceil_mode, include_pad};
      Pool2d e(PoolKind::avg, o), f(PoolKind::avg, o);
      image_parity(e, f, input, 2, exact, "avgpool2d 3x2 s2 p1", &x);
    }
  }
  // Ties: a constant input sends every window's gradient to its first element on both sides.
  Tensor flat = Tensor::empty(batched(2, input), DType::f32);
  flat.fill_(0.5);
  Pool2d g(PoolKind::max, {{3, 3, 2, 2, 1, 1}}), h(PoolKind::max, {{3, 3, 2, 2, 1, 1}});
  image_parity(g, h, input, 2, exact, "maxpool2d ties", &flat);
}

TEST_CASE("global_avgpool: CUDA matches the CPU", "[cuda][layers][pool]") {
  GlobalAvgPool a, b;
  // Means of 8*8 = 64 values in [-1, 1): the two summation orders differ by at most 64 u each.
  ImageParityTol tol;
  tol.y = {2 * 64 * kUnit, 0};
  tol.dx = {0, 2 * kUnit};  // one multiplication on each side
  image_parity(a, b, {16, 8, 8}, 5, tol, "global_avgpool");
}

TEST_CASE("lrn: cuDNN matches the CPU reference", "[cuda][layers][lrn][cudnn]") {
  for (int64_t size : {3, 5}) {
    const LrnOptions o{size, 0.5, 0.75, 2.0};
    Lrn a(o), b(o);
    // A few roundings and one powf per element on each side (cuDNN's exact sequence is undocumented):
    // 64 u relative, plus the same absolute amount for outputs near 0 (|y| <= |x| <= 1).
    ImageParityTol tol;
    tol.y = {64 * kUnit, 64 * kUnit};
    tol.dx = {256 * kUnit, 256 * kUnit};
    image_parity(a, b, {12, 5, 6}, 3, tol, "lrn");
  }
}

TEST_CASE("contrast_norm: CUDA matches the CPU reference", "[cuda][layers][cnorm]") {
  for (int64_t size : {3, 4, 9}) {
    const ContrastNormOptions o{size, 1.0, 0.75, 1.0};
    ContrastNorm a(o), b(o);
    // Window sums of size^2 terms in another order (box passes on the CPU, direct loops here) and
    // powf: size^2 u relative on the sums, carried through D^-beta; backward chains three such sums.
    ImageParityTol tol;
    const double sums = static_cast<double>(size * size) * kUnit;
    tol.y = {16 * sums, 16 * sums};
    tol.dx = {64 * sums, 64 * sums};
    image_parity(a, b, {4, 15, 15}, 3, tol, "contrast_norm");
  }
}

TEST_CASE("locally_connected2d: strided-batched cuBLAS matches the CPU", "[cuda][layers][local]") {
  for (bool bias : {true, false}) {
    const Window2d win{3, 3, 1, 1, 1, 1};
    LocallyConnected2d a(8, win, bias), b(8, win, bias);
    const int64_t batch = 16, k = 6 * 9;
    ImageParityTol tol;
    tol.y = {gemm_atol(k + 1, 1, 1), 0};
    tol.dx = {gemm_atol(8 * 9, 1, 1), 0};
    tol.grads = {gemm_atol(batch, 1, 1), 0};
    image_parity(a, b, {6, 7, 7}, batch, tol, bias ? "locally_connected2d with bias" : "locally_connected2d");
  }
  const Window2d strided{3, 2, 2, 2, 0, 1};
  LocallyConnected2d a(5, strided, true), b(5, strided, true);
  ImageParityTol tol;
  tol.y = {gemm_atol(3 * 6 + 1, 1, 1), 0};
  tol.dx = {gemm_atol(5 * 6, 1, 1), 0};
  tol.grads = {gemm_atol(4, 1, 1), 0};
  image_parity(a, b, {3, 9, 8}, 4, tol, "locally_connected2d strided");
}
