// Tensor: shapes, views sharing storage, copies, dtype checks.
#include <catch2/catch.hpp>

#include "framework/core/tensor.h"

using namespace qtrain;

TEST_CASE("tensor views share storage and check bounds", "[tensor]") {
  Tensor t = Tensor::zeros({4, 3}, DType::f32);
  REQUIRE(t.numel() == 12);
  REQUIRE(t.nbytes() == 48);
  Tensor row = t.view(3, {3});
  row.data<float>()[1] = 5.0f;
  REQUIRE(t.data<float>()[4] == 5.0f);
  REQUIRE(t.narrow_rows(2).shape() == Shape{2, 3});
  REQUIRE_THROWS_AS(t.view(10, {3}), Error);
  REQUIRE_THROWS_AS(t.data<double>(), Error);
  REQUIRE(t.dim(-1) == 3);
}

TEST_CASE("tensor copies are deep", "[tensor]") {
  Tensor a = Tensor::empty({5}, DType::f64);
  a.fill_(2.5);
  Tensor b = a.clone();
  a.fill_(1.0);
  REQUIRE(b.data<double>()[4] == 2.5);
  Tensor c = Tensor::empty({5}, DType::f64);
  c.copy_from(b);
  REQUIRE(c.data<double>()[0] == 2.5);
  REQUIRE_THROWS_AS(c.copy_from(Tensor::empty({4}, DType::f64)), Error);
}

TEST_CASE("CUDA tensors without a GPU are a clear error", "[tensor]") {
  if (cuda_available()) return;  // covered by the cuda label on GPU machines
  REQUIRE_THROWS_WITH(Tensor::empty({4}, DType::f32, Device::cuda(0)), Catch::Contains("CUDA"));
}
