// DeMo's codec on CUDA against the CPU (skips, exit 77, without a GPU; runs under the CUDA emulator as
// test_demo_codec_cuda_emu): over several steps the payload bytes, the momentum and the decoded update
// of three simulated ranks are the CPU's bits, with fp32 values and u8 indices, and with signs and u16
// indices, over tensors with ragged ends; a malformed payload is refused before the device is written.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "framework/core/philox.h"
#include "tests/support/error_of.h"
#include "train/sync/demo_codec.h"

using namespace qtrain;
using namespace qtrain::demo;

namespace {

// Values spread over 2^-12 .. 2^12, so that a sum in another order than the CPU's would show.
std::vector<float> random_values(int64_t n, uint64_t stream) {
  std::vector<float> out(static_cast<size_t>(n));
  const PhiloxKey key = derive_philox_key(11, stream);
  for (int64_t i = 0; i < n; ++i) {
    const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(i), 0, 0, 0, key);
    out[static_cast<size_t>(i)] =
        std::ldexp(2.0f * uniform_from_bits(b.v[0]) - 1.0f, static_cast<int>(b.v[1] % 25) - 12);
  }
  return out;
}

Tensor on(Device device, const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::f32);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t.to(device);
}

bool same_bits(const Tensor& gpu, const std::vector<float>& cpu) {
  const Tensor host = gpu.to(Device::cpu());
  return std::memcmp(host.raw(), cpu.data(), cpu.size() * 4) == 0;
}

}  // namespace

TEST_CASE("demo codec on CUDA: payloads, momentum and decoded update are the CPU's bits", "[demo][cuda]") {
  // 700 = 10 x 64 + 60 values, 37, 3 (shorter than a chunk), and a gap before the last tensor.
  const std::vector<ArenaSpan> tensors = {{0, 700}, {700, 37}, {737, 3}, {800, 129}};
  const int64_t arena = 929;
  const int ranks = 3;
  for (const CodecOptions o : {CodecOptions{.chunk = 64, .topk = 4, .sign = false, .beta = 0.999f},
                               CodecOptions{.chunk = 300, .topk = 17, .sign = true, .beta = 0.9f},
                               CodecOptions{.chunk = 7, .topk = 7, .sign = false, .beta = 0.0f}}) {
    INFO("chunk " << o.chunk << " topk " << o.topk << " sign " << o.sign);
    Context cpu = Context::cpu(1, 1);
    Context gpu = Context::cuda(0, 1);
    const Device dev = Device::cuda(0);
    std::vector<Codec> on_cpu, on_gpu;
    std::vector<std::vector<float>> m_cpu;
    std::vector<Tensor> m_gpu;
    for (int r = 0; r < ranks; ++r) {
      on_cpu.emplace_back(tensors, o, Device::cpu());
      on_gpu.emplace_back(tensors, o, dev);
      m_cpu.push_back(random_values(arena, 20 + static_cast<uint64_t>(r)));
      m_gpu.push_back(on(dev, m_cpu.back()));
    }
    const size_t bytes = on_cpu[0].payload_bytes();
    std::vector<uint8_t> gathered_cpu(bytes * ranks), gathered_gpu(bytes * ranks, 0xEE);
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      for (int r = 0; r < ranks; ++r) {
        const std::vector<float> g = random_values(arena, 100 + static_cast<uint64_t>(step * ranks + r));
        const Tensor g_gpu = on(dev, g);
        const size_t at = bytes * static_cast<size_t>(r);
        on_cpu[static_cast<size_t>(r)].encode(cpu, m_cpu[static_cast<size_t>(r)].data(), g.data(),
                                              gathered_cpu.data() + at);
        on_gpu[static_cast<size_t>(r)].encode(gpu, m_gpu[static_cast<size_t>(r)].data<float>(), g_gpu.data<float>(),
                                              gathered_gpu.data() + at);
        CHECK(std::memcmp(gathered_cpu.data() + at, gathered_gpu.data() + at, bytes) == 0);
        CHECK(same_bits(m_gpu[static_cast<size_t>(r)], m_cpu[static_cast<size_t>(r)]));
      }
      std::vector<float> out_cpu(arena, 5.0f);
      Tensor out_gpu = on(dev, out_cpu);
      on_cpu[0].decode(cpu, gathered_cpu.data(), ranks, out_cpu.data());
      on_gpu[0].decode(gpu, gathered_gpu.data(), ranks, out_gpu.data<float>());
      CHECK(same_bits(out_gpu, out_cpu));
      int64_t moved = 0;
      for (float v : out_cpu) moved += v != 0.0f && v != 5.0f;
      CHECK(moved > arena / 2);  // the update is not trivially zero
    }
    // A malformed payload (rank 1's first index past its chunk) is refused, the device left as it was.
    std::vector<uint8_t> bad(gathered_gpu);
    const size_t indices = wire::kHeaderBytes + 4 * static_cast<size_t>(o.sign ? on_cpu[0].chunks() : on_cpu[0].kept());
    bad[bytes + indices] = 0xFF;
    if (wire::index_bytes(o.chunk) == 2) bad[bytes + indices + 1] = 0xFF;
    Tensor untouched = on(dev, std::vector<float>(arena, 5.0f));
    CHECK_THAT(qtrain::testing::error_of([&] { on_gpu[0].decode(gpu, bad.data(), ranks, untouched.data<float>()); }),
               Catch::Contains("rank 1") && Catch::Contains("chunk 0"));
    CHECK(same_bits(untouched, std::vector<float>(arena, 5.0f)));
  }
}
