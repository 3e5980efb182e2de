// PowerSGD through GradientExchange under mpirun (1, 2 and 4 ranks): every rank ends every step with
// the same bits; before start_iter it is the fp32 all-reduce; vectors and matrices whose compression
// does not pay are all-reduced in fp32; error feedback keeps M = M_hat + residual on every rank; on 2
// ranks the exchange reproduces powerSGD_hook's values (tools/reference/powersgd.py); the state
// (Q, residual) restored into a fresh exchange continues bit for bit; the bytes sent are two
// all-reduces of (rows + cols) * rank floats.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>

#include "comm/communicator.h"
#include "exchange/gradient_exchange.h"
#include "tests/exchange/powersgd_reference.h"

using namespace qtrain;

namespace {

constexpr uint64_t kSeed = 11;

// A conv weight [16, 3, 3, 3] (16 x 27), its bias (a vector), a dense weight 64 x 300 and a 3 x 4
// matrix too small to pay at rank 2 ((3 + 4) * 2 * 2 >= 12).
std::vector<ExchangeTensor> layout() {
  return {{"conv.weight", "conv", "conv2d", 0, 432, 3, 16},
          {"conv.bias", "conv", "conv2d", 432, 16, 16, 0},
          {"dense.weight", "dense", "dense", 448, 64 * 300, 300, 64},
          {"small.weight", "small", "dense", 19648, 12, 4, 3}};
}
constexpr int64_t kArena = 19660;

uint64_t bits_hash(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

float value(int r, int k, int64_t i) {
  const double x = std::sin(0.37 * static_cast<double>(i) + 1.3 * r + 0.71 * k) + 0.25 * std::cos(0.011 * i * (r + 2));
  return static_cast<float>(0.01 * x * x * x + 1e-4 * (r + 1));
}

Tensor gradients(int r, int k) {
  Tensor g = Tensor::empty({kArena}, DType::f32);
  for (int64_t i = 0; i < kArena; ++i) g.data<float>()[i] = value(r, k, i);
  return g;
}

QuantizationConfig quantization(const std::string& yaml) {
  auto source = std::make_shared<ConfigSource>();
  source->file = "test";
  ConfigNode n(YAML::Load(yaml), "quantization", source);
  return QuantizationConfig::parse(n);
}

ExchangeConfig communication(bool overlap) {
  ExchangeConfig c;
  c.overlap = overlap;
  c.bucket_mb = 0.05;  // dense.weight in a bucket of its own, the rest in another
  return c;
}

std::map<std::string, Tensor> state_of(GradientExchange& ex) {
  std::map<std::string, Tensor> m;
  for (auto& [name, t] : ex.state()) m.emplace(name, t);
  return m;
}

std::vector<float> values_of(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.raw(), v.size() * 4);
  return v;
}

}  // namespace

