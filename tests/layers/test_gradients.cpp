// Float64 central-difference gradient checks of every layer and loss on the CPU reference path
// (tests/support/gradcheck.h): dx and every parameter gradient, in training mode. The CUDA paths are
// held to these through the CPU/CUDA parity tests.
#include <catch2/catch.hpp>

#include "layers/activation.h"
#include "layers/dense.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/softmax_cross_entropy.h"
#include "tests/support/gradcheck.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

GradCheckResult check(Layer& layer, const Shape& input, int64_t batch, uint64_t seed, GradCheckOptions opt = {}) {
  Context ctx = Context::cpu(7, 1);
  ctx.set_step(3);
  const Shape out = layer.setup(input);
  BoundParams bound = bind_random_params(layer, seed);
  Shape xs{batch};
  xs.insert(xs.end(), input.begin(), input.end());
  const Tensor x = random_tensor(xs, seed + 1, -2.0, 2.0);
  return check_layer_gradients(layer, ctx, x, out, opt);
}

void require_ok(const GradCheckResult& r) {
  INFO(r.failures);
  INFO("checked " << r.checked << ", skipped " << r.skipped << ", max error " << r.max_error);
  REQUIRE(r.ok());
}

}  // namespace

TEST_CASE("dense gradients, with bias", "[layers][gradcheck]") {
  Dense layer(5, true);
  const GradCheckResult r = check(layer, {7}, 4, 11);
  require_ok(r);
  REQUIRE(r.checked == 4 * 7 + 5 * 7 + 5);
}

TEST_CASE("dense gradients, without bias", "[layers][gradcheck]") {
  Dense layer(3, false);
  const GradCheckResult r = check(layer, {6}, 5, 12);
  require_ok(r);
  REQUIRE(r.checked == 5 * 6 + 3 * 6);
}

TEST_CASE("dense gradients, batch of one", "[layers][gradcheck]") {
  Dense layer(4, true);
  require_ok(check(layer, {3}, 1, 13));
}

TEST_CASE("flatten gradients", "[layers][gradcheck]") {
  Flatten layer;
  const GradCheckResult r = check(layer, {2, 3, 2}, 3, 14);
  require_ok(r);
  REQUIRE(r.checked == 3 * 12);
}

TEST_CASE("activation gradients", "[layers][gradcheck]") {
  SECTION("relu, skipping the kink at 0") {
    Activation layer(ActivationKind::relu);
    GradCheckOptions opt;
    opt.has_kink = true;
    opt.kink = 0.0;
    opt.kink_range = opt.step;
    const GradCheckResult r = check(layer, {4, 5}, 3, 15, opt);
    require_ok(r);
    REQUIRE(r.checked + r.skipped == 60);
  }
  SECTION("tanh") {
    Activation layer(ActivationKind::tanh);
    require_ok(check(layer, {9}, 4, 16));
  }
  SECTION("sigmoid") {
    Activation layer(ActivationKind::sigmoid);
    require_ok(check(layer, {9}, 4, 17));
  }
}

TEST_CASE("dropout gradients in training mode at a fixed step", "[layers][gradcheck]") {
  for (double p : {0.0, 0.3, 0.75}) {
    Dropout layer(p);
    layer.set_identity("drop", 2);
    INFO("p = " << p);
    const GradCheckResult r = check(layer, {37}, 3, 18);
    require_ok(r);
  }
}

TEST_CASE("softmax cross-entropy gradients", "[layers][gradcheck]") {
  Context ctx = Context::cpu(7, 1);
  SoftmaxCrossEntropy loss;
  const Tensor logits = random_tensor({6, 5}, 19, -3.0, 3.0);
  Tensor labels = Tensor::empty({6}, DType::i32);
  for (int i = 0; i < 6; ++i) labels.data<int32_t>()[i] = (i * 3) % 5;
  require_ok(check_loss_gradients(loss, ctx, logits, labels));
}

TEST_CASE("a wrong gradient is caught", "[layers][gradcheck]") {
  // The checker itself: a layer whose backward is off by a factor must fail.
  struct Wrong : Activation {
    Wrong() : Activation(ActivationKind::tanh) {}
    void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
      Activation::backward_cpu(ctx, x, y, dy, dx);
      dx.data<double>()[1] *= 1.001;
    }
  } layer;
  const GradCheckResult r = check(layer, {4}, 2, 20);
  REQUIRE(r.failed == 1);
}
