// Optimizers against hand-computed values: the first three steps of SGD (plain, momentum, dampening,
// Nesterov, weight decay), RMSprop (eps, centered + momentum, weight decay), Adam (bias correction,
// weight decay, AMSGrad) and Adagrad (accumulated squares, lr_decay, initial accumulator, weight decay) on a 3-element
// arena, in f32 and f64; named state and restoring it; the config parser's defaults and errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
#include "tests/support/config_text.h"

using namespace qtrain;
using qtrain::testing::config_from_text;

namespace {

using Values = std::vector<double>;

template <typename T>
Tensor arena(const Values& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, dtype_of<T>());
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = static_cast<T>(v[i]);
  return t;
}

template <typename T>
Values values(const Tensor& t) {
  Values out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<double>(t.data<T>()[i]));
  return out;
}

// f64 runs the same arithmetic as the hand computation up to rounding (1e-12); f32 rounds each of the
// ~10 operations per step to 6e-8 relative, so three steps stay well inside 2e-6 of values near 1.
template <typename T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-12;
}

template <typename T>
void require_close(const Values& actual, const Values& expected) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("element " << i << ": got " << actual[i] << ", expected " << expected[i]);
    REQUIRE(std::abs(actual[i] - expected[i]) <= tolerance<T>() * std::max(1.0, std::abs(expected[i])));
  }
}

// Runs one step per entry of `grads` from `p0` and checks the parameters after each against `expected`.
template <typename T>
void run_steps(Optimizer& opt, const Values& p0, const std::vector<Values>& grads, const std::vector<Values>& expected,
               double lr) {
  Context ctx = Context::cpu(1, 1);
  Tensor p = arena<T>(p0);
  opt.init(p.numel(), dtype_of<T>(), Device::cpu());
  for (size_t k = 0; k < grads.size(); ++k) {
    INFO("step " << k + 1);
    opt.step(ctx, p, arena<T>(grads[k]), lr);
    require_close<T>(values<T>(p), expected[k]);
  }
}

std::unique_ptr<Optimizer> optimizer_from(const std::string& yaml) {
  ConfigNode root = config_from_text(yaml);
  ConfigNode section = root.child("optimizer");
  return make_optimizer(section);
}

}  // namespace

// ---------------------------------------------------------------------------------------------- SGD

TEMPLATE_TEST_CASE("sgd without momentum: p -= lr * g", "[optim][sgd]", float, double) {
  // lr 0.1, g = [0.1, 0.2, -0.3] every step: each step moves p by [-0.01, -0.02, +0.03].
  Sgd opt({.lr = 0.1});
  run_steps<TestType>(opt, {1, -2, 0.5}, {{0.1, 0.2, -0.3}, {0.1, 0.2, -0.3}, {0.1, 0.2, -0.3}},
                      {{0.99, -2.02, 0.53}, {0.98, -2.04, 0.56}, {0.97, -2.06, 0.59}}, 0.1);
  REQUIRE(opt.state().empty());
}

TEMPLATE_TEST_CASE("sgd with momentum", "[optim][sgd]", float, double) {
  // momentum 0.9, lr 0.1, g = [1, -2, 0.5] every step, p0 = [1, 1, 1].
  // step 1: buf = g = [1, -2, 0.5];                         p = 1 - 0.1 buf = [0.9, 1.2, 0.95]
  // step 2: buf = 0.9 buf + g = [1.9, -3.8, 0.95];          p = [0.9 - 0.19, 1.2 + 0.38, 0.95 - 0.095]
  // step 3: buf = 0.9 buf + g = [2.71, -5.42, 1.355];       p = [0.71 - 0.271, 1.58 + 0.542, 0.855 - 0.1355]
  Sgd opt({.lr = 0.1, .momentum = 0.9});
  const Values g{1, -2, 0.5};
  run_steps<TestType>(opt, {1, 1, 1}, {g, g, g}, {{0.9, 1.2, 0.95}, {0.71, 1.58, 0.855}, {0.439, 2.122, 0.7195}}, 0.1);
}

