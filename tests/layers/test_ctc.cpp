// ctc: the loss against brute-force enumeration of every alignment on tiny cases, the gradient in
// float64 against central differences (unequal lengths, repeated labels, padding), PyTorch 1.13's
// ctc_loss on a fixed case, impossible alignments, greedy decoding, edit distances and CER/WER counts,
// and the same bits however many lanes share the batch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "framework/core/context.h"
#include "layers/ctc_loss.h"
#include "tests/support/gradcheck.h"

using namespace qtrain;

namespace {

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

SequenceTargets make_targets(const std::vector<int32_t>& input_lengths, const std::vector<int32_t>& targets,
                             const std::vector<int32_t>& target_lengths) {
  return {i32(input_lengths), i32(targets.empty() ? std::vector<int32_t>{0} : targets), i32(target_lengths)};
}

// Collapse repeats, drop blanks.
std::vector<int32_t> collapse(const std::vector<int32_t>& path) {
  std::vector<int32_t> out;
  int32_t prev = -1;
  for (int32_t c : path) {
    if (c != prev && c != 0) out.push_back(c);
    prev = c;
  }
  return out;
}

// -log sum over all C^T paths that collapse to `target` of prod softmax.
double brute_force_loss(const double* z, int64_t frames, int64_t classes, const std::vector<int32_t>& target) {
  std::vector<double> lp(static_cast<size_t>(frames * classes));
  for (int64_t t = 0; t < frames; ++t) {
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(z[t * classes + c]);
    for (int64_t c = 0; c < classes; ++c) lp[static_cast<size_t>(t * classes + c)] = z[t * classes + c] - std::log(sum);
  }
  double p = 0;
  std::vector<int32_t> path(static_cast<size_t>(frames), 0);
  std::function<void(int64_t, double)> walk = [&](int64_t t, double logp) {
    if (t == frames) {
      if (collapse(path) == target) p += std::exp(logp);
      return;
    }
    for (int32_t c = 0; c < classes; ++c) {
      path[static_cast<size_t>(t)] = c;
      walk(t + 1, logp + lp[static_cast<size_t>(t * classes + c)]);
    }
  };
  walk(0, 0.0);
  return -std::log(p);
}

}  // namespace

TEST_CASE("ctc: loss equals brute-force enumeration of all alignments", "[ctc]") {
  Context ctx = Context::cpu(1, 1);
  struct Case {
    int64_t frames, classes;
    std::vector<int32_t> target;
  };
  const std::vector<Case> cases = {{1, 2, {1}},       {3, 2, {1}}, {4, 3, {1, 2}}, {5, 3, {1, 1}},
                                   {5, 3, {2, 1, 2}}, {5, 3, {}},  {3, 3, {1, 1}}, {4, 2, {1, 1}}};
  uint64_t seed = 3;
  for (const Case& c : cases) {
    const Tensor z = qtrain::testing::random_tensor({1, c.frames, c.classes}, ++seed, -2.0, 2.0);
    CtcLoss loss;
    const LossStats s = loss.compute_sequence(
        ctx, z, make_targets({static_cast<int32_t>(c.frames)}, c.target, {static_cast<int32_t>(c.target.size())}),
        nullptr);
    INFO("T=" << c.frames << " C=" << c.classes << " L=" << c.target.size());
    CHECK(s.loss_sum == Approx(brute_force_loss(z.data<double>(), c.frames, c.classes, c.target)).epsilon(1e-12));
    CHECK(s.count == 1);
  }
}

