// PowerSGD on CUDA against the CPU (skips, exit 77, without a GPU; runs under the CUDA emulator as
// test_powersgd_cuda_emu, whose cuBLAS is OpenBLAS): the orthogonalization and the expansion
// (M_hat and the residual) are the CPU's bits for the same input (exchange/algorithms/low_rank.h); the two
// products M Q and M^T P (cuBLAS) agree within float rounding of their sums; the whole exchange over
// several steps (a world of one) stays within a small tolerance of the CPU's.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "exchange/algorithms/low_rank.h"
#include "exchange/gradient_exchange.h"
#include "framework/core/philox.h"

using namespace qtrain;

namespace {

Tensor random_values(int64_t n, uint64_t stream) {
  Tensor t = Tensor::empty({n}, DType::f32);
  const PhiloxKey key = derive_philox_key(99, stream);
  for (int64_t i = 0; i < n; ++i) {
    const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(i), 0, 0, 0, key);
    t.data<float>()[i] = 2.0f * uniform_from_bits(b.v[0]) - 1.0f;
  }
  return t;
}

int64_t differing(const Tensor& cuda, const Tensor& cpu) {
  const Tensor host = cuda.to(Device::cpu());
  int64_t wrong = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i) wrong += std::memcmp(host.data<float>() + i, cpu.data<float>() + i, 4) != 0;
  return wrong;
}

double max_abs_difference(const Tensor& cuda, const Tensor& cpu) {
  const Tensor host = cuda.to(Device::cpu());
  double e = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i)
    e = std::max(e, std::abs(static_cast<double>(host.data<float>()[i]) - cpu.data<float>()[i]));
  return e;
}

}  // namespace

TEST_CASE("powersgd arithmetic on CUDA: orthogonalization and expansion bit for bit, products within rounding",
          "[powersgd][cuda]") {
  const int64_t rows = 300, cols = 77;  // neither a multiple of the 256 lanes nor of a warp
  const int rank = 3;
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  const Device dev = Device::cuda(0);
  const Tensor m = random_values(rows * cols, 1);
  const Tensor m_dev = m.to(dev);

  // Orthogonalization of the same input.
  Tensor q = random_values(rank * cols, 2);
  Tensor q_dev = q.to(dev);
  exchange::orthonormalize_rows(cpu, q.data<float>(), rank, cols, 0.0f);
  exchange::orthonormalize_rows(gpu, q_dev.data<float>(), rank, cols, 0.0f);
  gpu.synchronize();
  CHECK(differing(q_dev, q) == 0);

  // Long rows of values spread over 2^-12 .. 2^12: the double sums round, so a different summation
  // order than the CPU's would show.
  Tensor wide = random_values(3 * 5000, 3);
  for (int64_t i = 0; i < wide.numel(); ++i)
    wide.data<float>()[i] = std::ldexp(wide.data<float>()[i], static_cast<int>(i % 25) - 12);
  Tensor wide_dev = wide.to(dev);
  exchange::orthonormalize_rows(cpu, wide.data<float>(), 3, 5000, 0.0f);
  exchange::orthonormalize_rows(gpu, wide_dev.data<float>(), 3, 5000, 0.0f);
  gpu.synchronize();
  CHECK(differing(wide_dev, wide) == 0);

  // P = M Q: each value a sum of 77 products of values in [-1, 1] (|Q| <= 1): float rounding.
  Tensor p = Tensor::empty({rank * rows}, DType::f32), p_dev = Tensor::empty({rank * rows}, DType::f32, dev);
  exchange::project_low_rank(cpu, m.data<float>(), rows, cols, q.data<float>(), rank, p.data<float>());
  exchange::project_low_rank(gpu, m_dev.data<float>(), rows, cols, q_dev.data<float>(), rank, p_dev.data<float>());
  gpu.synchronize();
  CHECK(max_abs_difference(p_dev, p) < 1e-5);

  // From here on both devices start from the CPU's P, so that the bit-for-bit steps see one input.
  p_dev = p.to(dev);
  exchange::orthonormalize_rows(cpu, p.data<float>(), rank, rows, 0.0f);
  exchange::orthonormalize_rows(gpu, p_dev.data<float>(), rank, rows, 0.0f);
  gpu.synchronize();
  CHECK(differing(p_dev, p) == 0);

  Tensor qb = Tensor::empty({rank * cols}, DType::f32), qb_dev = Tensor::empty({rank * cols}, DType::f32, dev);
  exchange::back_project_low_rank(cpu, m.data<float>(), rows, cols, p.data<float>(), rank, qb.data<float>());
  exchange::back_project_low_rank(gpu, m_dev.data<float>(), rows, cols, p_dev.data<float>(), rank,
                                  qb_dev.data<float>());
  gpu.synchronize();
  CHECK(max_abs_difference(qb_dev, qb) < 1e-5);

  qb_dev = qb.to(dev);
  Tensor out = Tensor::empty({rows * cols}, DType::f32), out_dev = Tensor::empty({rows * cols}, DType::f32, dev);
  Tensor e = m.to(Device::cpu()), e_dev = m.to(dev);
  exchange::expand_low_rank(cpu, p.data<float>(), qb.data<float>(), rows, cols, rank, out.data<float>(),
                            e.data<float>());
  exchange::expand_low_rank(gpu, p_dev.data<float>(), qb_dev.data<float>(), rows, cols, rank, out_dev.data<float>(),
                            e_dev.data<float>());
  exchange::add_into(cpu, e.data<float>(), m.data<float>(), rows * cols);
  exchange::add_into(gpu, e_dev.data<float>(), m_dev.data<float>(), rows * cols);
  gpu.synchronize();
  CHECK(differing(out_dev, out) == 0);
  CHECK(differing(e_dev, e) == 0);
}