TEMPLATE_TEST_CASE("sgd with dampening copies the first gradient (PyTorch)", "[optim][sgd]", float, double) {
  // momentum 0.9, dampening 0.5, lr 0.1, g = [1, -2, 0.5], p0 = [1, 1, 1].
  // step 1: buf = g (no dampening on the first step) = [1, -2, 0.5];   p = [0.9, 1.2, 0.95]
  // step 2: buf = 0.9 buf + 0.5 g = [1.4, -2.8, 0.7];                 p = [0.76, 1.48, 0.88]
  // step 3: buf = 0.9 buf + 0.5 g = [1.76, -3.52, 0.88];              p = [0.584, 1.832, 0.792]
  Sgd opt({.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  const Values g{1, -2, 0.5};
  run_steps<TestType>(opt, {1, 1, 1}, {g, g, g}, {{0.9, 1.2, 0.95}, {0.76, 1.48, 0.88}, {0.584, 1.832, 0.792}}, 0.1);
}

TEMPLATE_TEST_CASE("sgd with nesterov momentum", "[optim][sgd]", float, double) {
  // momentum 0.9, nesterov, lr 0.1, g = [1, -2, 0.5], p0 = [1, 1, 1]; d = g + 0.9 buf.
  // step 1: buf = g;          d = 1.9 g  = [1.9, -3.8, 0.95];     p = [0.81, 1.38, 0.905]
  // step 2: buf = 1.9 g;      d = 2.71 g = [2.71, -5.42, 1.355];  p = [0.539, 1.922, 0.7695]
  // step 3: buf = 2.71 g;     d = 3.439 g = [3.439, -6.878, 1.7195]; p = [0.1951, 2.6098, 0.59755]
  Sgd opt({.lr = 0.1, .momentum = 0.9, .nesterov = true});
  const Values g{1, -2, 0.5};
  run_steps<TestType>(opt, {1, 1, 1}, {g, g, g},
                      {{0.81, 1.38, 0.905}, {0.539, 1.922, 0.7695}, {0.1951, 2.6098, 0.59755}}, 0.1);
}

TEMPLATE_TEST_CASE("sgd with weight decay adds wd * p to the gradient", "[optim][sgd]", float, double) {
  // weight_decay 0.1, lr 0.1, g = [0.5, 0.5, 0.5], p0 = [1, -2, 0.5]; d = g + 0.1 p.
  // step 1: d = [0.6, 0.3, 0.55];              p = [0.94, -2.03, 0.445]
  // step 2: d = [0.594, 0.297, 0.5445];        p = [0.8806, -2.0597, 0.39055]
  // step 3: d = [0.58806, 0.29403, 0.539055];  p = [0.821794, -2.089103, 0.3366445]
  Sgd opt({.lr = 0.1, .weight_decay = 0.1});
  const Values g{0.5, 0.5, 0.5};
  run_steps<TestType>(opt, {1, -2, 0.5}, {g, g, g},
                      {{0.94, -2.03, 0.445}, {0.8806, -2.0597, 0.39055}, {0.821794, -2.089103, 0.3366445}}, 0.1);
}

TEMPLATE_TEST_CASE("sgd uses the lr passed to step, not the base lr", "[optim][sgd]", float, double) {
  // base lr 0.1 but step(lr = 0.5): p = 1 - 0.5 * [1, -2, 0.5].
  Sgd opt({.lr = 0.1});
  run_steps<TestType>(opt, {1, 1, 1}, {{1, -2, 0.5}}, {{0.5, 2.0, 0.75}}, 0.5);
  REQUIRE(opt.base_lr() == 0.1);
}

// ------------------------------------------------------------------------------------------ RMSprop

TEMPLATE_TEST_CASE("rmsprop: eps is added after the square root", "[optim][rmsprop]", float, double) {
  // alpha 0.75, eps 0.5, lr 0.1, g = [2, -4, 1] every step, p0 = [1, 1, 1].
  // sq_k = (1 - 0.75^k) g^2: c_1 = 0.25, c_2 = 0.4375, c_3 = 0.578125; avg = sqrt(c_k) |g| + 0.5.
  // step 1: sq = [1, 4, 0.25], avg = [1.5, 2.5, 1.0], g/avg = [4/3, -1.6, 1]  -> p = [0.8666667, 1.16, 0.9]
  // step 2: sqrt(0.4375) = 0.6614378; avg = [1.8228757, 3.1457513, 1.1614378]
  //         g/avg = [1.0971675, -1.2715563, 0.8610017]               -> p = [0.7569499, 1.2871556, 0.8138998]
  // step 3: sqrt(0.578125) = 0.7603453; avg = [2.0206906, 3.5413813, 1.2603453]
  //         g/avg = [0.9897606, -1.1295028, 0.7934333]               -> p = [0.6579739, 1.4001059, 0.7345565]
  RmsProp opt({.lr = 0.1, .alpha = 0.75, .eps = 0.5});
  const Values g{2, -4, 1};
  auto p_after = [](double p, double g, double c) { return p - 0.1 * g / (std::sqrt(c) * std::abs(g) + 0.5); };
  Values p1, p2, p3;
  for (int i = 0; i < 3; ++i) p1.push_back(p_after(1.0, g[i], 0.25));
  for (int i = 0; i < 3; ++i) p2.push_back(p_after(p1[i], g[i], 0.4375));
  for (int i = 0; i < 3; ++i) p3.push_back(p_after(p2[i], g[i], 0.578125));
  require_close<double>(p1, {1 - 0.4 / 3, 1.16, 0.9});
  require_close<double>(p3, {0.6579738512551311, 1.4001059116993435, 0.7345564907038367});
  run_steps<TestType>(opt, {1, 1, 1}, {g, g, g}, {p1, p2, p3}, 0.1);
}

TEMPLATE_TEST_CASE("rmsprop centered with momentum", "[optim][rmsprop]", float, double) {
  // alpha 0.75, eps 0, momentum 0.5, centered, lr 0.1, g = [2, -4, 1], p0 = [1, 1, 1].
  // With c_k = 1 - 0.75^k: sq = c_k g^2, grad_avg = c_k g, so avg = sqrt(c_k - c_k^2) |g| and
  // g/avg = sign(g) r_k with r_1 = 1/sqrt(0.1875) = 2.3094011, r_2 = 1/sqrt(0.24609375) = 2.0158105,
  // r_3 = 1/sqrt(0.243896484375) = 2.0248704.
  // buf_1 = r_1 = 2.3094011;  buf_2 = 0.5 buf_1 + r_2 = 3.1705111;  buf_3 = 0.5 buf_2 + r_3 = 3.6101259.
  // p_k = p_{k-1} - 0.1 sign(g) buf_k: 1 - 0.2309401 = 0.7690599, - 0.3170511 = 0.4520088, - 0.3610126 = 0.0909962.
  RmsProp opt({.lr = 0.1, .alpha = 0.75, .eps = 0.0, .momentum = 0.5, .centered = true});
  const Values g{2, -4, 1};
  const double r1 = 1 / std::sqrt(0.1875), r2 = 1 / std::sqrt(0.24609375), r3 = 1 / std::sqrt(0.243896484375);
  const double b1 = r1, b2 = 0.5 * b1 + r2, b3 = 0.5 * b2 + r3;
  const double q1 = 1 - 0.1 * b1, q2 = q1 - 0.1 * b2, q3 = q2 - 0.1 * b3;
  require_close<double>({q1, q2, q3}, {0.7690598923241496, 0.4520087862146366, 0.09099619406601361});
  run_steps<TestType>(opt, {1, 1, 1}, {g, g, g}, {{q1, 2 - q1, q1}, {q2, 2 - q2, q2}, {q3, 2 - q3, q3}}, 0.1);
  REQUIRE(opt.state().size() == 3);
}

TEMPLATE_TEST_CASE("rmsprop with weight decay", "[optim][rmsprop]", float, double) {
  // alpha 0.75, eps 0, weight_decay 0.5, lr 0.1, g = [0, 2, -1] every step, p0 = [1, -2, 4]; d = g + 0.5 p.
  // step 1: d = [0.5, 1, 1]; sq = 0.25 d^2 = [0.0625, 0.25, 0.25]; avg = [0.25, 0.5, 0.5];
  //         d/avg = [2, 2, 2]                                              -> p = [0.8, -2.2, 3.8]
  // step 2: d = [0.4, 0.9, 0.9]; sq = 0.75 sq + 0.25 d^2 = [0.086875, 0.39, 0.39];
  //         avg = [0.2947457, 0.6244998, 0.6244998]; d/avg = [1.3571023, 1.4411534, 1.4411534]
  //                                                                        -> p = [0.6642898, -2.3441153, 3.6558847]
  // step 3: d = [0.3321449, 0.8279423, 0.8279423]; sq = [0.0927363, 0.4638721, 0.4638721];
  //         avg = [0.3045264, 0.6810816, 0.6810816]; d/avg = [1.0906934, 1.2156287, 1.2156287]
  //                                                                        -> p = [0.5552204, -2.4656782, 3.5343218]
  RmsProp opt({.lr = 0.1, .alpha = 0.75, .eps = 0.0, .weight_decay = 0.5});
  const Values g{0, 2, -1};
  run_steps<TestType>(opt, {1, -2, 4}, {g, g, g},
                      {{0.8, -2.2, 3.8},
                       {0.6642897712512047, -2.3441153384245785, 3.6558846615754215},
                       {0.5552204343772235, -2.4656782097029266, 3.5343217902970734}},
                      0.1);
}

// --------------------------------------------------------------------------------------------- Adam

TEMPLATE_TEST_CASE("adam bias correction: a constant gradient moves p by lr * sign(g)", "[optim][adam]", float,
                   double) {
  // beta1 0.9, beta2 0.999, eps 0, lr 0.1, g = [1, -2, 0.5] every step, p0 = [1, 1, 1].
  // m_t = (1 - 0.9^t) g and v_t = (1 - 0.999^t) g^2, so m_t / (1 - 0.9^t) = g and
  // sqrt(v_t) / sqrt(1 - 0.999^t) = |g|: every step moves p by exactly -0.1 sign(g).
  // (Without the corrections step 1 would move by 0.1 * 0.1 g / sqrt(0.001 g^2) = 0.316 sign(g).)
  Adam opt({.lr = 0.1, .eps = 0.0});
  const Values g{1, -2, 0.5};
  run_steps<TestType>(opt, {1, 1, 1}, {g, g, g}, {{0.9, 1.1, 0.9}, {0.8, 1.2, 0.8}, {0.7, 1.3, 0.7}}, 0.1);
  auto state = opt.state();
  REQUIRE(state.back().first == "adam.step");
  REQUIRE(state.back().second.template data<double>()[0] == 3.0);
}

TEMPLATE_TEST_CASE("adam with weight decay and changing gradients", "[optim][adam]", float, double) {
  // beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.1, lr 0.01, p0 = [1, -2, 0.5];
  // g_1 = [0.5, 0.2, -1], g_2 = [-0.5, 0.4, 1], g_3 = [1, 0, -2]; d = g + 0.1 p.
  // t=1: 1-b1 = 0.1, 1-b2 = 0.001, step_size = 0.01/0.1 = 0.1, sqrt(0.001) = 0.0316228
  //      d = [0.6, 0, -0.95]; m = 0.1 d; v = 0.001 d^2; denom = |d| + 1e-8 = [0.60000001, 1e-8, 0.95000001]
  //      p -= 0.1 m/denom = [0.0599999999, 0, -0.0949999999]     -> p = [0.9900000002, -2, 0.5099999999]
  // t=2: 1-b1^2 = 0.19, 1-b2^2 = 0.001999, step_size = 0.0526316, sqrt(0.001999) = 0.0447102
  //      d = [-0.401, 0.2, 1.051]; m = 0.9 m + 0.1 d = [0.0139, 0.02, 0.0196];
  //      v = 0.999 v + 0.001 d^2 = [5.204410e-4, 4e-5, 2.006198e-3]; denom = [0.5102457, 0.1414567, 1.0017989]
  //                                                               -> p = [0.9885662, -2.0074414, 0.5089703]
  // t=3: 1-b1^3 = 0.271, 1-b2^3 = 0.002997001, step_size = 0.0369004, sqrt = 0.0547449
  //      d = [1.0988566, -0.2007441, -1.9491030]; m = [0.1223957, -0.0020744, -0.1772703];
  //      v = [1.727406e-3, 8.025821e-5, 5.803195e-3]; denom = [0.7591959, 0.1636445, 1.3915222]
  //                                                               -> p = [0.9826172, -2.0069736, 0.5136711]
  Adam opt({.lr = 0.01, .weight_decay = 0.1});
  run_steps<TestType>(opt, {1, -2, 0.5}, {{0.5, 0.2, -1}, {-0.5, 0.4, 1}, {1, 0, -2}},
                      {{0.9900000001666667, -2.0, 0.5099999998947369},
                       {0.9885662224165238, -2.007441367709617, 0.5089702733402582},
                       {0.9826172369604214, -2.006973605897631, 0.513671125057743}},
                      0.01);
}

TEMPLATE_TEST_CASE("adam amsgrad keeps the largest second moment", "[optim][adam]", float, double) {
  // beta1 0.5, beta2 0.5, eps 0, amsgrad, lr 0.1, p0 = [1, 1, 1]; g_1 = [4, -2, 1], g_2 = [0, -1, 3], g_3 = [1, -2, 0].
  // t=1: bc1 = bc2 = 0.5, step_size 0.2, sqrt(bc2) = 0.7071068
  //      m = [2, -1, 0.5]; v = vmax = [8, 2, 0.5]; denom = sqrt(vmax)/0.7071068 = [4, 2, 1]
  //      p -= 0.2 m/denom = [0.1, -0.1, 0.1]                            -> p = [0.9, 1.1, 0.9]
  // t=2: bc1 = bc2 = 0.75, step_size 0.1333333, sqrt(bc2) = 0.8660254
  //      m = [1, -1, 1.75]; v = [4, 1.5, 4.75]; vmax = [8, 2, 4.75] (elements 0 and 1 keep step 1's value)
  //      denom = [3.2659863, 1.6329932, 2.5166115]                      -> p = [0.8591752, 1.1816497, 0.8072827]
  // t=3: bc1 = bc2 = 0.875, step_size 0.1142857, sqrt(bc2) = 0.9354143
  //      m = [1, -1.5, 0.875]; v = [2.5, 2.75, 2.375]; vmax = [8, 2.75, 4.75]
  //      denom = [3.0237158, 1.7728105, 2.3299295]                      -> p = [0.8213787, 1.2783484, 0.7643630]
  Adam opt({.lr = 0.1, .beta1 = 0.5, .beta2 = 0.5, .eps = 0.0, .amsgrad = true});
  run_steps<TestType>(opt, {1, 1, 1}, {{4, -2, 1}, {0, -1, 3}, {1, -2, 0}},
                      {{0.9, 1.1, 0.9},
                       {0.8591751709536137, 1.1816496580927727, 0.807282735005447},
                       {0.821378723652691, 1.2783484137758183, 0.7643629812414994}},
                      0.1);
  auto state = opt.state();
  REQUIRE(state[2].first == "adam.max_exp_avg_sq");
  require_close<TestType>(values<TestType>(state[2].second), {8, 2.75, 4.75});
}

// ------------------------------------------------------------------------------------------ Adagrad

TEMPLATE_TEST_CASE("adagrad: a constant gradient moves p by lr / sqrt(t) per step", "[optim][adagrad]", float, double) {
  // lr 0.1, eps 0, g = [3, -4, 0.5] every step: sum_t = t g^2, so step t moves p by -0.1 sign(g) / sqrt(t):
  // p_1 = 1 -+ 0.1, p_2 = p_1 -+ 0.0707107, p_3 = p_2 -+ 0.0577350.
  Adagrad opt({.lr = 0.1, .eps = 0.0});
  const double a1 = 0.1, a2 = a1 + 0.1 / std::sqrt(2.0), a3 = a2 + 0.1 / std::sqrt(3.0);
  const Values g{3, -4, 0.5};
  run_steps<TestType>(opt, {1, 1, 1}, {g, g, g},
                      {{1 - a1, 1 + a1, 1 - a1}, {1 - a2, 1 + a2, 1 - a2}, {1 - a3, 1 + a3, 1 - a3}}, 0.1);
}

TEMPLATE_TEST_CASE("adagrad with lr_decay, initial accumulator and weight decay", "[optim][adagrad]", float, double) {
  // lr 0.1, lr_decay 0.5, initial_accumulator_value 1, weight_decay 0.1, eps 1e-10, p0 = [1, 1, 1];
  // g_1 = [4, -2, 1], g_2 = [0, -1, 3], g_3 = [1, -2, 0]. Step t uses clr = 0.1 / (1 + 0.5 (t - 1)).
  // t=1: d = g + 0.1 p = [4.1, -1.9, 1.1]; sum = 1 + d^2 = [17.81, 4.61, 2.21]
  //      p = 1 - 0.1 d / sqrt(sum) = [0.9028480, 1.0884918, 0.9260060]
  // t=2, t=3 likewise (clr 0.0666667, then 0.05). Expected values from torch.optim.Adagrad (PyTorch
  // 1.13, float64) with the same arguments, printed by `/usr/bin/python3 tools/reference/adagrad.py`
  // (the rows and adagrad.sum below); the t=1 row matches the hand computation above.
  Adagrad opt({.lr = 0.1, .lr_decay = 0.5, .weight_decay = 0.1, .initial_accumulator_value = 1.0, .eps = 1e-10});
  run_steps<TestType>(opt, {1, 1, 1}, {{4, -2, 1}, {0, -1, 3}, {1, -2, 0}},
                      {{0.9028479661239891, 1.0884918222340767, 0.926005992665383},
                       {0.9014220563587959, 1.1140480212940165, 0.8659208260955371},
                       {0.8889194262667921, 1.145575545704883, 0.8646594498747955}},
                      0.1);
  auto state = opt.state();
  REQUIRE(state[0].first == "adagrad.sum");
  require_close<TestType>(values<TestType>(state[0].second), {19.006561373008, 8.970941601443773, 11.781676655354412});
  REQUIRE(state[1].second.data<double>()[0] == 3.0);
}

// ------------------------------------------------------------------------------------ named state

namespace {

std::vector<std::string> state_names(Optimizer& opt) {
  std::vector<std::string> out;
  for (auto& [name, t] : opt.state()) out.push_back(name);
  return out;
}

// Runs 3 steps on `a`, copies its state into a fresh `b`, then runs 2 more identical steps on both:
// the parameters must stay bitwise equal.
template <typename T>
void check_restore(Optimizer& a, Optimizer& b) {
  Context ctx = Context::cpu(1, 1);
  const std::vector<Values> grads{{0.3, -1.2, 0.7, 2.0},
                                  {-0.4, 0.9, 0.1, 1.5},
                                  {0.8, -0.2, -0.6, 0.05},
                                  {0.1, 0.2, -0.3, -1.0},
                                  {-0.7, 0.4, 0.9, 0.3}};
  Tensor pa = arena<T>({1, -1, 0.5, 2});
  a.init(4, dtype_of<T>(), Device::cpu());
  for (int k = 0; k < 3; ++k) a.step(ctx, pa, arena<T>(grads[k]), 0.05);
  Tensor pb = pa.clone();
  b.init(4, dtype_of<T>(), Device::cpu());
  auto sa = a.state(), sb = b.state();
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    REQUIRE(sa[i].first == sb[i].first);
    sb[i].second.copy_from(sa[i].second);
  }
  for (int k = 3; k < 5; ++k) {
    a.step(ctx, pa, arena<T>(grads[k]), 0.05);
    b.step(ctx, pb, arena<T>(grads[k]), 0.05);
  }
  REQUIRE(values<T>(pa) == values<T>(pb));
}

}  // namespace

TEST_CASE("state names", "[optim]") {
  Sgd plain({.lr = 0.1});
  plain.init(3, DType::f32, Device::cpu());
  REQUIRE(state_names(plain).empty());
  Sgd sgd({.lr = 0.1, .momentum = 0.9});
  sgd.init(3, DType::f32, Device::cpu());
  REQUIRE(state_names(sgd) == std::vector<std::string>{"sgd.momentum_buffer", "sgd.step"});
  RmsProp rms({.lr = 0.1});
  rms.init(3, DType::f32, Device::cpu());
  REQUIRE(state_names(rms) == std::vector<std::string>{"rmsprop.square_avg"});
  RmsProp rms_full({.lr = 0.1, .momentum = 0.9, .centered = true});
  rms_full.init(3, DType::f32, Device::cpu());
  REQUIRE(state_names(rms_full) ==
          std::vector<std::string>{"rmsprop.square_avg", "rmsprop.momentum_buffer", "rmsprop.grad_avg"});
  Adagrad adagrad({.lr = 0.1});
  adagrad.init(3, DType::f32, Device::cpu());
  REQUIRE(state_names(adagrad) == std::vector<std::string>{"adagrad.sum", "adagrad.step"});
  Adam adam({.lr = 0.1});
  adam.init(3, DType::f64, Device::cpu());
  REQUIRE(state_names(adam) == std::vector<std::string>{"adam.exp_avg", "adam.exp_avg_sq", "adam.step"});
  for (auto& [name, t] : adam.state()) {
    REQUIRE(t.numel() == (name == "adam.step" ? 1 : 3));
    REQUIRE(t.dtype() == DType::f64);
  }
}

TEMPLATE_TEST_CASE("restoring state by copying into state() continues identically", "[optim]", float, double) {
  SECTION("sgd with momentum and dampening") {
    Sgd a({.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01});
    Sgd b(a.options());
    check_restore<TestType>(a, b);
  }
  SECTION("rmsprop centered with momentum") {
    RmsProp a({.lr = 0.1, .momentum = 0.5, .centered = true});
    RmsProp b(a.options());
    check_restore<TestType>(a, b);
  }
  SECTION("adam with amsgrad") {
    Adam a({.lr = 0.1, .weight_decay = 0.01, .amsgrad = true});
    Adam b(a.options());
    check_restore<TestType>(a, b);
  }
  SECTION("adagrad with lr_decay") {
    Adagrad a({.lr = 0.1, .lr_decay = 0.2, .weight_decay = 0.01, .initial_accumulator_value = 0.1});
    Adagrad b(a.options());
    check_restore<TestType>(a, b);
  }
}

TEST_CASE("step checks the arena against init", "[optim]") {
  Context ctx = Context::cpu(1, 1);
  Sgd opt({.lr = 0.1});
  Tensor p = Tensor::zeros({3}, DType::f32);
  REQUIRE_THROWS_WITH(opt.step(ctx, p, p, 0.1), Catch::Contains("step() before init()"));
  opt.init(4, DType::f32, Device::cpu());
  REQUIRE_THROWS_WITH(opt.step(ctx, p, p, 0.1), Catch::Contains("initialized for 4 values"));
  REQUIRE_THROWS_WITH(opt.init(3, DType::i32, Device::cpu()), Catch::Contains("arenas must be f32"));
}

// ---------------------------------------------------------------------------------------- config

TEST_CASE("make_optimizer reads each type's options and defaults", "[optim][config]") {
  auto sgd = optimizer_from("optimizer: {type: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1e-4}\n");
  REQUIRE(std::string(sgd->type()) == "sgd");
  const SgdOptions& so = dynamic_cast<Sgd&>(*sgd).options();
  REQUIRE(so.lr == 0.05);
  REQUIRE(so.momentum == 0.9);
  REQUIRE(so.nesterov);
  REQUIRE(so.dampening == 0);
  REQUIRE(so.weight_decay == 1e-4);
  REQUIRE(sgd->base_lr() == 0.05);

  auto rms = optimizer_from("optimizer: {type: rmsprop, lr: 0.003}\n");
  const RmsPropOptions& ro = dynamic_cast<RmsProp&>(*rms).options();
  REQUIRE(ro.alpha == 0.99);
  REQUIRE(ro.eps == 1e-8);
  REQUIRE(ro.momentum == 0);
  REQUIRE(!ro.centered);
  REQUIRE(ro.weight_decay == 0);

  auto adagrad = optimizer_from("optimizer: {type: adagrad, lr: 0.01}\n");
  const AdagradOptions& go = dynamic_cast<Adagrad&>(*adagrad).options();
  REQUIRE(go.lr_decay == 0);
  REQUIRE(go.initial_accumulator_value == 0);
  REQUIRE(go.eps == 1e-10);
  REQUIRE(go.weight_decay == 0);
  auto adagrad2 = optimizer_from(
      "optimizer: {type: adagrad, lr: 0.01, lr_decay: 0.5, initial_accumulator_value: 0.1, eps: 1e-6}\n");
  const AdagradOptions& go2 = dynamic_cast<Adagrad&>(*adagrad2).options();
  REQUIRE(go2.lr_decay == 0.5);
  REQUIRE(go2.initial_accumulator_value == 0.1);
  REQUIRE(go2.eps == 1e-6);

  auto adam = optimizer_from("optimizer: {type: adam, lr: 0.001, amsgrad: true, schedule: {type: cosine}}\n");
  const AdamOptions& ao = dynamic_cast<Adam&>(*adam).options();
  REQUIRE(ao.beta1 == 0.9);
  REQUIRE(ao.beta2 == 0.999);
  REQUIRE(ao.eps == 1e-8);
  REQUIRE(ao.amsgrad);
}

TEST_CASE("make_optimizer errors name the key and the value", "[optim][config]") {
  REQUIRE_THROWS_AS(optimizer_from("optimizer: {type: sgd, lr: -1}\n"), InputError);
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: sgd, lr: -1}\n"),
                      Catch::Contains("optimizer.lr must be > 0, got -1"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: sgd, lr: 0}\n"),
                      Catch::Contains("optimizer.lr must be > 0, got 0"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: sgd}\n"), Catch::Contains("optimizer.lr is required"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {lr: 0.1}\n"), Catch::Contains("optimizer.type is required"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: adamw, lr: 0.1}\n"),
                      Catch::Contains("optimizer.type must be one of sgd, rmsprop, adam, adagrad, got 'adamw'"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: adagrad, lr: 0.1, lr_decay: -1}\n"),
                      Catch::Contains("optimizer.lr_decay must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: adagrad, lr: 0.1, momentum: 0.9}\n"),
                      Catch::Contains("unknown key 'optimizer.momentum'"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: sgd, lr: 0.1, nesterov: true}\n"),
                      Catch::Contains("optimizer.nesterov needs momentum > 0"));
  REQUIRE_THROWS_WITH(
      optimizer_from("optimizer: {type: sgd, lr: 0.1, momentum: 0.9, dampening: 0.1, nesterov: true}\n"),
      Catch::Contains("optimizer.nesterov needs dampening 0"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: sgd, lr: 0.1, momentum: 1}\n"),
                      Catch::Contains("optimizer.momentum must be < 1, got 1"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: adam, lr: 0.1, weight_decay: -0.1}\n"),
                      Catch::Contains("optimizer.weight_decay must be >= 0, got -0.1"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: adam, lr: 0.1, beta_1: 0.8}\n"),
                      Catch::Contains("unknown key 'optimizer.beta_1'") && Catch::Contains("did you mean 'beta1'"));
  // A key of another optimizer type is unknown here.
  REQUIRE_THROWS_WITH(optimizer_from("optimizer: {type: sgd, lr: 0.1, beta1: 0.8}\n"),
                      Catch::Contains("unknown key 'optimizer.beta1'"));
  REQUIRE_THROWS_WITH(optimizer_from("optimizer:\n  type: rmsprop\n  lr: 0.1\n  alpha: 2\n"),
                      Catch::Contains("test.yaml:4:10") && Catch::Contains("optimizer.alpha must be <= 1, got 2"));
}

