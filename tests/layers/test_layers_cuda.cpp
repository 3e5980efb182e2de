// CPU-vs-CUDA parity of every layer and the loss: the same inputs and parameters (f32) through both
// paths, compared as |got - ref| <= atol + rtol |ref| with the bound derived where it is used, and the
// dropout masks compared bit for bit. Needs a GPU; the CUDA test main reports "Skipped" without one.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "layers/activation.h"
#include "layers/add.h"
#include "layers/batchnorm.h"
#include "layers/dense.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/pad_channels.h"
#include "layers/softmax_cross_entropy.h"
#include "tests/support/gradcheck.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

constexpr double kUnit = 5.9604644775390625e-8;  // u = 2^-24, the unit roundoff of f32
const Device kGpu = Device::cuda(0);

// Tensor::to() copies on the legacy default stream while layers run on the context's non-blocking
// stream, which does not wait for it; a pageable host-to-device copy may return before its DMA
// lands. A device-to-host copy on the same legacy stream returns only when everything queued before
// it is done, so reading one element back fences the uploads (and any cudaMemset of Tensor::zeros).
void fence_legacy_stream(const Tensor& on_gpu) {
  if (on_gpu.numel() > 0) (void)on_gpu.view(0, {1}).to(Device::cpu());
}

Tensor upload(const Tensor& host) {
  Tensor t = host.to(kGpu);
  fence_legacy_stream(t);
  return t;
}

Tensor download(Context& ctx, const Tensor& t) {
  ctx.synchronize();
  return t.to(Device::cpu());
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(t.data<float>()[i])));
  return m;
}

// Every element within atol + rtol |ref|; reports the worst one.
void require_close(const Tensor& got, const Tensor& ref, double atol, double rtol, const char* what) {
  REQUIRE(got.shape() == ref.shape());
  int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.data<float>()[i], r = ref.data<float>()[i];
    const double excess = std::fabs(g - r) - (atol + rtol * std::fabs(r));
    if (!(excess <= 0)) {
      ++bad;
      if (worst < 0 || excess > worst_excess) worst = i, worst_excess = excess;
    }
  }
  INFO(what << ": " << bad << " of " << ref.numel() << " elements outside atol " << atol << " + rtol " << rtol
            << (worst >= 0 ? " (worst at " + std::to_string(worst) + ": got " +
                                 std::to_string(got.data<float>()[worst]) + ", want " +
                                 std::to_string(ref.data<float>()[worst]) + ")"
                           : std::string()));
  REQUIRE(bad == 0);
}

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

TEST_CASE("batchnorm2d: cuDNN matches the CPU reference", "[cuda][layers][batchnorm]") {
  const Shape s{8, 4, 6, 5};  // 240 values per channel
  for (bool affine : {true, false}) {
    INFO("affine " << affine);
    Context cpu = Context::cpu(1, 1);
    Context gpu = Context::cuda(0, 1);
    BatchNorm a(2, 1e-5, 0.1, affine), b(2, 1e-5, 0.1, affine);
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