TEST_CASE("powersgd exchange on CUDA follows the CPU's within the products' rounding", "[powersgd][cuda]") {
  const std::vector<ExchangeTensor> layout{{"conv.weight", "conv", "conv2d", 0, 32 * 75, 5, 32},
                                           {"conv.bias", "conv", "conv2d", 2400, 32, 32, 0},
                                           {"dense.weight", "dense", "dense", 2432, 40 * 120, 120, 40}};
  const int64_t arena = 2432 + 4800;
  auto source = std::make_shared<ConfigSource>();
  source->file = "test";
  ConfigNode node(YAML::Load("{method: powersgd, rank: 2, start_iter: 1, min_numel: 0}"), "quantization", source);
  const QuantizationConfig qc = QuantizationConfig::parse(node);
  ExchangeConfig cc;
  cc.overlap = true;
  const Device dev = Device::cuda(0);
  auto cpu_comm = make_communicator("local", Device::cpu());
  auto gpu_comm = make_communicator("local", dev);
  GradientExchange cpu_ex(*cpu_comm, Device::cpu(), 5, cc, qc, layout);
  GradientExchange gpu_ex(*gpu_comm, dev, 5, cc, qc, layout);
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  for (int k = 0; k < 4; ++k) {
    INFO("step " << k);
    Tensor g = random_values(arena, 10 + k);
    Tensor g_dev = g.to(dev);
    cpu_ex.exchange(cpu, g, static_cast<uint64_t>(k));
    gpu_ex.exchange(gpu, g_dev, static_cast<uint64_t>(k));
    gpu.synchronize();
    // Step 0 (before start_iter) and the bias: the values themselves in a world of one.
    // Compressed steps: the same Q draw (host Philox), the same arithmetic up to the products' rounding,
    // amplified by the orthogonalization's division by the column norms.
    CHECK(max_abs_difference(g_dev, g) < 1e-4);
  }
  auto cpu_state = cpu_ex.state(), gpu_state = gpu_ex.state();
  REQUIRE(cpu_state.size() == gpu_state.size());
  for (size_t i = 0; i < cpu_state.size(); ++i) {
    INFO(cpu_state[i].first);
    CHECK(cpu_state[i].first == gpu_state[i].first);
    CHECK(max_abs_difference(gpu_state[i].second, cpu_state[i].second) < 1e-4);
  }
}