// ------------------------------------------------------------------------------------ subnormals

namespace {

// Steps `opt` with gradients that are subnormal, tiny enough that their squares are, and then zero
// (the state decays) and checks after every step that no state value is subnormal (optim/kernels.h:
// such values are stored as zero; issue 22) and that the tiny but normal values are kept.
template <typename T>
void check_no_subnormal_state(Optimizer& opt, const std::string& what) {
  Context ctx = Context::cpu(1, 1);
  const T tiny = std::numeric_limits<T>::denorm_min() * 3, small = std::sqrt(std::numeric_limits<T>::min()) / 4;
  const std::vector<Values> grads{{double(tiny), -double(tiny), double(small), 1.0},
                                  {double(small), double(tiny), -double(small), 0.5},
                                  {0.0, 0.0, 0.0, 0.0}};
  Tensor p = arena<T>({1, -1, 0.5, 2});
  opt.init(4, dtype_of<T>(), Device::cpu());
  auto last_state = [&] {  // the state values of element 3, whose gradients were 1 and 0.5
    Values out;
    for (auto& [name, t] : opt.state())
      if (t.dtype() == dtype_of<T>() && t.numel() == 4) out.push_back(double(t.template data<T>()[3]));
    return out;
  };
  for (int k = 0; k < 60; ++k) {  // then 57 steps of zero gradients, each decaying the state by 0.1
    opt.step(ctx, p, arena<T>(grads[static_cast<size_t>(std::min(k, 2))]), 0.05);
    for (auto& [name, t] : opt.state())
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (t.dtype() != dtype_of<T>()) continue;
        INFO(what << " " << name << "[" << i << "] after step " << k + 1 << ": " << double(t.template data<T>()[i]));
        REQUIRE(std::fpclassify(t.template data<T>()[i]) != FP_SUBNORMAL);
      }
    if (k == 2) {
      for (double v : last_state()) CHECK(v != 0);  // normal values are kept
    }
  }
  // f32: 0.1^57 took every state of element 3 through the subnormal range, to zero. f64's normal range
  // reaches 2.2e-308, so there only the subnormal gradients were flushed.
  if (std::is_same_v<T, float>)
    for (double v : last_state()) CHECK(v == 0);
}

}  // namespace