TEST_CASE("ctc: float64 gradient against central differences, unequal lengths and padding", "[ctc][gradcheck]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t batch = 3, frames = 6, classes = 4;
  Tensor z = qtrain::testing::random_tensor({batch, frames, classes}, 11, -2.0, 2.0);
  // Lengths 6, 4, 5; targets with a repeat (2 2) and an empty one.
  const SequenceTargets st = make_targets({6, 4, 5}, {1, 2, 2, 3, 1}, {3, 0, 2});
  CtcLoss loss;
  Tensor dz = Tensor::empty(z.shape(), DType::f64);
  dz.fill_(std::nan(""));
  loss.compute_sequence(ctx, z, st, &dz);
  const double h = 1e-5;
  double* zs = z.data<double>();
  for (int64_t i = 0; i < z.numel(); ++i) {
    const double saved = zs[i];
    zs[i] = saved + h;
    const double plus = loss.compute_sequence(ctx, z, st, nullptr).loss_sum / batch;
    zs[i] = saved - h;
    const double minus = loss.compute_sequence(ctx, z, st, nullptr).loss_sum / batch;
    zs[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    INFO("coordinate " << i);
    REQUIRE(dz.data<double>()[i] == Approx(numeric).margin(1e-8));
  }
  // Frames beyond a sample's length get exactly zero gradient.
  for (int64_t t = 4; t < frames; ++t)
    for (int64_t c = 0; c < classes; ++c) CHECK(dz.data<double>()[(1 * frames + t) * classes + c] == 0.0);
}

// Reference: F.ctc_loss of PyTorch 1.13 in float64 on the logits built below, and the gradient of the
// batch mean of the per-utterance losses (our normalization). `/usr/bin/python3 tools/reference/ctc.py`
// prints the two losses (loss_sum is their sum), g02 and g14.
TEST_CASE("ctc: matches PyTorch's ctc_loss", "[ctc][pytorch]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t B = 2, T = 6, C = 4;
  Tensor z = Tensor::empty({B, T, C}, DType::f64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) z.data<double>()[(b * T + t) * C + c] = 2 * std::sin(1.3 * b + 0.7 * t + 0.9 * c);
  CtcLoss loss;
  Tensor dz = Tensor::empty(z.shape(), DType::f64);
  const SequenceTargets st = make_targets({6, 5}, {1, 2, 2, 3, 1}, {3, 2});
  const LossStats s = loss.compute_sequence(ctx, z, st, &dz);
  CHECK(s.loss_sum == Approx(5.117015652881 + 4.961023830928).epsilon(1e-11));
  const double g02[] = {-0.040316955998, 0.157952272747, -0.125295703791, 0.007660387041};
  const double g14[] = {0.001177794710, -0.452402201260, 0.067604365212, 0.383620041338};
  for (int c = 0; c < 4; ++c) {
    CHECK(dz.data<double>()[(0 * T + 2) * C + c] == Approx(g02[c]).margin(1e-11));
    CHECK(dz.data<double>()[(1 * T + 4) * C + c] == Approx(g14[c]).margin(1e-11));
    CHECK(dz.data<double>()[(1 * T + 5) * C + c] == 0.0);
  }
  // float32 logits agree to float precision.
  Tensor zf = Tensor::empty({B, T, C}, DType::f32), dzf = Tensor::empty({B, T, C}, DType::f32);
  for (int64_t i = 0; i < z.numel(); ++i) zf.data<float>()[i] = static_cast<float>(z.data<double>()[i]);
  CHECK(loss.compute_sequence(ctx, zf, st, &dzf).loss_sum == Approx(s.loss_sum).epsilon(1e-6));
  for (int64_t i = 0; i < z.numel(); ++i) REQUIRE(dzf.data<float>()[i] == Approx(dz.data<double>()[i]).margin(1e-6));
}

TEST_CASE("ctc: impossible alignments are zeroed or rejected", "[ctc]") {
  Context ctx = Context::cpu(1, 1);
  const Tensor z = qtrain::testing::random_tensor({2, 3, 3}, 5);
  // Sample 0: target "1 1" needs 3 frames (1 blank 1), it has 2; sample 1 is fine.
  const SequenceTargets st = make_targets({2, 3}, {1, 1, 2}, {2, 1});
  CtcLoss zeroing;
  Tensor dz = Tensor::empty(z.shape(), DType::f64);
  const LossStats s = zeroing.compute_sequence(ctx, z, st, &dz);
  CHECK(std::isfinite(s.loss_sum));
  for (int64_t i = 0; i < 9; ++i) CHECK(dz.data<double>()[i] == 0.0);
  CtcLoss strict(CtcOptions{false});
  CHECK_THROWS_WITH(strict.compute_sequence(ctx, z, st, nullptr), Catch::Contains("sample 0 cannot be aligned"));
  CHECK_THROWS_WITH(zeroing.compute_sequence(ctx, z, make_targets({4, 3}, {1}, {1, 0}), nullptr),
                    Catch::Contains("input length 4"));
  CHECK_THROWS_WITH(zeroing.compute_sequence(ctx, z, make_targets({3, 3}, {3}, {1, 0}), nullptr),
                    Catch::Contains("class 3"));
  CHECK_THROWS_WITH(zeroing.compute_sequence(ctx, z, make_targets({3, 3}, {0}, {1, 0}), nullptr),
                    Catch::Contains("blank"));
}

TEST_CASE("ctc: greedy decoding, edit distances, CER and WER counts", "[ctc][decode]") {
  // Best path 0 1 1 0 1 2 2 0 -> 1 1 2.
  const int32_t path[] = {0, 1, 1, 0, 1, 2, 2, 0};
  std::vector<double> scores(8 * 3, 0.0);
  for (int t = 0; t < 8; ++t) scores[static_cast<size_t>(t * 3 + path[t])] = 1.0;
  CHECK(ctc_greedy_decode(scores.data(), 8, 3) == std::vector<int32_t>{1, 1, 2});
  CHECK(ctc_greedy_decode(scores.data(), 3, 3) == std::vector<int32_t>{1});
  CHECK(edit_distance({}, {1, 2}) == 2);
  CHECK(edit_distance({1, 2, 3}, {1, 3}) == 1);
  CHECK(edit_distance({1, 2, 3}, {3, 2, 1}) == 2);
  CHECK(edit_distance({4, 5, 6, 7}, {4, 5, 6, 7}) == 0);
  int64_t words = 0;
  // Space = 1: "2 3 _ 4" vs "2 3 _ 5 _ 4": one inserted word.
  CHECK(word_edit_distance({2, 3, 1, 4}, {2, 3, 1, 5, 1, 4}, 1, &words) == 1);
  CHECK(words == 3);
  CHECK(word_edit_distance({2, 3}, {2, 4}, -1, &words) == 1);
  CHECK(words == 1);

  // Through the loss: vocabulary with a space; a perfect and a one-character-off decoding.
  Context ctx = Context::cpu(1, 1);
  CtcLoss loss;
  loss.set_vocabulary({"", " ", "A", "B"});
  CHECK(loss.space_class() == 1);
  Tensor z = Tensor::zeros({2, 4, 4}, DType::f64);
  const int32_t best[2][4] = {{2, 1, 3, 0}, {2, 0, 2, 0}};  // "A B", "A A"
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 4; ++t) z.data<double>()[(b * 4 + t) * 4 + best[b][t]] = 5.0;
  const LossStats s = loss.compute_sequence(ctx, z, make_targets({4, 4}, {2, 1, 3, 2, 3}, {3, 2}), nullptr);
  CHECK(s.correct == 1);
  CHECK(s.chars == 5);
  CHECK(s.char_errors == 1);
  CHECK(s.words == 3);
  CHECK(s.word_errors == 1);
}