TEST_CASE("powersgd: the same bits on every rank, fp32 before start_iter, M = M_hat + residual", "[powersgd][mpi]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  Context ctx = Context::cpu(kSeed, 1);
  const char* variants[] = {
      "{method: powersgd, rank: 2, start_iter: 2, min_numel: 0}",
      "{method: powersgd, rank: 3, start_iter: 2, min_numel: 0, warm_start: false, error_feedback: false}"};
  for (const char* qyaml : variants)
    for (const bool overlap : {true, false}) {
      INFO(qyaml << " overlap " << overlap << " on " << P << " ranks");
      const QuantizationConfig qc = quantization(qyaml);
      const bool ef = qc.base.error_feedback;
      GradientExchange ex(*comm, Device::cpu(), kSeed, communication(overlap), qc, layout());
      GradientExchange fp32(*comm, Device::cpu(), kSeed, communication(overlap),
                            quantization("{method: fp32, min_numel: 0}"), layout());
      REQUIRE(ex.algorithm(0) == ReduceAlgorithm::powersgd);
      // Compressed: the conv and dense weights; the bias and the 3 x 4 matrix are not (fp32).
      const double compressed = (432.0 + 19200.0) / kArena;
      CHECK(std::abs(ex.fraction_quantized() - compressed) < 1e-12);
      std::map<std::string, Tensor> state = state_of(ex);
      const std::vector<std::string> expected_names =
          ef ? std::vector<std::string>{"conv.weight/powersgd/q", "conv.weight/powersgd/residual",
                                        "dense.weight/powersgd/q", "dense.weight/powersgd/residual"}
             : std::vector<std::string>{"conv.weight/powersgd/q", "dense.weight/powersgd/q"};
      std::vector<std::string> names;
      for (auto& [name, t] : state) names.push_back(name);
      CHECK(names == expected_names);
      CHECK(state.at("dense.weight/powersgd/q").shape() == Shape{qc.base.integer("rank"), 300});
      for (int k = 0; k < 5; ++k) {
        INFO("step " << k);
        Tensor g = gradients(me, k);
        // M = g + residual, as this rank holds it before the step.
        std::vector<float> m = values_of(g);
        if (ef)
          for (const char* name : {"conv.weight", "dense.weight"}) {
            const ExchangeTensor& x = layout()[name[0] == 'c' ? 0 : 2];
            const std::vector<float> e = values_of(state.at(std::string(name) + "/powersgd/residual"));
            for (int64_t i = 0; i < x.numel; ++i) m[static_cast<size_t>(x.offset + i)] += e[static_cast<size_t>(i)];
          }
        Tensor reference = gradients(me, k);
        ex.exchange(ctx, g, static_cast<uint64_t>(k));
        fp32.exchange(ctx, reference, static_cast<uint64_t>(k));
        const std::vector<float> got = values_of(g), plain = values_of(reference);
        // The same bits on every rank: the gradients and the warm-start Q.
        uint64_t h = bits_hash(g.raw(), g.nbytes());
        for (const char* name : {"conv.weight/powersgd/q", "dense.weight/powersgd/q"})
          h ^= bits_hash(state.at(name).raw(), state.at(name).nbytes()) * 31;
        CHECK_FALSE(comm->first_disagreement(h).has_value());  // the same bits on every rank
        if (k < 2) {
          // Before start_iter: the fp32 all-reduce of everything, bit for bit, and no state yet.
          CHECK(std::memcmp(got.data(), plain.data(), got.size() * 4) == 0);
          for (auto& [name, t] : state) {
            const std::vector<float> v = values_of(t);
            CHECK(std::count(v.begin(), v.end(), 0.0f) == static_cast<long>(v.size()));
          }
          continue;
        }
        // Uncompressed tensors: the fp32 mean (another packing of the buffer: a few ulps).
        for (const ExchangeTensor& x : {layout()[1], layout()[3]})
          for (int64_t i = 0; i < x.numel; ++i) {
            const size_t at = static_cast<size_t>(x.offset + i);
            CHECK(std::abs(got[at] - plain[at]) <= 1e-6f * std::abs(plain[at]) + 1e-12f);
          }
        // Compressed tensors: an approximation, not the fp32 mean; with error feedback, every rank's
        // M is M_hat plus its new residual up to the one rounding of residual = M - M_hat.
        int64_t not_conserved = 0, equal_to_mean = 0;
        for (const ExchangeTensor& x : {layout()[0], layout()[2]}) {
          const std::vector<float> e = ef ? values_of(state.at(x.name + "/powersgd/residual")) : std::vector<float>();
          for (int64_t i = 0; i < x.numel; ++i) {
            const size_t at = static_cast<size_t>(x.offset + i);
            equal_to_mean += got[at] == plain[at];
            if (!ef) continue;
            const double diff = static_cast<double>(m[at]) - got[at];
            not_conserved += std::abs(diff - e[static_cast<size_t>(i)]) > std::ldexp(std::abs(diff), -24);
          }
        }
        CHECK(not_conserved == 0);
        CHECK(equal_to_mean < 100);
      }
      // Bytes: two ring all-reduces of (rows + cols) * rank floats per compressed tensor and step.
      const ExchangeStats st = ex.take_stats();
      const int r = qc.base.integer("rank");
      const double ring = 2.0 * (P - 1) / P * 4.0;
      CHECK(st.bytes_sent_per_tensor[2] == Approx(ring * (2 * 19200 + 3 * (64 + 300) * r)));
      CHECK(st.bytes_sent_per_tensor[0] == Approx(ring * (2 * 432 + 3 * (16 + 27) * r)));
    }
}