TEST_CASE("optimizer state never holds subnormal numbers (they cost ~100x per operation on x86)", "[optim]") {
  for (int f32 : {1, 0}) {
    Sgd sgd({.lr = 0.1, .momentum = 0.1});
    RmsProp rms({.lr = 0.01, .alpha = 0.1, .momentum = 0.1, .centered = true});
    Adam adam({.lr = 0.01, .beta1 = 0.1, .beta2 = 0.1});
    if (f32) {
      check_no_subnormal_state<float>(sgd, "sgd f32");
      check_no_subnormal_state<float>(rms, "rmsprop f32");
      check_no_subnormal_state<float>(adam, "adam f32");
    } else {
      check_no_subnormal_state<double>(sgd, "sgd f64");
      check_no_subnormal_state<double>(rms, "rmsprop f64");
      check_no_subnormal_state<double>(adam, "adam f64");
    }
  }
}

// With gradients near 1e-20 the squared average flushes to zero (it is subnormal) while the squared
// gradient average does not: sq - ga * ga < 0. Its square root made every parameter NaN, which a GPU
// run of test_optim_cuda showed first (both sides NaN, with different NaN bits).
TEMPLATE_TEST_CASE("centered rmsprop stays finite when the variance estimate rounds below zero", "[optim][rmsprop]",
                   float, double) {
  const TestType tiny = std::is_same_v<TestType, float> ? TestType(1e-20) : TestType(1e-160);
  RmsProp opt({.lr = 0.01, .alpha = 0.5, .momentum = 0.5, .centered = true});
  Tensor p = arena<TestType>({1, -1, 0.5, 2});
  opt.init(p.numel(), dtype_of<TestType>(), Device::cpu());
  Context ctx = Context::cpu(1, 1);
  const double t = static_cast<double>(tiny);
  for (int k = 0; k < 3; ++k) opt.step(ctx, p, arena<TestType>({t, -t, 3 * t, t / 2}), 0.01);
  for (double v : values<TestType>(p)) REQUIRE(std::isfinite(v));
}

