// The quantization config section: method choice and parameters validated with located errors that
// list the allowed values, min_numel, per-layer overrides by name or type (first match wins,
// inheritance of the section's parameters).
#include <catch2/catch.hpp>

#include "quant/policy.h"

using namespace qtrain;

namespace {
QuantizationConfig parse(const std::string& text) {
  auto source = std::make_shared<ConfigSource>();
  source->file = "q.yaml";
  ConfigNode root(YAML::Load(text), "", source);
  ConfigNode section = root.child("quantization");
  return QuantizationConfig::parse(section);
}
}  // namespace

TEST_CASE("an absent section means fp32", "[quant][config]") {
  const auto c = parse("other: 1\n");
  REQUIRE(c.base.method == QuantMethod::fp32);
  REQUIRE(c.resolve("dense1", "dense", 1 << 20).method == QuantMethod::fp32);
}

TEST_CASE("methods and their parameters", "[quant][config]") {
  auto c = parse("quantization: {method: qsgd, bits: 8, norm: l2}\n");
  REQUIRE(c.base.method == QuantMethod::qsgd);
  REQUIRE(c.base.integer("bits") == 8);
  REQUIRE(c.base.choice("norm") == "l2");
  REQUIRE(make_quantizer(c.base)->spec().integer("bucket") == 512);
  c = parse("quantization: {method: dettmers8, variant: linear, error_feedback: true}\n");
  REQUIRE(c.base.choice("variant") == "linear");
  REQUIRE(c.base.error_feedback);
  c = parse("quantization: {method: dettmers8, search: clusternet}\n");
  REQUIRE(c.base.choice("search") == "clusternet");
  REQUIRE(c.base.str() == "dettmers8(variant=dynamic_tree, search=clusternet)");
  REQUIRE(parse("quantization: {method: dettmers8}\n").base.str() == "dettmers8(variant=dynamic_tree)");
  c = parse("quantization: {method: onebit, mode: bucket, bucket: 128}\n");
  REQUIRE(c.base.choice("mode") == "bucket");
  REQUIRE(c.base.integer("bucket") == 128);
  REQUIRE(c.base.error_feedback);
  c = parse("quantization: {method: adaptive, proportion: 0.01, sample: 1024}\n");
  REQUIRE(c.base.number("proportion") == 0.01);
  REQUIRE(c.base.integer("sample") == 1024);
  c = parse("quantization: {method: topk, fraction: 0.001}\n");
  REQUIRE(c.base.number("fraction") == 0.001);
  REQUIRE(c.base.str() == "topk(fraction=0.001)");
  REQUIRE(c.base.integer("value_bits") == 32);
  c = parse("quantization: {method: topk, fraction: 0.02, value_bits: 2}\n");
  REQUIRE(c.base.integer("value_bits") == 2);
  REQUIRE(c.base.str() == "topk(fraction=0.02, value_bits=2, value_block=128)");
  c = parse("quantization: {method: topk, value_bits: 8, value_block: 0}\n");
  REQUIRE(c.base.str() == "topk(fraction=0.01, value_bits=8, value_block=0)");
  c = parse("quantization: {method: topk, fraction: 0.02, value_bits: 2, chunk: 4096}\n");
  REQUIRE(c.base.integer("chunk") == 4096);
  REQUIRE(c.base.str() == "topk(fraction=0.02, value_bits=2, value_block=128, chunk=4096)");
  REQUIRE(parse_method_entry("topk:fraction=0.02:value_bits=2:chunk=4096").integer("chunk") == 4096);
}