TEST_CASE("powersgd: on 2 ranks, powerSGD_hook's M_hat, residuals and Q over two steps", "[powersgd][mpi]") {
  using namespace powersgd_test;
  auto comm = make_communicator("auto", Device::cpu());
  if (comm->size() != kWorld) return;  // the reference is a world of 2
  const int me = comm->rank();
  const std::vector<ExchangeTensor> one{{"m", "m", "dense", 0, kRows * kCols, kCols, kRows}};
  // min_compression_rate 0.5: (6 + 5) * 2 * 0.5 < 30, the 6 x 5 matrix is compressed.
  const QuantizationConfig qc =
      quantization("{method: powersgd, rank: 2, start_iter: 0, min_numel: 0, min_compression_rate: 0.5}");
  GradientExchange ex(*comm, Device::cpu(), kSeed, communication(true), qc, one);
  std::map<std::string, Tensor> state = state_of(ex);
  // The reference's first Q in place of a draw (a Q that is not zero is used as the warm start).
  float* q_t = state.at("m/powersgd/q").data<float>();
  for (int j = 0; j < kCols; ++j)
    for (int k = 0; k < kRank; ++k) q_t[k * kCols + j] = reference_q0(j, k);
  Context ctx = Context::cpu(kSeed, 1);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step << " rank " << me);
    const ReferenceStep& ref = kReference[step];
    Tensor g = Tensor::empty({kRows * kCols}, DType::f32);
    for (int i = 0; i < kRows; ++i)
      for (int j = 0; j < kCols; ++j) g.data<float>()[i * kCols + j] = reference_gradient(step, me, i, j);
    ex.exchange(ctx, g, static_cast<uint64_t>(step));
    const float* e = state.at("m/powersgd/residual").data<float>();
    double err_m = 0, err_e = 0, err_q = 0;
    for (int i = 0; i < kRows * kCols; ++i) {
      err_m = std::max(err_m, std::abs(g.data<float>()[i] - ref.m_hat[i]));
      err_e = std::max(err_e, std::abs(e[i] - ref.residual[me][i]));
    }
    for (int j = 0; j < kCols; ++j)
      for (int k = 0; k < kRank; ++k) err_q = std::max(err_q, std::abs(q_t[k * kCols + j] - ref.q_mean[j * kRank + k]));
    CHECK(err_m < 2e-5);
    CHECK(err_e < 2e-5);
    CHECK(err_q < 2e-5);
  }
}