// The CPU loops run on the context's lanes, each on a contiguous range (optim/cpu_lanes.h): an arena
// large enough to be split gives the same bits on 3 lanes as on 1, for every option of every optimizer.
TEMPLATE_TEST_CASE("the CPU step gives the same bits on any number of lanes", "[optim]", float, double) {
  const std::vector<std::string> configs = {
      "{type: sgd, lr: 0.1}",
      "{type: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.01}",
      "{type: rmsprop, lr: 0.01, centered: true, momentum: 0.5, weight_decay: 0.01}",
      "{type: rmsprop, lr: 0.01}",
      "{type: adam, lr: 0.001, amsgrad: true, weight_decay: 0.01}",
      "{type: adagrad, lr: 0.1, lr_decay: 0.01, weight_decay: 0.01}",
  };
  const int64_t n = 300001;  // above 3 lanes x 64K values, and not a multiple of 3
  Values p0(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    p0[static_cast<size_t>(i)] = std::sin(0.001 * static_cast<double>(i));
    g[static_cast<size_t>(i)] = std::cos(0.0007 * static_cast<double>(i)) * 1e-2;
  }
  for (const std::string& c : configs) {
    INFO(c);
    std::vector<Tensor> results;
    for (int lanes : {1, 3}) {
      Context ctx = Context::cpu(1, lanes);
      auto opt = optimizer_from("optimizer: " + c);
      Tensor p = arena<TestType>(p0);
      opt->init(n, dtype_of<TestType>(), Device::cpu());
      for (int step = 0; step < 3; ++step) opt->step(ctx, p, arena<TestType>(g), 0.01);
      results.push_back(p);
    }
    REQUIRE(std::memcmp(results[0].raw(), results[1].raw(), results[0].nbytes()) == 0);
  }
}