TEST_CASE("invalid values are errors that list what is allowed", "[quant][config]") {
  REQUIRE_THROWS_WITH(
      parse("quantization: {method: qsgd, bits: 3}\n"),
      Catch::Contains("q.yaml:1:") && Catch::Contains("quantization.bits must be one of 2, 4, 8, 16, got '3'"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: qsdg}\n"),
                      Catch::Contains("quantization.method must be one of fp32, fp16, bf16, dettmers8, onebit, qsgd, "
                                      "adaptive, topk, ") &&
                          Catch::Contains("terngrad, signsgd, efsign, randomk") && Catch::Contains(", powersgd") &&
                          Catch::Contains("got 'qsdg'"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: terngrad, clip: -1}\n"),
                      Catch::Contains("quantization.clip must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: signsgd, momentum: 1}\n"),
                      Catch::Contains("momentum must be below 1"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: signsgd, error_feedback: true}\n"),
                      Catch::Contains("error_feedback does not apply"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: randomk, fraction: 0}\n"),
                      Catch::Contains("quantization.fraction must be > 0, got 0"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: dettmers8, variant: tree}\n"),
                      Catch::Contains("must be one of dynamic_tree, linear"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: dettmers8, search: bisect}\n"),
                      Catch::Contains("quantization.search must be one of nearest, clusternet, got 'bisect'"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: dettmers8, variant: linear, search: clusternet}\n"),
                      Catch::Contains("quantization.search") && Catch::Contains("dynamic_tree only"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: qsgd, norm: l1}\n"), Catch::Contains("must be one of max, l2"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: adaptive, proportion: 0}\n"),
                      Catch::Contains("quantization.proportion must be > 0"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: adaptive, sample: 10}\n"), Catch::Contains("sample must be 0"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: qsgd, bucket: 0}\n"), Catch::Contains("bucket must be >= 1"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: fp32, error_feedback: true}\n"),
                      Catch::Contains("does not apply to fp32"));
  // Keys of another method are unknown here, with the known keys listed.
  REQUIRE_THROWS_WITH(parse("quantization: {method: dettmers8, bits: 4}\n"),
                      Catch::Contains("unknown key 'quantization.bits'") && Catch::Contains("variant"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: onebit, bucket: 64}\n"), Catch::Contains("mode: bucket only"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: topk, value_bits: 3}\n"),
                      Catch::Contains("quantization.value_bits must be one of 2, 4, 8, 32, got '3'"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: topk, value_block: 64}\n"),
                      Catch::Contains("quantization.value_block") && Catch::Contains("value_bits: 2, 4 or 8 only"));
  REQUIRE_THROWS_WITH(parse("quantization: {method: topk, value_bits: 2, value_block: -1}\n"),
                      Catch::Contains("quantization.value_block must be >= 0"));
  for (const char* chunk : {"1", "3", "4095", "6000"})
    REQUIRE_THROWS_WITH(parse(std::string("quantization: {method: topk, chunk: ") + chunk + "}\n"),
                        Catch::Contains("quantization.chunk must be 0 (global selection) or a power of two from 2 "
                                        "to 65536, got " +
                                        std::string(chunk)));
  REQUIRE_THROWS_WITH(parse("quantization: {method: topk, chunk: 131072}\n"),
                      Catch::Contains("quantization.chunk must be <= 65536"));
}

TEST_CASE("min_numel keeps small tensors in fp32", "[quant][config]") {
  const auto c = parse("quantization: {method: dettmers8}\n");
  REQUIRE(c.min_numel == 10000);
  REQUIRE(c.resolve("dense1", "dense", 9999).method == QuantMethod::fp32);
  REQUIRE(c.resolve("dense1", "dense", 10000).method == QuantMethod::dettmers8);
  const auto d = parse("quantization: {method: dettmers8, min_numel: 0}\n");
  REQUIRE(d.resolve("bias", "dense", 1).method == QuantMethod::dettmers8);
}

TEST_CASE("overrides by layer type and name, first match wins", "[quant][config]") {
  const auto c = parse(R"(
quantization:
  method: qsgd
  bits: 4
  overrides:
    - {match: {name: dense3}, method: fp16}
    - {match: {type: conv*}, bits: 8}
    - {match: {type: dense}, bits: 2, bucket: 64, min_numel: 100}
    - {match: {name: "*"}, method: onebit}
)");
  REQUIRE(c.overrides.size() == 4);
  REQUIRE(c.resolve("dense3", "dense", 1 << 20).method == QuantMethod::fp16);
  const QuantSpec conv = c.resolve("conv1", "conv2d", 1 << 20);
  REQUIRE(conv.method == QuantMethod::qsgd);
  REQUIRE(conv.integer("bits") == 8);
  REQUIRE(make_quantizer(conv)->spec().integer("bucket") == 512);
  const QuantSpec dense = c.resolve("dense1", "dense", 5000);
  REQUIRE(dense.integer("bits") == 2);
  REQUIRE(dense.integer("bucket") == 64);
  REQUIRE(c.resolve("dense1", "dense", 50).method == QuantMethod::fp32);
  REQUIRE(c.resolve("lstm1", "lstm", 1 << 20).method == QuantMethod::onebit);
}

TEST_CASE("override errors are located", "[quant][config]") {
  REQUIRE_THROWS_WITH(parse("quantization:\n  method: qsgd\n  overrides:\n    - {bits: 8}\n"),
                      Catch::Contains("quantization.overrides.0.match needs `name:`"));
  REQUIRE_THROWS_WITH(parse("quantization:\n  method: qsgd\n  overrides:\n    - {match: {kind: conv}, bits: 8}\n"),
                      Catch::Contains("unknown key 'quantization.overrides.0.match.kind'"));
  REQUIRE_THROWS_WITH(parse("quantization:\n  method: qsgd\n  overrides:\n    - {match: {type: conv}, bits: 5}\n"),
                      Catch::Contains("q.yaml:4:") && Catch::Contains("quantization.overrides.0.bits must be one of"));
}
