// Philox4x32-10 against the Random123 known-answer vectors, and the cuRAND float mapping.
#include <catch2/catch.hpp>

#include "framework/core/philox.h"

using namespace qtrain;

TEST_CASE("philox4x32-10 matches the Random123 known answers", "[philox]") {
  PhiloxBlock a = philox4x32_10(0, 0, 0, 0, {0, 0});
  REQUIRE(a.v[0] == 0x6627e8d5u);
  REQUIRE(a.v[1] == 0xe169c58du);
  REQUIRE(a.v[2] == 0xbc57ac4cu);
  REQUIRE(a.v[3] == 0x9b00dbd8u);
  PhiloxBlock b = philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, {0xffffffffu, 0xffffffffu});
  REQUIRE(b.v[0] == 0x408f276du);
  REQUIRE(b.v[1] == 0x41c83b0eu);
  REQUIRE(b.v[2] == 0xa20bc7c6u);
  REQUIRE(b.v[3] == 0x6d5451fdu);
  PhiloxBlock c = philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, {0xa4093822u, 0x299f31d0u});
  REQUIRE(c.v[0] == 0xd16cfe09u);
  REQUIRE(c.v[1] == 0x94fdccebu);
  REQUIRE(c.v[2] == 0x5001e420u);
  REQUIRE(c.v[3] == 0x24126ea1u);
}

TEST_CASE("uniform_from_bits maps into (0, 1] like curand_uniform", "[philox]") {
  REQUIRE(uniform_from_bits(0) > 0.0f);
  REQUIRE(uniform_from_bits(0xffffffffu) <= 1.0f);
  REQUIRE(uniform_from_bits(0x80000000u) == Approx(0.5f));
}

TEST_CASE("derived keys differ per identifier", "[philox]") {
  PhiloxKey k1 = derive_philox_key(1, 2, 3);
  PhiloxKey k2 = derive_philox_key(1, 2, 4);
  PhiloxKey k3 = derive_philox_key(2, 2, 3);
  REQUIRE((k1.k0 != k2.k0 || k1.k1 != k2.k1));
  REQUIRE((k1.k0 != k3.k0 || k1.k1 != k3.k1));
}
