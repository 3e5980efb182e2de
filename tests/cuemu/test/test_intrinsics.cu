// Device conversions and intrinsics with CUDA's documented results, where x86 differs.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

TEST_CASE("float to integer conversions saturate and map NaN to 0, as cvt does") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(__float2int_rn(3e9f) == 2147483647);
  CHECK(__float2int_rz(-3e9f) == -2147483647 - 1);
  CHECK(__float2int_rn(nan) == 0);
  CHECK(__float2int_rn(inf) == 2147483647);
  CHECK(__float2int_rn(2.5f) == 2);  // ties to even
  CHECK(__float2int_rn(3.5f) == 4);
  CHECK(__float2int_rd(-0.5f) == -1);
  CHECK(__float2int_ru(0.25f) == 1);
  CHECK(__float2uint_rn(-5.0f) == 0u);
  CHECK(__float2uint_rz(5e9f) == 4294967295u);
  CHECK(__float2uint_rn(nan) == 0u);
  CHECK(__float2ll_rz(1e30f) == std::numeric_limits<long long>::max());
  CHECK(__double2int_rz(-1e300) == std::numeric_limits<int>::min());
}

TEST_CASE("fast-math intrinsics: documented special cases, and close to the exact function") {
  CHECK(__fdividef(1.0f, 1e38f) == 0.0f);  // 2^126 < |y| < 2^128 gives 0
  CHECK(__fdividef(6.0f, 3.0f) == 2.0f);
  for (float x : {-10.0f, -1.0f, 0.0f, 0.5f, 3.0f, 20.0f}) {
    CHECK(std::fabs(__expf(x) - std::exp(x)) <= 4e-6f * std::exp(x));
    if (x > 0) CHECK(std::fabs(__logf(x) - std::log(x)) <= 1e-6f + 1e-6f * std::fabs(std::log(x)));
  }
  CHECK(rsqrtf(4.0f) == 0.5f);
  CHECK(__saturatef(1.5f) == 1.0f);
  CHECK(__saturatef(std::numeric_limits<float>::quiet_NaN()) == 0.0f);
}

TEST_CASE("bit intrinsics") {
  CHECK(__popc(0xF0F0u) == 8);
  CHECK(__popcll(~0ull) == 64);
  CHECK(__clz(1) == 31);
  CHECK(__clz(0) == 32);
  CHECK(__ffs(8) == 4);
  CHECK(__brev(1u) == 0x80000000u);
  CHECK(__brev(0x12345678u) == 0x1E6A2C48u);
  CHECK(__float_as_uint(1.0f) == 0x3F800000u);
  CHECK(__uint_as_float(0x40000000u) == 2.0f);
}