TEST_CASE("powersgd: Q and the residual restored into a fresh exchange continue bit for bit", "[powersgd][mpi]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int me = comm->rank();
  const QuantizationConfig qc = quantization("{method: powersgd, rank: 2, start_iter: 1, min_numel: 0}");
  Context ctx = Context::cpu(kSeed, 1);
  GradientExchange a(*comm, Device::cpu(), kSeed, communication(true), qc, layout());
  for (int k = 0; k < 4; ++k) {
    Tensor g = gradients(me, k);
    a.exchange(ctx, g, static_cast<uint64_t>(k));
  }
  // b: a fresh exchange with a's state (as a resume restores it); c: a fresh one without it.
  GradientExchange b(*comm, Device::cpu(), kSeed, communication(true), qc, layout());
  GradientExchange c(*comm, Device::cpu(), kSeed, communication(true), qc, layout());
  std::map<std::string, Tensor> from = state_of(a);
  for (auto& [name, t] : b.state()) t.copy_from(from.at(name));
  for (int k = 4; k < 7; ++k) {
    INFO("step " << k);
    Tensor ga = gradients(me, k), gb = gradients(me, k), gc = gradients(me, k);
    a.exchange(ctx, ga, static_cast<uint64_t>(k));
    b.exchange(ctx, gb, static_cast<uint64_t>(k));
    c.exchange(ctx, gc, static_cast<uint64_t>(k));
    CHECK(std::memcmp(ga.raw(), gb.raw(), ga.nbytes()) == 0);
    // Without the state the step differs: the test above would notice a state that is not restored.
    if (k == 4) CHECK(std::memcmp(ga.raw(), gc.raw(), ga.nbytes()) != 0);
  }
  std::map<std::string, Tensor> sa = state_of(a), sb = state_of(b);
  for (auto& [name, t] : sa) CHECK(std::memcmp(t.raw(), sb.at(name).raw(), t.nbytes()) == 0);
}

TEST_CASE("powersgd: a NaN in one rank's gradient stops every rank with the same error, naming the tensor",
          "[powersgd][mpi]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int me = comm->rank();
  const QuantizationConfig qc = quantization("{method: powersgd, rank: 2, start_iter: 0, min_numel: 0}");
  Context ctx = Context::cpu(kSeed, 1);
  // Without overlap the buckets run in order on the calling thread, so every rank stops at the same
  // bucket (a later bucket's collective is never started by one rank alone).
  GradientExchange ex(*comm, Device::cpu(), kSeed, communication(false), qc, layout());
  Tensor g = gradients(me, 0);
  if (me == 0) g.data<float>()[448 + 777] = std::nanf("");  // dense.weight on rank 0 only
  REQUIRE_THROWS_AS(ex.exchange(ctx, g, 0), NonFiniteInputError);
  Tensor again = gradients(me, 0);
  if (me == 0) again.data<float>()[448 + 777] = std::nanf("");
  REQUIRE_THROWS_WITH(ex.exchange(ctx, again, 1), Catch::Contains("powersgd: the gradient of dense.weight"));
}

TEST_CASE("powersgd with reduce: sum gives the world size times the mean's gradient and the same state",
          "[powersgd][mpi]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  const QuantizationConfig qc = quantization("{method: powersgd, rank: 2, start_iter: 1, min_numel: 0}");
  ExchangeConfig sum = communication(true);
  sum.mean = false;
  Context ctx = Context::cpu(kSeed, 1);
  GradientExchange a(*comm, Device::cpu(), kSeed, communication(true), qc, layout());
  GradientExchange b(*comm, Device::cpu(), kSeed, sum, qc, layout());
  for (int k = 0; k < 4; ++k) {
    INFO("step " << k);
    Tensor ga = gradients(me, k), gb = gradients(me, k);
    a.exchange(ctx, ga, static_cast<uint64_t>(k));
    b.exchange(ctx, gb, static_cast<uint64_t>(k));
    if (k == 0) continue;  // before start_iter: the fp32 path (tested elsewhere)
    // Compressed tensors: P (a power of two here) times the mean's bits; the residuals and Q alike.
    int64_t wrong = 0;
    for (const ExchangeTensor& x : {layout()[0], layout()[2]})
      for (int64_t i = 0; i < x.numel; ++i)
        wrong += gb.data<float>()[x.offset + i] != ga.data<float>()[x.offset + i] * static_cast<float>(P);
    CHECK(wrong == 0);
    std::map<std::string, Tensor> sa = state_of(a), sb = state_of(b);
    for (auto& [name, t] : sa) CHECK(std::memcmp(t.raw(), sb.at(name).raw(), t.nbytes()) == 0);
  }
}