// The CPU path takes the utterances over the context's lanes in whatever order they come free; the
// loss (summed in sample order), the error counts and every gradient bit must not depend on that.
TEST_CASE("ctc: the same bits on one lane and on three", "[ctc]") {
  const int64_t batch = 9, frames = 40, classes = 6;
  // Lengths from 3 to 40 frames (the lanes finish in different orders), targets up to 12 classes,
  // one impossible (5 frames for a target of 4 with two repeats: it needs 6).
  std::vector<int32_t> lengths, targets, target_lengths;
  for (int64_t b = 0; b < batch; ++b) {
    lengths.push_back(static_cast<int32_t>(b == 4 ? 5 : 3 + (b * 17) % 38));
    const int32_t n = b == 4 ? 4 : static_cast<int32_t>(b % 4 == 0 ? 0 : std::min<int64_t>(lengths.back() / 3, 12));
    for (int32_t i = 0; i < n; ++i) targets.push_back(b == 4 ? (i < 2 ? 1 : 2) : 1 + (i * 7 + b) % (classes - 1));
    target_lengths.push_back(n);
  }
  const SequenceTargets st = make_targets(lengths, targets, target_lengths);
  auto run = [&](DType dtype, int threads, Tensor& dz) {
    Context ctx = Context::cpu(1, threads);
    REQUIRE(ctx.cpu_pool().lanes() == threads);
    const Tensor z = qtrain::testing::random_tensor({batch, frames, classes}, 23, -3.0, 3.0, dtype);
    dz = Tensor::empty(z.shape(), dtype);
    dz.fill_(std::nan(""));
    CtcLoss loss;
    loss.set_vocabulary({"_", "a", " ", "b", "c", "d"});
    return loss.compute_sequence(ctx, z, st, &dz);
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor one, three;
    const LossStats a = run(dtype, 1, one), b = run(dtype, 3, three);
    CHECK(std::isfinite(a.loss_sum));
    CHECK(a.loss_sum == b.loss_sum);
    CHECK(a.char_errors == b.char_errors);
    CHECK(a.word_errors == b.word_errors);
    CHECK(a.words == b.words);
    CHECK(a.correct == b.correct);
    REQUIRE(one.nbytes() == three.nbytes());
    CHECK(std::memcmp(one.raw(), three.raw(), one.nbytes()) == 0);
  }
}
