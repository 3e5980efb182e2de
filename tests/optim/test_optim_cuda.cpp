// CUDA parity: each optimizer's CUDA step against the CPU f32 step on the same arena, over several
// steps, with every option that changes the kernel's path. Skips (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "framework/core/philox.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"

using namespace qtrain;

namespace {

// Values in [-1, 1) from Philox, so the test data is the same on every machine.
Tensor random_arena(int64_t n, uint64_t stream) {
  Tensor t = Tensor::empty({n}, DType::f32);
  const PhiloxKey key = derive_philox_key(1234, stream);
  for (int64_t i = 0; i < n; ++i) {
    const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0, key);
    t.data<float>()[i] = 2.0f * uniform_from_bits(b.v[0]) - 1.0f;
  }
  return t;
}

// Bit for bit: both paths use the same f32 coefficients (computed once on the host) and the same order
// of operations, optim/ is built without multiply-add contraction on either side (-ffp-contract=off,
// --fmad=false), and sqrt and division are correctly rounded on both (nvcc's defaults -prec-sqrt=true
// -prec-div=true, no fast math).
void require_parity(const Tensor& cuda, const Tensor& cpu, const std::string& what) {
  const Tensor host = cuda.to(Device::cpu());
  const float* a = host.data<float>();
  const float* b = cpu.data<float>();
  int64_t wrong = 0, first = -1;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (first < 0) first = i;
      ++wrong;
    }
  }
  INFO(what << ": " << wrong << " of " << cpu.numel() << " values differ; first at " << first << " (cuda "
            << (first >= 0 ? a[first] : 0) << ", cpu " << (first >= 0 ? b[first] : 0) << ")");
  REQUIRE(wrong == 0);
}

// grad_scale scales the gradients: 1e-20 makes their squares subnormal, 1e-38 the gradients themselves,
// so both paths must flush the same state values to zero (optim/kernels.h, flush_subnormal).
template <typename Opt, typename Options>
void check_parity(const Options& options, float grad_scale = 1.0f) {
  constexpr int64_t n = 100003;  // not a multiple of the block size
  Context cpu_ctx = Context::cpu(1, 1);
  Context cuda_ctx = Context::cuda(0, 1);
  Opt cpu_opt(options), cuda_opt(options);
  Tensor p_cpu = random_arena(n, 0);
  Tensor p_cuda = p_cpu.to(Device::cuda(0));
  cpu_opt.init(n, DType::f32, Device::cpu());
  cuda_opt.init(n, DType::f32, Device::cuda(0));
  for (int k = 0; k < 5; ++k) {
    Tensor g = random_arena(n, k + 1);
    for (int64_t i = 0; i < n; ++i) g.data<float>()[i] *= grad_scale;
    const Tensor g_cuda = g.to(Device::cuda(0));
    const double lr = options.lr * (1.0 - 0.1 * k);  // a changing lr, as under a schedule
    cpu_opt.step(cpu_ctx, p_cpu, g, lr);
    cuda_opt.step(cuda_ctx, p_cuda, g_cuda, lr);
  }
  // Tensor copies use the legacy stream; the optimizer ran on the context's non-blocking stream.
  cuda_ctx.synchronize();
  require_parity(p_cuda, p_cpu, "params");
  const std::vector<std::pair<std::string, Tensor>> cpu_state = cpu_opt.state(), cuda_state = cuda_opt.state();
  REQUIRE(cpu_state.size() == cuda_state.size());
  for (size_t i = 0; i < cpu_state.size(); ++i) {
    REQUIRE(cpu_state[i].first == cuda_state[i].first);
    if (cpu_state[i].second.dtype() == DType::f32)
      require_parity(cuda_state[i].second, cpu_state[i].second, cpu_state[i].first);
    else
      REQUIRE(cpu_state[i].second.data<double>()[0] == cuda_state[i].second.data<double>()[0]);
  }
}

}  // namespace

TEST_CASE("sgd: CUDA matches the CPU", "[optim][cuda]") {
  check_parity<Sgd>(SgdOptions{.lr = 0.1});
  check_parity<Sgd>(SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.2, .weight_decay = 1e-2});
  check_parity<Sgd>(SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
}

TEST_CASE("rmsprop: CUDA matches the CPU", "[optim][cuda]") {
  check_parity<RmsProp>(RmsPropOptions{.lr = 0.01});
  check_parity<RmsProp>(RmsPropOptions{.lr = 0.01, .weight_decay = 1e-2, .momentum = 0.9});
  check_parity<RmsProp>(RmsPropOptions{.lr = 0.01, .alpha = 0.9, .momentum = 0.5, .centered = true});
}

TEST_CASE("adam: CUDA matches the CPU", "[optim][cuda]") {
  check_parity<Adam>(AdamOptions{.lr = 0.01});
  check_parity<Adam>(AdamOptions{.lr = 0.01, .weight_decay = 1e-2, .amsgrad = true});
}

TEST_CASE("subnormal gradients and states: CUDA flushes them to zero as the CPU does", "[optim][cuda]") {
  for (float scale : {1e-20f, 1e-38f}) {
    CAPTURE(scale);
    check_parity<Sgd>(SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}, scale);
    check_parity<RmsProp>(RmsPropOptions{.lr = 0.01, .alpha = 0.5, .momentum = 0.5, .centered = true}, scale);
    check_parity<Adam>(AdamOptions{.lr = 0.01, .beta1 = 0.5, .beta2 = 0.5, .amsgrad = true}, scale);
    check_parity<Adagrad>(AdagradOptions{.lr = 0.01}, scale);
  }
}

TEST_CASE("clip_grad_norm: CUDA returns the CPU's norm and scales to the CPU's bits", "[optim][clip][cuda]") {
  // One chunk, several, and two levels of chunk sums (optim/clip_order.h).
  for (int64_t n : {int64_t{257}, int64_t{3 * 4096 + 5}, int64_t{4096 * 4096 + 123}}) {
    CAPTURE(n);
    Context cpu_ctx = Context::cpu(1, 1);
    Context cuda_ctx = Context::cuda(0, 1);
    Tensor g_cpu = random_arena(n, 7);
    Tensor g_cuda = g_cpu.to(Device::cuda(0));
    for (double max_norm : {1e30, 1.0}) {  // above the norm (no scaling), then below it
      const double cpu_norm = clip_grad_norm(cpu_ctx, g_cpu, max_norm);
      const double cuda_norm = clip_grad_norm(cuda_ctx, g_cuda, max_norm);
      cuda_ctx.synchronize();
      REQUIRE(std::memcmp(&cpu_norm, &cuda_norm, sizeof(double)) == 0);
      require_parity(g_cuda, g_cpu, "clipped gradients");
    }
  }
}

TEST_CASE("adagrad: CUDA matches the CPU", "[optim][cuda]") {
  check_parity<Adagrad>(AdagradOptions{.lr = 0.01});
  check_parity<Adagrad>(
      AdagradOptions{.lr = 0.01, .lr_decay = 0.1, .weight_decay = 1e-2, .initial_accumulator_value = 0.1});
}
