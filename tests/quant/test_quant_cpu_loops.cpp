// The hand-vectorized CPU loops (quant/cpu_loops.h) against their plain C++ references: the same
// bytes, residuals and decoded values, bit for bit, on random data, on the values where a code
// changes (every dettmers8 midpoint and lookup-bucket edge), at every alignment and tail length.
// In a build without AVX2 both paths are the reference and the test still runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/codebook_bins.h"
#include "quant/cpu_loops.h"
#include "quant/dettmers_table.h"
#include "quant/numerics.h"
#include "tests/quant/quant_test_util.h"

using namespace qtrain;
using namespace qtrain::quant_detail;
using namespace qtrain::quant_test;

namespace {

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// |v| / M on both sides of every midpoint and lookup-bucket edge, with both signs, times M.
std::vector<float> dettmers_edge_values(float m) {
  const DettmersTables& t = dettmers_tables();
  std::vector<uint32_t> a_bits;
  for (int i = 0; i + 1 < DettmersTables::kEntries; ++i)
    for (int d = -2; d <= 2; ++d) a_bits.push_back(t.mid_bits[i] + static_cast<uint32_t>(d));
  for (int32_t b = 0; b < t.lut_size; ++b) {
    const uint32_t lo = (t.lut_first + static_cast<uint32_t>(b)) << DettmersTables::kLutShift;
    a_bits.push_back(lo);
    a_bits.push_back(lo - 1);
  }
  for (int d = -2; d <= 2; ++d) {
    a_bits.push_back(t.zero_bits + static_cast<uint32_t>(d));
    a_bits.push_back(t.sat_bits + static_cast<uint32_t>(d));
  }
  std::vector<float> v;
  for (uint32_t a : a_bits) {
    v.push_back(bits_float(a) * m);
    v.push_back(-bits_float(a) * m);
  }
  v.push_back(0.0f);
  v.push_back(-0.0f);
  v.push_back(m);
  v.push_back(-m);
  return v;
}

int64_t packed_bytes_of(int64_t n, int bits) { return (n * bits + 7) / 8; }

}  // namespace

