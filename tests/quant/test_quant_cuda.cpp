// CPU/CUDA agreement (label cuda; skipped without a GPU): for every method, the CUDA encoder writes the
// same bytes as the CPU reference for the same input and random key, over several steps with error
// feedback (so the residuals must agree bit for bit too); decode and decode_add agree bit for bit; a
// malformed payload is rejected on the GPU without touching the output.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "framework/core/tensor.h"
#include "quant/det_sum.h"
#include "quant/minifloat.h"
#include "quant/nvfp4_wire.h"
#include "quant/wire.h"
#include "tests/quant/cuda_common_probe.h"
#include "tests/quant/quant_test_util.h"

using namespace qtrain;
using namespace qtrain::quant_test;

namespace {

Tensor to_cuda(const std::vector<float>& x) {
  Tensor h = Tensor::empty({static_cast<int64_t>(x.size())}, DType::f32);
  if (!x.empty()) std::memcpy(h.data<float>(), x.data(), x.size() * sizeof(float));
  return h.to(Device::cuda(0));
}

Tensor bytes_to_cuda(const std::vector<uint8_t>& p) {
  Tensor h = Tensor::empty({static_cast<int64_t>(p.size())}, DType::u8);
  if (!p.empty()) std::memcpy(h.data<uint8_t>(), p.data(), p.size());
  return h.to(Device::cuda(0));
}

// The quantizers run on the context's non-blocking stream, and Tensor::to copies on the legacy
// stream, which is not ordered after it: wait for the context first (a GPU showed the race).
std::vector<float> to_host(Context& gpu, const Tensor& t) {
  gpu.synchronize();
  Tensor h = t.to(Device::cpu());
  const float* p = h.numel() ? h.data<float>() : nullptr;
  return std::vector<float>(p, p + h.numel());
}

std::vector<uint8_t> bytes_to_host(Context& gpu, const Tensor& t, size_t n) {
  gpu.synchronize();
  Tensor h = t.to(Device::cpu());
  const uint8_t* p = h.numel() ? h.data<uint8_t>() : nullptr;
  return std::vector<uint8_t>(p, p + n);
}

// Names the first differing byte instead of printing payloads of megabytes.
void require_same_bytes(const std::vector<uint8_t>& cuda, const std::vector<uint8_t>& cpu) {
  REQUIRE(cuda.size() == cpu.size());
  const auto diff = std::mismatch(cuda.begin(), cuda.end(), cpu.begin());
  if (diff.first == cuda.end()) return;
  const auto at = diff.first - cuda.begin();
  const auto wrong = std::inner_product(cuda.begin(), cuda.end(), cpu.begin(), int64_t{0}, std::plus<>(),
                                        [](uint8_t a, uint8_t b) { return int64_t{a != b}; });
  FAIL_CHECK(wrong << " of " << cpu.size() << " payload bytes differ; first at byte " << at << " (cuda "
                   << int{*diff.first} << ", cpu " << int{*diff.second} << ")");
  REQUIRE(wrong == 0);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every method, with and without error feedback, over three steps of `shapes` (values, column length):
// the CUDA encoder writes the CPU's bytes and residuals, decode and decode_add the CPU's values.
// `shift` floats before the input and the decode's output, and 8 * shift bytes before the payload,
// move them off 16-byte alignment (shift 1: the kernels' scalar paths; 0: their float4 paths).
// Encodes x on the CPU and on the GPU from twin states (the same seed, rank and id): the same bytes
// and, with error feedback, the same residual. Returns the GPU's payload (device memory) for the decode
// checks that follow, with the CPU's bytes.
struct TwinPayloads {
  Tensor gpu;       // max_encoded_bytes, the payload first
  size_t size = 0;  // the payload's bytes
  std::vector<uint8_t> cpu;
};
TwinPayloads require_same_encode(const Quantizer& q, Context& cpu, Context& gpu, const std::vector<float>& x,
                                 int64_t column, QuantState& cs, QuantState& gs) {
  const auto n = static_cast<int64_t>(x.size());
  TwinPayloads out;
  out.cpu = encode(q, cpu, x, column, cs);
  const size_t cap = q.max_encoded_bytes(n, column);
  Tensor gx = to_cuda(x);
  out.gpu = Tensor::zeros({static_cast<int64_t>(cap)}, DType::u8, Device::cuda(0));
  out.size = q.encode(gpu, std::span<const float>(gx.data<float>(), static_cast<size_t>(n)), column, gs,
                      std::span<uint8_t>(out.gpu.data<uint8_t>(), cap));
  REQUIRE(out.size == out.cpu.size());
  require_same_bytes(bytes_to_host(gpu, out.gpu, out.size), out.cpu);
  if (q.error_feedback())
    REQUIRE(same_bits(to_host(gpu, gs.residual()),
                      std::vector<float>(cs.residual().data<float>(), cs.residual().data<float>() + n)));
  return out;
}

void check_encoders_match(const std::vector<std::pair<int64_t, int64_t>>& shapes, int64_t shift = 0) {
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  // Each shape's three steps of input and its decode_add accumulator, drawn once for every method (on
  // the 2^20 span, drawing them per method was a tenth of the emulated run).
  constexpr int kSteps = 3;
  std::vector<std::vector<std::vector<float>>> inputs;
  std::vector<std::vector<float>> accumulators;
  for (auto [n, column] : shapes) {
    auto& steps = inputs.emplace_back();
    for (int step = 0; step < kSteps; ++step)
      steps.push_back(step == 1 ? heavy_data(n, 50 + step) : normal_data(n, 50 + step));
    accumulators.push_back(normal_data(n, 9));
  }
  for (bool ef : {false, true}) {
    for (QuantSpec s : all_specs()) {
      if (ef && !method_info(s.method).error_feedback_allowed) continue;
      s.error_feedback = ef;
      auto q = make_quantizer(s);
      for (size_t shape = 0; shape < shapes.size(); ++shape) {
        const auto [n, column] = shapes[shape];
        CAPTURE(s.str(), n, column);
        QuantState cs(11, 2, 7), gs(11, 2, 7);
        for (int step = 0; step < kSteps; ++step) {
          cpu.set_step(static_cast<uint64_t>(step));
          gpu.set_step(static_cast<uint64_t>(step));
          const auto& x = inputs[shape][static_cast<size_t>(step)];
          const auto cp = encode(*q, cpu, x, column, cs);
          const size_t cap = q->max_encoded_bytes(n, column);
          const auto pad = static_cast<size_t>(shift);
          std::vector<float> shifted(pad, 7.0f);
          shifted.insert(shifted.end(), x.begin(), x.end());
          Tensor gx = to_cuda(shifted);
          Tensor gout = Tensor::zeros({static_cast<int64_t>(cap + 8 * pad)}, DType::u8, Device::cuda(0));
          uint8_t* payload = gout.data<uint8_t>() + 8 * pad;
          const size_t gbytes = q->encode(gpu, std::span<const float>(gx.data<float>() + pad, static_cast<size_t>(n)),
                                          column, gs, std::span<uint8_t>(payload, cap));
          REQUIRE(gbytes == cp.size());
          auto written = bytes_to_host(gpu, gout, 8 * pad + gbytes);
          REQUIRE(std::all_of(written.begin(), written.begin() + static_cast<std::ptrdiff_t>(8 * pad),
                              [](uint8_t b) { return b == 0; }));  // nothing before the payload
          require_same_bytes(
              std::vector<uint8_t>(written.begin() + static_cast<std::ptrdiff_t>(8 * pad), written.end()), cp);
          if (ef)
            REQUIRE(same_bits(to_host(gpu, gs.residual()),
                              std::vector<float>(cs.residual().data<float>(), cs.residual().data<float>() + n)));
          // Decode and decode_add of the same payload (the shifted output's first floats untouched).
          const auto cd = decode(*q, cpu, cp, n);
          Tensor gd = to_cuda(std::vector<float>(pad + static_cast<size_t>(n), 0.0f));
          q->decode(gpu, std::span<const uint8_t>(payload, gbytes), n,
                    std::span<float>(gd.data<float>() + pad, static_cast<size_t>(n)));
          std::vector<float> expect(pad, 0.0f);
          expect.insert(expect.end(), cd.begin(), cd.end());
          REQUIRE(same_bits(to_host(gpu, gd), expect));
          auto acc = accumulators[shape];
          std::vector<float> acc_shifted(pad, 5.0f);
          acc_shifted.insert(acc_shifted.end(), acc.begin(), acc.end());
          Tensor gacc = to_cuda(acc_shifted);
          q->decode_add(cpu, cp, n, acc);
          q->decode_add(gpu, std::span<const uint8_t>(payload, gbytes), n,
                        std::span<float>(gacc.data<float>() + pad, static_cast<size_t>(n)));
          std::vector<float> acc_expect(pad, 5.0f);
          acc_expect.insert(acc_expect.end(), acc.begin(), acc.end());
          REQUIRE(same_bits(to_host(gpu, gacc), acc_expect));
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("CUDA encoders write the CPU's bytes, decoders the CPU's values", "[quant][cuda]") {
  check_encoders_match({{0, 1}, {1, 1}, {1000, 40}, {4096, 64}, {30000, 3}, {70000, 7000}});
}

// The streaming kernels take float4 paths only for 16-byte aligned spans (quant/cuda_common.cuh); a
// span of a tensor may start anywhere, so the scalar paths must write the same bytes. Shift 1: input
// and output 4 bytes past 16-byte alignment, the payload 8 bytes past it.
TEST_CASE("CUDA encoders write the CPU's bytes on spans that are not 16-byte aligned", "[quant][cuda]") {
  check_encoders_match({{1000, 40}, {4099, 4099}}, 1);
}

// And aligned spans whose length is no multiple of a float4 or of a block (mx 32, nvfp4 16): the
// last values take the kernels' tail paths.
TEST_CASE("CUDA encoders write the CPU's bytes when n is no multiple of the vector width", "[quant][cuda]") {
  check_encoders_match({{4099, 4099}, {4102, 2051}, {8197, 8197}});
}

// Tagged [large]: most of this file's time under the emulator; its AddressSanitizer run leaves it out
// (tests/quant/CMakeLists.txt), the index-order and shuffled runs keep it.
TEST_CASE("CUDA encoders write the CPU's bytes on a span of 2^20 + 13 values", "[quant][cuda][large]") {
  check_encoders_match({{(1 << 20) + 13, (1 << 20) + 13}});
}

TEST_CASE("CUDA encoders match the CPU on spans too small to invert (levels / max overflows)", "[quant][cuda]") {
  // max|v| = 1.5e-38 is normal but 7 / it overflows: both paths must take inverse_scale's zero
  // reciprocal (int conversions of Inf and NaN differ between x86 and CUDA). Fresh states, so that
  // with error feedback v = g stays this small.
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 4096, column = 64;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[static_cast<size_t>(i)] = (i % 3 ? -1.5e-38f : 1.5e-38f) * static_cast<float>(i % 251) / 250;
  for (bool ef : {false, true}) {
    for (QuantSpec s : all_specs()) {
      if (ef && !method_info(s.method).error_feedback_allowed) continue;
      s.error_feedback = ef;
      CAPTURE(s.str());
      auto q = make_quantizer(s);
      QuantState cs(5, 1, 3), gs(5, 1, 3);
      require_same_encode(*q, cpu, gpu, x, column, cs, gs);
    }
  }
}

// Issue 41's rounding edges, where the exact decision differs from a float one: dettmers8 linear's
// levels next to every half level (and 0.49999997 * M / 127, level 0), and nvfp4 block maxima next to
// every E4M3 midpoint (times M / 448), one per block, after a block holding M (and the block).
TEST_CASE("CUDA encoders write the CPU's bytes at exact-rounding edges", "[quant][cuda]") {
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  const float m = 994.56f;
  std::vector<float> lin = {0.49999997f, 127.0f, m};
  std::vector<float> blocks(32, 0.0f);
  blocks[0] = m;
  blocks[16] = blocks[17] = 0.0021679688f;
  for (int k = 0; k < 127; ++k) {
    float a = std::nextafter(static_cast<float>((k + 0.5) * m / 127), 0.0f);
    for (int d = 0; d < 3; ++d, a = std::nextafter(a, m)) lin.push_back(a);
  }
  for (uint32_t c = 0; c < quant_detail::FloatE4M3::kMaxCode; ++c) {
    const double mid = (static_cast<double>(quant_detail::minifloat_abs_value<quant_detail::FloatE4M3>(c)) +
                        quant_detail::minifloat_abs_value<quant_detail::FloatE4M3>(c + 1)) /
                       2;
    float b = std::nextafter(static_cast<float>(mid * m / 448), 0.0f);
    for (int d = 0; d < 3; ++d, b = std::nextafter(b, m)) {
      blocks.push_back(b);
      blocks.resize(blocks.size() + 15, 0.0f);
    }
  }
  QuantSpec linear = QuantSpec::defaults(QuantMethod::dettmers8);
  linear.set("variant", "linear");
  for (const auto& [s, x] : {std::pair{linear, lin}, std::pair{QuantSpec::defaults(QuantMethod::nvfp4), blocks}}) {
    CAPTURE(s.str());
    auto q = make_quantizer(s);
    const auto n = static_cast<int64_t>(x.size());
    QuantState cs(5, 1, 3), gs(5, 1, 3);
    const std::vector<uint8_t> cp = require_same_encode(*q, cpu, gpu, x, 1, cs, gs).cpu;
    if (s.method == QuantMethod::dettmers8) REQUIRE(cp[32] == 0);  // the float estimate gave level 1
    if (s.method == QuantMethod::nvfp4) REQUIRE(cp[wire::nvfp4_layout(n).scales_offset + 1] == 0x01);  // not 0
  }
}

// topk's quantized values at their edges: every midpoint of the level grid (and one ulp either side:
// the ties go to the even level), ranges whose lo equals hi, zeros of both signs, the float range's
// ends (lo + q step must stay at most hi), subnormal values; ranges of 1, 3 entries and the whole span.
TEST_CASE("CUDA topk quantized values write the CPU's bytes at level midpoints and range edges", "[quant][cuda]") {
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  for (int bits : {2, 4, 8}) {
    const int top = (1 << (bits - 1)) - 1;
    std::vector<float> grid = {1.0f, static_cast<float>(1 + top)};  // lo = 1, hi = 1 + top: step 1
    for (int q = 0; q < top; ++q) {
      const float mid = static_cast<float>(q) + 1.5f;
      grid.insert(grid.end(), {mid, -std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)});
    }
    const std::vector<std::vector<float>> inputs = {grid,
                                                    {2.0f, -2.0f, 2.0f, 2.0f, -2.0f, 2.0f, 2.0f},
                                                    {0.0f, -0.0f, 0.0f, 2.0f, -3.0f, -0.0f, 1.0f},
                                                    {FLT_MAX, -FLT_MAX, 1e-45f, -1e-45f, 1.0f, -3e38f, 7.0f},
                                                    {1e-45f, 3e-45f, -1e-44f, 2e-44f, -1.2e-38f, 1e-40f, 3e-38f}};
    for (const auto& x : inputs) {
      for (int64_t block : {1, 3, 0}) {
        for (bool ef : {false, true}) {
          QuantSpec s = QuantSpec::defaults(QuantMethod::topk);
          s.set("fraction", 1.0);
          s.set("value_bits", bits);
          s.set("value_block", static_cast<double>(block));
          s.error_feedback = ef;
          CAPTURE(s.str(), x.size(), x[0]);
          auto q = make_quantizer(s);
          const auto n = static_cast<int64_t>(x.size());
          QuantState cs(5, 1, 3), gs(5, 1, 3);
          const TwinPayloads p = require_same_encode(*q, cpu, gpu, x, 1, cs, gs);
          Tensor gd = to_cuda(std::vector<float>(static_cast<size_t>(n), 9.0f));
          q->decode(gpu, std::span<const uint8_t>(p.gpu.data<uint8_t>(), p.size), n,
                    std::span<float>(gd.data<float>(), static_cast<size_t>(n)));
          REQUIRE(same_bits(to_host(gpu, gd), decode(*q, cpu, p.cpu, n)));
        }
      }
    }
  }
}

// topk's chunk-local selection on every kernel path (a thread per chunk up to 32 values, blocks of 64
// threads up to 256, of 256 above), with ties at the chunks' thresholds (magnitudes from a set of 5,
// either sign) and without, a short last chunk, and three steps of error feedback.
TEST_CASE("CUDA topk chunk writes the CPU's bytes and residuals on every kernel path and on ties", "[quant][cuda]") {
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  for (int64_t chunk : {2, 8, 32, 64, 256, 512, 4096}) {
    for (int bits : {32, 2}) {
      for (bool ties : {true, false}) {
        QuantSpec s = QuantSpec::defaults(QuantMethod::topk);
        s.set("chunk", static_cast<double>(chunk));
        s.set("fraction", 0.1);
        s.set("value_bits", bits);
        s.error_feedback = true;
        const int64_t n = 3 * chunk + chunk / 2 + 1;
        CAPTURE(s.str(), n, ties);
        auto q = make_quantizer(s);
        QuantState cs(5, 1, 3), gs(5, 1, 3);
        for (int step = 0; step < 3; ++step) {
          std::vector<float> x = normal_data(n, 20 + step);
          if (ties)
            for (int64_t i = 0; i < n; ++i)
              x[static_cast<size_t>(i)] = static_cast<float>((i * 7 + step) % 5 + 1) * (i % 3 == 0 ? -0.25f : 0.25f);
          const TwinPayloads p = require_same_encode(*q, cpu, gpu, x, 1, cs, gs);
          Tensor gd = to_cuda(std::vector<float>(static_cast<size_t>(n), 9.0f));
          q->decode(gpu, std::span<const uint8_t>(p.gpu.data<uint8_t>(), p.size), n,
                    std::span<float>(gd.data<float>(), static_cast<size_t>(n)));
          REQUIRE(same_bits(to_host(gpu, gd), decode(*q, cpu, p.cpu, n)));
        }
      }
    }
  }
}

TEST_CASE("CUDA encoders refuse sums beyond the float range as the CPU does", "[quant][cuda]") {
  // +-3e38: finite, but onebit's and adaptive's sums and qsgd's l2 norms overflow. Both paths throw
  // NonFiniteInputError; the other methods write the CPU's bytes.
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 2000, column = 20;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = i % 2 ? -3e38f : 3e38f;
  for (const QuantSpec& s : all_specs()) {
    CAPTURE(s.str());
    auto q = make_quantizer(s);
    const size_t cap = q->max_encoded_bytes(n, column);
    Tensor gx = to_cuda(x);
    Tensor gout = Tensor::zeros({static_cast<int64_t>(cap)}, DType::u8, Device::cuda(0));
    auto gpu_encode = [&] {
      QuantState gs(5, 1, 3);
      return q->encode(gpu, std::span<const float>(gx.data<float>(), static_cast<size_t>(n)), column, gs,
                       std::span<uint8_t>(gout.data<uint8_t>(), cap));
    };
    const bool sums = s.method == QuantMethod::onebit || s.method == QuantMethod::adaptive ||
                      (s.method == QuantMethod::qsgd && s.choice("norm") == "l2");
    QuantState cs(5, 1, 3);
    if (sums) {
      REQUIRE_THROWS_AS(encode(*q, cpu, x, column, cs), NonFiniteInputError);
      REQUIRE_THROWS_AS(gpu_encode(), NonFiniteInputError);
    } else {
      const auto cp = encode(*q, cpu, x, column, cs);
      const size_t gbytes = gpu_encode();
      REQUIRE(gbytes == cp.size());
      require_same_bytes(bytes_to_host(gpu, gout, gbytes), cp);
    }
  }
}

TEST_CASE("CUDA encoders refuse NaN and Inf with the CPU's message, wherever in a warp they stand", "[quant][cuda]") {
  // The CUDA paths flag non-finite input per warp (warp_or_u32 in quant/cuda_common.cuh) and per
  // group; a flag lost on any lane but lane 0 would still be caught later, as an overflowing mean or
  // scale, with another message. So the message must be the CPU's, for a value on lane 0 and on
  // others. Where the CPU encodes such input (the casts), the CUDA bytes must equal its bytes.
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 2000, column = 20;
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  for (const QuantSpec& s : all_specs()) {
    auto q = make_quantizer(s);
    const size_t cap = q->max_encoded_bytes(n, column);
    for (float bad : bad_values) {
      for (int64_t at : {int64_t{0}, int64_t{37}, int64_t{1031}, n - 1}) {  // lanes 0, 5, 7, 15
        CAPTURE(s.str(), bad, at);
        std::vector<float> x = normal_data(n, 3);
        x[static_cast<size_t>(at)] = bad;
        Tensor gx = to_cuda(x);
        Tensor gout = Tensor::zeros({static_cast<int64_t>(cap)}, DType::u8, Device::cuda(0));
        QuantState cs(5, 1, 3), gs(5, 1, 3);
        std::string cpu_error, gpu_error;
        std::vector<uint8_t> cp;
        try {
          cp = encode(*q, cpu, x, column, cs);
        } catch (const NonFiniteInputError& e) {
          cpu_error = e.what();
        }
        size_t gbytes = 0;
        try {
          gbytes = q->encode(gpu, std::span<const float>(gx.data<float>(), static_cast<size_t>(n)), column, gs,
                             std::span<uint8_t>(gout.data<uint8_t>(), cap));
        } catch (const NonFiniteInputError& e) {
          gpu_error = e.what();
        }
        REQUIRE(gpu_error == cpu_error);
        if (cpu_error.empty()) {
          REQUIRE(gbytes == cp.size());
          require_same_bytes(bytes_to_host(gpu, gout, gbytes), cp);
        }
      }
    }
  }
}

// codebook's edges, which the sweep's data (normal and heavy-tailed, never zero) does not reach: ties
// that fill quantile positions (exact zeros, a constant span), spans with fewer values than bins,
// subnormal values next to normal ones, and pools of every size around the sort's chunk of 2048 keys.
TEST_CASE("CUDA codebook writes the CPU's bytes on ties, tiny spans and every pool size", "[quant][cuda]") {
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  std::vector<std::pair<std::string, std::vector<float>>> cases;
  auto half_zero = normal_data(5000, 3);
  for (size_t i = 0; i < half_zero.size(); i += 2) half_zero[i] = 0.0f;
  cases.emplace_back("codebook", half_zero);
  cases.emplace_back("codebook:bits=4", half_zero);
  cases.emplace_back("codebook", std::vector<float>(3000, -1.25f));
  cases.emplace_back("codebook", normal_data(7, 4));
  cases.emplace_back("codebook:bits=4", normal_data(15, 5));
  std::vector<float> tiny = normal_data(1000, 6);
  for (size_t i = 0; i < tiny.size(); i += 3) tiny[i] *= 1e-39f;  // subnormal
  cases.emplace_back("codebook", tiny);
  for (int64_t n : {int64_t{2047}, int64_t{2048}, int64_t{2049}, int64_t{4097}, int64_t{9000}})
    cases.emplace_back("codebook:sample=" + std::to_string(n - 1), heavy_data(n, 7));
  for (const auto& [entry, x] : cases) {
    for (bool ef : {false, true}) {
      QuantSpec s = parse_method_entry(entry);
      s.error_feedback = ef;
      auto q = make_quantizer(s);
      const auto n = static_cast<int64_t>(x.size());
      CAPTURE(entry, n, ef);
      QuantState cs(5, 1, 3), gs(5, 1, 3);
      require_same_encode(*q, cpu, gpu, x, 1, cs, gs);
    }
  }
}

TEST_CASE("warp_fold_partials: every lane returns det_sum's fold of the chunk sums", "[quant][cuda]") {
  using quant_detail::chunk_sum;
  using quant_detail::kSumChunk;
  // One chunk sum, one group of them (the n2 == 1 branch, whose result lane 0 broadcasts), several.
  for (int64_t chunks : {int64_t{1}, int64_t{2}, int64_t{33}, kSumChunk, kSumChunk + 1, 5 * kSumChunk + 3}) {
    CAPTURE(chunks);
    std::vector<float> p = normal_data(chunks, 21);
    // The CPU's fold (quant/det_sum.h, det_sum_of after its level-1 sums).
    std::vector<float> level2;
    for (int64_t first = 0; first < chunks; first += kSumChunk)
      level2.push_back(
          chunk_sum([&](int64_t i) { return p[static_cast<size_t>(first + i)]; }, std::min(kSumChunk, chunks - first)));
    const float expected = chunks == 1          ? p[0]
                           : level2.size() == 1 ? level2[0]
                                                : chunk_sum([&](int64_t i) { return level2[static_cast<size_t>(i)]; },
                                                            static_cast<int64_t>(level2.size()));
    const std::vector<float> lanes = quant_test::warp_fold_partials_per_lane(p);
    for (size_t lane = 0; lane < lanes.size(); ++lane) {
      CAPTURE(lane);
      REQUIRE(std::memcmp(&lanes[lane], &expected, sizeof(float)) == 0);
    }
  }
}

TEST_CASE("CUDA decoders reject malformed payloads without writing", "[quant][cuda]") {
  Context cpu = Context::cpu(1, 1);
  Context gpu = Context::cuda(0, 1);
  for (const QuantSpec& s : all_specs()) {
    CAPTURE(s.str());
    auto q = make_quantizer(s);
    const int64_t n = 3200, column = 100;
    QuantState st(1, 0, 1);
    const auto good = encode(*q, cpu, normal_data(n, 4), column, st);
    std::vector<std::vector<uint8_t>> bad;
    bad.emplace_back(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2));  // truncated
    auto wrong = good;
    wrong[3] = 9;  // version
    bad.push_back(wrong);
    if (s.method == QuantMethod::topk) {
      uint32_t k, a;
      std::memcpy(&k, good.data() + 24, 4);
      std::memcpy(&a, good.data() + 4, 4);
      const uint32_t shift = (a >> 8) & 0xffu;  // chunk: C = 2^shift, local indices of shift bits
      const size_t index_bytes = shift == 0 ? 4 * static_cast<size_t>(k) : 4 * ((k * shift + 31) / 32);
      auto p = good;
      const uint32_t big = shift == 0 ? 5000 : 0xffffffffu;
      std::memcpy(p.data() + 32, &big, 4);  // index out of range (chunked: or repeated)
      std::vector<float> cpu_out(static_cast<size_t>(n));
      // Chunks of 2 keeping 1 take any local index: nothing to corrupt in the first word.
      if (shift == 0 || shift > 1) {
        REQUIRE_THROWS_AS(q->decode(cpu, p, n, cpu_out), InputError);
        bad.push_back(p);
      }
      if (shift != 0 && k * shift % 32 != 0) {
        p = good;
        p[32 + k * shift / 8] |= static_cast<uint8_t>(1u << (k * shift % 8));  // the first bit after the last index
        bad.push_back(p);
      }
      if (shift != 0 && (int64_t{1} << shift) < n) {
        p = good;
        const uint32_t more = a + (1u << 16);  // K + 1 entries per chunk: more than field b holds
        std::memcpy(p.data() + 4, &more, 4);
        bad.push_back(p);
      }
      if (s.integer("value_bits") != 32) {
        const uint32_t nan = 0x7fc00000u, above = 0x7f000000u;
        p = good;
        std::memcpy(p.data() + 32 + index_bytes, &nan, 4);  // lo of range 0
        bad.push_back(p);
        p = good;
        std::memcpy(p.data() + 32 + index_bytes, &above, 4);  // lo > hi
        bad.push_back(p);
      }
    }
    if (s.method == QuantMethod::adaptive) {
      auto p = good;
      p[32 + 12 * 32 + 4] = 0xfe;  // row 127 >= 100
      p[32 + 12 * 32 + 5] = 0x00;
      bad.push_back(p);
    }
    if (s.method == QuantMethod::codebook) {
      auto p = good;
      std::memcpy(p.data() + 32 + 4 * 2, p.data() + 32 + 4 * 9, 4);  // table entry 2 above entry 3
      bad.push_back(p);
    }
    if (s.method == QuantMethod::qsgd || s.method == QuantMethod::onebit || s.method == QuantMethod::codebook) {
      auto p = good;
      const uint32_t nan = 0x7fc00000u;
      std::memcpy(p.data() + 32, &nan, 4);  // scale / mean
      bad.push_back(p);
    }
    for (const auto& p : bad) {
      const auto sentinel = std::vector<float>(static_cast<size_t>(n), 3.0f);
      Tensor gp = bytes_to_cuda(p);
      Tensor out = to_cuda(sentinel);
      REQUIRE_THROWS_AS(q->decode(gpu, std::span<const uint8_t>(gp.data<uint8_t>(), p.size()), n,
                                  std::span<float>(out.data<float>(), static_cast<size_t>(n))),
                        InputError);
      REQUIRE(same_bits(to_host(gpu, out), sentinel));
    }
  }
}
