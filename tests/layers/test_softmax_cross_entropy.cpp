// softmax_cross_entropy: values against a direct formula, numerical stability for large logits,
// accuracy with ties, the gradient's row sums, and label errors. Its gradient check is in
// test_gradients.cpp with the layers'.
#include <catch2/catch.hpp>

#include <cmath>

#include "layers/softmax_cross_entropy.h"
#include "tests/support/gradcheck.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

Tensor labels_of(std::initializer_list<int32_t> values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::i32);
  int64_t i = 0;
  for (int32_t v : values) t.data<int32_t>()[i++] = v;
  return t;
}

}  // namespace

TEST_CASE("softmax cross-entropy matches the direct formula", "[layers][loss]") {
  Context ctx = Context::cpu(1, 1);
  SoftmaxCrossEntropy loss;
  const Tensor z = random_tensor({4, 6}, 3, -2, 2);
  const Tensor labels = labels_of({0, 5, 2, 2});
  Tensor dz = Tensor::empty({4, 6}, DType::f64);
  const LossStats s = loss.compute(ctx, z, labels, &dz);
  double expected = 0;
  int64_t correct = 0;
  for (int r = 0; r < 4; ++r) {
    double sum = 0;
    int best = 0;
    for (int c = 0; c < 6; ++c) {
      sum += std::exp(z.data<double>()[r * 6 + c]);
      if (z.data<double>()[r * 6 + c] > z.data<double>()[r * 6 + best]) best = c;
    }
    const int label = labels.data<int32_t>()[r];
    expected += std::log(sum) - z.data<double>()[r * 6 + label];
    correct += best == label;
    double row_sum = 0;
    for (int c = 0; c < 6; ++c) {
      const double softmax = std::exp(z.data<double>()[r * 6 + c]) / sum;
      REQUIRE(dz.data<double>()[r * 6 + c] == Approx((softmax - (c == label)) / 4).margin(1e-15));
      row_sum += dz.data<double>()[r * 6 + c];
    }
    REQUIRE(row_sum == Approx(0).margin(1e-15));
  }
  REQUIRE(s.loss_sum == Approx(expected).epsilon(1e-12));
  REQUIRE(s.correct == correct);
  REQUIRE(s.count == 4);
}

TEST_CASE("softmax cross-entropy is stable for large logits", "[layers][loss]") {
  Context ctx = Context::cpu(1, 1);
  SoftmaxCrossEntropy loss;
  Tensor z = Tensor::empty({2, 3}, DType::f32);
  const float v[6] = {1000, 0, -1000, -1e4f, -1e4f + 2, -1e4f};
  std::copy(v, v + 6, z.data<float>());
  Tensor dz = Tensor::empty({2, 3}, DType::f32);
  const LossStats s = loss.compute(ctx, z, labels_of({0, 0}), &dz);
  // Row 0: the label's logit dominates, loss = log(1 + e^-1000 + e^-2000) = 0 in float.
  // Row 1: relative to the max (-9998), loss = log(e^-2 + 1 + e^-2) - (-2).
  const double row1 = std::log(2 * std::exp(-2.0) + 1) + 2;
  REQUIRE(std::isfinite(s.loss_sum));
  REQUIRE(s.loss_sum == Approx(row1).epsilon(1e-5));
  REQUIRE(s.correct == 1);
  for (int i = 0; i < 6; ++i) REQUIRE(std::isfinite(dz.data<float>()[i]));
}

TEST_CASE("accuracy counts the first arg-max", "[layers][loss]") {
  Context ctx = Context::cpu(1, 1);
  SoftmaxCrossEntropy loss;
  Tensor z = Tensor::zeros({2, 3}, DType::f64);  // all tied: class 0 is the prediction
  REQUIRE(loss.compute(ctx, z, labels_of({0, 1}), nullptr).correct == 1);
}

TEST_CASE("labels outside [0, C) are errors", "[layers][loss]") {
  Context ctx = Context::cpu(1, 1);
  SoftmaxCrossEntropy loss;
  const Tensor z = Tensor::zeros({3, 4}, DType::f32);
  REQUIRE_THROWS_WITH(loss.compute(ctx, z, labels_of({0, 4, 1}), nullptr),
                      Catch::Contains("label 4 of sample 1 is outside [0, 4)"));
  REQUIRE_THROWS_WITH(loss.compute(ctx, z, labels_of({0, 1, -1}), nullptr),
                      Catch::Contains("label -1 of sample 2 is outside [0, 4)"));
  REQUIRE_THROWS_AS(loss.compute(ctx, z, labels_of({9, 0, 0}), nullptr), InputError);
  REQUIRE_THROWS_WITH(loss.compute(ctx, z, labels_of({0, 1}), nullptr), Catch::Contains("labels must be 3 i32 values"));
}