TEST_CASE("fast CPU loops: dettmers8 codes and residuals equal the reference", "[quant][cpu_loops]") {
  INFO("fast path vectorized: " << cpu_fast_path_is_simd());
  const float m = 3.25f;
  std::vector<float> x = dettmers_edge_values(m);
  for (float v : normal_data(5000, 3, 1.0)) x.push_back(v);
  for (float v : heavy_data(5000, 4, 0.5)) x.push_back(v < m && v > -m ? v : 0.5f);
  float d[256];
  const DettmersTables& t = dettmers_tables();
  for (int i = 0; i < DettmersTables::kEntries; ++i) d[i] = t.value[i] * m;
  d[DettmersTables::kZeroCode] = 0.0f;
  d[DettmersTables::kSatCode] = m;
  for (int i = 0; i < 128; ++i) d[i + 128] = -d[i];
  for (int64_t offset : {0, 1, 7}) {
    for (int64_t n :
         {int64_t{0}, int64_t{5}, int64_t{31}, int64_t{32}, int64_t{33}, static_cast<int64_t>(x.size()) - 7}) {
      CAPTURE(offset, n);
      for (bool ef : {false, true}) {
        std::vector<float> res_ref(static_cast<size_t>(n)), res_fast(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          res_ref[static_cast<size_t>(i)] = res_fast[static_cast<size_t>(i)] = 1e-3f * static_cast<float>(i % 7 - 3);
        std::vector<uint8_t> ref(static_cast<size_t>(n)), fast(static_cast<size_t>(n));
        dettmers8_tree_codes(CpuPath::reference, x.data() + offset, ef ? res_ref.data() : nullptr, ref.data(), n,
                             1.0f / m, d);
        dettmers8_tree_codes(CpuPath::fast, x.data() + offset, ef ? res_fast.data() : nullptr, fast.data(), n, 1.0f / m,
                             d);
        REQUIRE(same_bits(ref, fast));
        REQUIRE(same_bits(res_ref, res_fast));
      }
    }
  }
}

TEST_CASE("fast CPU loops: qsgd packing equals the reference", "[quant][cpu_loops]") {
  std::mt19937 rng(11);
  for (int bits : {2, 4, 8, 16}) {
    const int per = bits >= 8 ? 1 : 8 / bits;
    for (int64_t count : {0, 8, 64, 128, 200, 1024, 1032}) {
      CAPTURE(bits, count);
      REQUIRE(count % per == 0);
      std::vector<uint32_t> codes(static_cast<size_t>(count));
      // Codes of `bits` bits; now and then the tie mark, which packing drops.
      for (auto& c : codes) c = (rng() & ((1u << bits) - 1)) | ((rng() % 17 == 0) ? 0x80000000u : 0u);
      const size_t bytes = static_cast<size_t>(count * bits / 8);
      std::vector<uint8_t> ref(bytes + 8, 0xab), fast(bytes + 8, 0xab);  // the 8 extra bytes must stay
      qsgd_pack_codes(CpuPath::reference, bits, codes.data(), count, ref.data());
      qsgd_pack_codes(CpuPath::fast, bits, codes.data(), count, fast.data());
      REQUIRE(same_bits(ref, fast));
    }
  }
}

TEST_CASE("fast CPU loops: qsgd stage-1 codes packed straight to bytes equal the reference", "[quant][cpu_loops]") {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int bits : {4, 8}) {
    const int32_t levels = (1 << (bits - 1)) - 1;
    for (int64_t n : {64, 128, 1024}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = normal(rng);
      // Zeros of both signs, the scale itself (a = levels exactly), and values above it (the cap).
      x[0] = 0.0f;
      x[1] = -0.0f;
      x[2] = 3.0f;
      x[3] = -3.0f;
      x[4] = 7.5f;
      x[5] = -1e6f;
      const float inv = static_cast<float>(levels) / 3.0f;
      // The stage-1 cut h of each value, as the encoder computes it.
      auto cut = [&](float v) {
        const float a = std::fabs(v) * inv;
        const auto l = static_cast<int32_t>(a);
        return static_cast<int32_t>((a - static_cast<float>(l)) * 65536.0f);
      };
      std::vector<uint16_t> u(static_cast<size_t>(n));
      for (auto& r : u) r = static_cast<uint16_t>(rng());
      const size_t bytes = static_cast<size_t>(n * bits / 8);
      auto both = [&](bool expect_ok) {
        std::vector<uint8_t> ref(bytes + 8, 0xab), fast(bytes + 8, 0xab);  // the 8 extra bytes must stay
        const bool ok_ref = qsgd_stage1_packed(CpuPath::reference, bits, x.data(), n, inv, u.data(), ref.data());
        const bool ok_fast = qsgd_stage1_packed(CpuPath::fast, bits, x.data(), n, inv, u.data(), fast.data());
        REQUIRE(ok_ref == expect_ok);
        REQUIRE(ok_fast == expect_ok);
        if (expect_ok) REQUIRE(same_bits(ref, fast));
        REQUIRE(std::memcmp(ref.data() + bytes, fast.data() + bytes, 8) == 0);
      };
      CAPTURE(bits, n);
      // Uniforms one below and one above every cut decide the rounding both ways without a tie.
      for (int64_t i = 0; i < n; ++i) {
        const int32_t h = cut(x[static_cast<size_t>(i)]);
        if (u[static_cast<size_t>(i)] == h) u[static_cast<size_t>(i)] = static_cast<uint16_t>(h == 0 ? 1 : h - 1);
        if (i % 3 == 0 && h > 0) u[static_cast<size_t>(i)] = static_cast<uint16_t>(h - 1);
        if (i % 3 == 1 && h < 65535) u[static_cast<size_t>(i)] = static_cast<uint16_t>(h + 1);
      }
      both(true);
      // A tie anywhere, the last value included, is reported.
      for (int64_t i : {int64_t{7}, n - 1}) {
        const uint16_t saved = u[static_cast<size_t>(i)];
        u[static_cast<size_t>(i)] = static_cast<uint16_t>(cut(x[static_cast<size_t>(i)]));
        both(false);
        u[static_cast<size_t>(i)] = saved;
      }
    }
    // A bucket whose scale is so small that inv * 2^16 overflows (the fast loop's folded constant):
    // values of 1e-36 under inv = levels / 3e-36, zeros included.
    const int64_t n = 128;
    std::vector<float> tiny(static_cast<size_t>(n));
    for (auto& v : tiny) v = 1e-36f * normal(rng);
    tiny[0] = 0.0f;
    tiny[1] = -3e-36f;
    const float huge_inv = static_cast<float>(levels) / 3e-36f;
    REQUIRE(std::isinf(huge_inv * 65536.0f));
    std::vector<uint16_t> u(static_cast<size_t>(n));
    for (auto& r : u) r = static_cast<uint16_t>(rng());
    std::vector<uint8_t> ref(static_cast<size_t>(n * bits / 8)), fast(ref.size());
    const bool ok_ref = qsgd_stage1_packed(CpuPath::reference, bits, tiny.data(), n, huge_inv, u.data(), ref.data());
    const bool ok_fast = qsgd_stage1_packed(CpuPath::fast, bits, tiny.data(), n, huge_inv, u.data(), fast.data());
    REQUIRE(ok_fast == ok_ref);
    if (ok_ref) REQUIRE(same_bits(ref, fast));
  }
}

TEST_CASE("fast CPU loops: qsgd decoding equals the reference", "[quant][cpu_loops]") {
  std::mt19937 rng(12);
  std::vector<uint8_t> bytes(4096);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const float step = 0.37f;
  for (int bits : {2, 4, 8, 16}) {
    const int64_t codes = static_cast<int64_t>(bytes.size()) * 8 / bits;
    for (int64_t first : {0, 1, 3, 8, 13}) {
      for (int64_t count : {0, 1, 7, 8, 9, 63, 500}) {
        if (first + count > codes) continue;
        CAPTURE(bits, first, count);
        for (bool add : {false, true}) {
          std::vector<float> ref(static_cast<size_t>(count)), fast(static_cast<size_t>(count));
          for (int64_t i = 0; i < count; ++i)
            ref[static_cast<size_t>(i)] = fast[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i);
          qsgd_decode_codes(CpuPath::reference, bits, bytes.data(), first, count, step, ref.data(), add);
          qsgd_decode_codes(CpuPath::fast, bits, bytes.data(), first, count, step, fast.data(), add);
          REQUIRE(same_bits(ref, fast));
        }
      }
    }
  }
}

TEST_CASE("fast CPU loops: codebook's prefix-table bins equal the binary search", "[quant][cpu_loops][codebook]") {
  // Spread data (each prefix of 16 key bits holds at most a boundary or two), crowded data (many
  // boundaries within one prefix: the binary search's fallback), ties (runs of equal boundaries, the
  // tie rule), and sentinels at every value's reach (the largest values, in the last bin).
  std::mt19937 rng(17);
  std::vector<std::vector<float>> inputs = {normal_data(5000, 1), heavy_data(3001, 2)};
  std::vector<float> crowded(4000);
  for (auto& v : crowded) v = 1.0f + static_cast<float>(rng() % 1000) * 1e-6f;
  inputs.push_back(crowded);
  // Crowded without ties (4000 consecutive floats above 1: every boundary in one prefix), then the
  // same after spread values, so that some groups of eight take the vector loop and others do not.
  std::vector<float> dense(4000);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = bits_float(0x3f800000u + static_cast<uint32_t>(i * 7919 % 4000));
  inputs.push_back(dense);
  std::vector<float> mixed = normal_data(3000, 5);
  mixed.insert(mixed.end(), dense.begin(), dense.begin() + 1000);
  inputs.push_back(mixed);
  std::vector<float> ties = normal_data(4096, 3);
  for (size_t i = 0; i < ties.size(); i += 3) ties[i] = 0.0f;
  for (size_t i = 1; i < ties.size(); i += 7) ties[i] = -0.5f;
  inputs.push_back(ties);
  for (const auto& x : inputs) {
    for (int bits : {4, 8}) {
      for (bool ef : {false, true}) {
        const int bins = 1 << bits;
        const auto n = static_cast<int64_t>(x.size());
        CAPTURE(bits, ef, n);
        const std::vector<float> residual = normal_data(n, 4, 1e-3);
        // Boundaries from a pool of 997 of the values, as codebook.cpp takes them.
        std::vector<uint32_t> pool;
        for (int64_t j = 0; j < 997; ++j)
          pool.push_back(
              codebook_key(float_bits(ef ? x[static_cast<size_t>(j * 3 % n)] + residual[static_cast<size_t>(j * 3 % n)]
                                         : x[static_cast<size_t>(j * 3 % n)])));
        std::sort(pool.begin(), pool.end());
        std::vector<uint32_t> t(static_cast<size_t>(bins + 1), 0xffffffffu);
        for (int j = 1; j < bins; ++j)
          t[static_cast<size_t>(j - 1)] = pool[static_cast<size_t>(codebook_boundary_index(j, 997, bins))];
        std::vector<uint8_t> run(static_cast<size_t>(bins));
        for (int b = 0; b < bins; ++b) run[static_cast<size_t>(b)] = codebook_run_start(t.data(), b);
        const int shift = codebook_shift(float_bits(1e3f), n);
        std::vector<uint16_t> table(65536);
        auto bin = [&](CpuPath path, std::vector<uint8_t>& codes, std::vector<int64_t>& sums,
                       std::vector<int64_t>& counts) {
          codes.assign(static_cast<size_t>(packed_bytes_of(n, bits)), 0xee);
          sums.assign(static_cast<size_t>(bins), 7);
          counts.assign(static_cast<size_t>(bins), 7);
          codebook_bin_values(path, bits, x.data(), ef ? residual.data() : nullptr, n, t.data(), run.data(), shift,
                              table.data(), codes.data(), sums.data(), counts.data());
        };
        std::vector<uint8_t> ref_codes, fast_codes;
        std::vector<int64_t> ref_sums, fast_sums, ref_counts, fast_counts;
        bin(CpuPath::reference, ref_codes, ref_sums, ref_counts);
        bin(CpuPath::fast, fast_codes, fast_sums, fast_counts);
        REQUIRE(ref_codes == fast_codes);
        REQUIRE(ref_sums == fast_sums);
        REQUIRE(ref_counts == fast_counts);
        // And the reference is the definition: the count of boundaries at or below, then the tie rule.
        for (int64_t i = 0; i < n; ++i) {
          const float v = ef ? x[static_cast<size_t>(i)] + residual[static_cast<size_t>(i)] : x[static_cast<size_t>(i)];
          const uint32_t key = codebook_key(float_bits(v));
          auto pos = static_cast<uint32_t>(std::upper_bound(t.begin(), t.begin() + bins - 1, key) - t.begin());
          if (pos >= 2 && t[pos - 1] == key && t[pos - 2] == key)
            while (pos > 1 && t[pos - 2] == key) --pos;
          const int64_t half = (n + 1) / 2;
          const uint32_t code = bits == 8
                                    ? ref_codes[static_cast<size_t>(i)]
                                    : (i < half ? ref_codes[static_cast<size_t>(i)] & 0xfu
                                                : static_cast<uint32_t>(ref_codes[static_cast<size_t>(i - half)] >> 4));
          REQUIRE(code == pos);
        }
      }
    }
  }
}
