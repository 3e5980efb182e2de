// GradientExchange under mpirun (and in a world of one): for every method and algorithm, every rank
// ends each step with bit-identical gradients, equal to a single-process simulation of the same
// algorithm built directly from the quantizers; fp32 allreduce is exact on crafted values; a bucket
// mixing fp16 and bf16 tensors sums each in its own format.
#include <catch2/catch.hpp>
#include <cblas.h>

#include <cmath>
#include <chrono>
#include <cstring>
#include <thread>

#include "comm/communicator.h"
#include "exchange/gradient_exchange.h"
#include "comm/mpi_comm.h"
#include "quant/method.h"
#include "quant/randomk_wire.h"
#include "quant/wire.h"

using namespace qtrain;

namespace {

constexpr uint64_t kSeed = 7;

std::vector<ExchangeTensor> layout() {
  // A weight above min_numel (quantized), a bias below it (fp32), and a second weight whose column
  // count is not a multiple of typical world sizes (uneven stripes).
  return {{"dense1.weight", "dense1", "dense", 0, 64 * 300, 300},
          {"dense1.bias", "dense1", "dense", 19200, 64, 64},
          {"dense2.weight", "dense2", "dense", 19264, 11 * 2048, 2048}};
}
int64_t arena_size() { return 19264 + 11 * 2048; }

// FNV-1a of the tensor's bytes: equal on every rank when the exchange gave every rank the same bits.
uint64_t bits_hash(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = static_cast<const unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

// Gradient-like values of rank r at step k: never zero, heavy-ish tails, distinct per rank.
float value(int r, int k, int64_t i) {
  const double x = std::sin(0.37 * static_cast<double>(i) + 1.3 * r + 0.71 * k) + 0.25 * std::cos(0.011 * i * (r + 2));
  return static_cast<float>(0.01 * x * x * x + 1e-4 * (r + 1));
}

void fill(std::vector<float>& g, int r, int k) {
  for (int64_t i = 0; i < static_cast<int64_t>(g.size()); ++i) g[static_cast<size_t>(i)] = value(r, k, i);
}

// The exchange of one world, simulated in one process with the quantizers and the shared conventions.
class Simulation {
 public:
  Simulation(int P, const ExchangeConfig& cc, const QuantizationConfig& qc)
      : P_(P), cc_(cc), ctx_(Context::cpu(kSeed, 1)) {
    const auto ts = layout();
    for (size_t t = 0; t < ts.size(); ++t) {
      Entry e;
      e.x = ts[t];
      e.spec = qc.resolve(e.x.layer_name, e.x.layer_type, e.x.numel);
      e.algorithm = cc.algorithm_for(e.spec);
      if (e.algorithm != ReduceAlgorithm::allreduce) {
        e.q = make_quantizer(e.spec);
        e.owner_q = make_quantizer(method_info(e.spec.method).owner_spec(e.spec));
        e.vote = method_info(e.spec.method).combine == QuantCombine::vote;
      }
      const int ti = static_cast<int>(t);
      const int64_t unit = GradientExchange::stripe_unit(e.spec, e.x.column);
      e.bounds = GradientExchange::stripe_bounds(e.x.numel, unit, P);
      const int K = GradientExchange::piece_count(e.bounds, unit, static_cast<int64_t>(cc.piece_mb * 1024 * 1024 / 4));
      for (int s = 0; s < P; ++s)
        e.pieces.push_back(GradientExchange::piece_bounds(e.bounds[static_cast<size_t>(s)],
                                                          e.bounds[static_cast<size_t>(s) + 1], unit, K));
      for (int r = 0; r < P; ++r) {
        e.whole.emplace_back(kSeed, r, GradientExchange::state_id(ti, StreamRole::whole, 0));
        // Owner r's states for its pieces; rank r's first-quantization states for stripe s, piece k.
        e.owner.emplace_back();
        for (int k = 0; k < K; ++k)
          e.owner.back().emplace_back(kSeed, r, GradientExchange::piece_state_id(ti, true, r, k, P));
        e.stripes.emplace_back(static_cast<size_t>(P));
        for (int s = 0; s < P; ++s)
          for (int k = 0; k < K; ++k)
            e.stripes.back()[static_cast<size_t>(s)].emplace_back(kSeed, r,
                                                                  GradientExchange::piece_state_id(ti, false, s, k, P));
      }
      entries_.push_back(std::move(e));
    }
  }

  // grads[r]: rank r's arena; returns the reduced arena every rank must hold.
  std::vector<float> step(const std::vector<std::vector<float>>& grads, uint64_t step) {
    ctx_.set_step(step);
    std::vector<float> out(static_cast<size_t>(arena_size()), 0.0f);
    const float scale = cc_.mean ? 1.0f / static_cast<float>(P_) : 1.0f;
    for (Entry& e : entries_) {
      const int64_t n = e.x.numel;
      float* dst = out.data() + e.x.offset;
      if (e.algorithm == ReduceAlgorithm::allreduce) {
        QT_CHECK(e.spec.method == QuantMethod::fp32, "the simulation covers the fp32 native path only");
        // MPI's sum order is its own: for the crafted-value test only; elsewhere the values of the
        // fp32 bias are compared with a tolerance below.
        for (int64_t i = 0; i < n; ++i) {
          double s = 0;
          for (int r = 0; r < P_; ++r) s += grads[static_cast<size_t>(r)][static_cast<size_t>(e.x.offset + i)];
          dst[i] = static_cast<float>(s) * scale;
        }
      } else if (e.algorithm == ReduceAlgorithm::allgather) {
        const int64_t col = GradientExchange::encode_column(e.spec, n, e.x.column);
        for (int r = 0; r < P_; ++r) {
          std::vector<uint8_t> buf(e.q->max_encoded_bytes(n, col));
          const size_t len =
              e.q->encode(ctx_, {grads[static_cast<size_t>(r)].data() + e.x.offset, static_cast<size_t>(n)}, col,
                          e.whole[static_cast<size_t>(r)], buf);
          if (r == 0)
            e.q->decode(ctx_, {buf.data(), len}, n, {dst, static_cast<size_t>(n)});
          else
            e.q->decode_add(ctx_, {buf.data(), len}, n, {dst, static_cast<size_t>(n)});
        }
        finish(e, dst, n, scale);
      } else if (e.algorithm == ReduceAlgorithm::allreduce_compact) {
        // Every rank's payload decoded and summed in rank order; the exchange sums the bodies with
        // MPI, whose order is its own (compared with a tolerance below; exact on crafted values in
        // the randomk test).
        for (int r = 0; r < P_; ++r) {
          std::vector<uint8_t> buf(e.q->max_encoded_bytes(n, 1));
          const size_t len =
              e.q->encode(ctx_, {grads[static_cast<size_t>(r)].data() + e.x.offset, static_cast<size_t>(n)}, 1,
                          e.whole[static_cast<size_t>(r)], buf);
          if (r == 0)
            e.q->decode(ctx_, {buf.data(), len}, n, {dst, static_cast<size_t>(n)});
          else
            e.q->decode_add(ctx_, {buf.data(), len}, n, {dst, static_cast<size_t>(n)});
        }
        finish(e, dst, n, scale);
      } else {
        // Stripe s, piece k: every rank's encoding summed in rank order, scaled, re-encoded by owner s.
        for (int s = 0; s < P_; ++s) {
          const std::vector<int64_t>& pb = e.pieces[static_cast<size_t>(s)];
          for (size_t k = 0; k + 1 < pb.size(); ++k) {
            const int64_t b = pb[k], len = pb[k + 1] - b;
            if (len == 0) continue;
            const int64_t col = GradientExchange::encode_column(e.spec, len, e.x.column);
            std::vector<float> acc(static_cast<size_t>(len));
            for (int r = 0; r < P_; ++r) {
              std::vector<uint8_t> buf(e.q->max_encoded_bytes(len, col));
              const size_t bytes =
                  e.q->encode(ctx_, {grads[static_cast<size_t>(r)].data() + e.x.offset + b, static_cast<size_t>(len)},
                              col, e.stripes[static_cast<size_t>(r)][static_cast<size_t>(s)][k], buf);
              if (r == 0)
                e.q->decode(ctx_, {buf.data(), bytes}, len, acc);
              else
                e.q->decode_add(ctx_, {buf.data(), bytes}, len, acc);
            }
            finish(e, acc.data(), len, scale);
            std::vector<uint8_t> buf(e.owner_q->max_encoded_bytes(len, col));
            const size_t bytes = e.owner_q->encode(ctx_, acc, col, e.owner[static_cast<size_t>(s)][k], buf);
            e.q->decode(ctx_, {buf.data(), bytes}, len, {dst + b, static_cast<size_t>(len)});
          }
        }
      }
    }
    return out;
  }

  // Whether tensor t's values are compared with a tolerance (MPI's sums: fp32 and randomk's bodies).
  bool summed_by_mpi(size_t t) const {
    return entries_[t].algorithm == ReduceAlgorithm::allreduce ||
           entries_[t].algorithm == ReduceAlgorithm::allreduce_compact;
  }

 private:
  struct Entry {
    ExchangeTensor x;
    QuantSpec spec;
    ReduceAlgorithm algorithm;
    std::unique_ptr<Quantizer> q;
    std::unique_ptr<Quantizer> owner_q;  // the owner's re-encoding (the method's owner_spec)
    bool vote = false;                   // signsgd: the sum is finished by the majority vote
    std::vector<int64_t> bounds;
    std::vector<std::vector<int64_t>> pieces;  // per stripe: piece boundaries
    std::vector<QuantState> whole;
    std::vector<std::vector<QuantState>> owner;                 // [owner][piece]
    std::vector<std::vector<std::vector<QuantState>>> stripes;  // [rank][stripe][piece]
  };
  // The sum finished as the exchange does: the vote's +-1 (ties +1), or times the mean's 1/P.
  static void finish(const Entry& e, float* x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; ++i) x[i] = e.vote ? (x[i] >= 0.0f ? 1.0f : -1.0f) : x[i] * scale;
  }

  int P_;
  ExchangeConfig cc_;
  Context ctx_;
  std::vector<Entry> entries_;
};

QuantizationConfig quantization(const std::string& yaml) {
  auto source = std::make_shared<ConfigSource>();
  source->file = "test";
  ConfigNode n(YAML::Load(yaml), "quantization", source);
  return QuantizationConfig::parse(n);
}

ExchangeConfig communication(const std::string& algorithm, bool overlap, double piece_mb = 4) {
  ExchangeConfig c;
  c.algorithm = algorithm;
  c.overlap = overlap;
  c.bucket_mb = 0.05;  // several buckets for this small model
  c.piece_mb = piece_mb;
  return c;
}

}  // namespace

// A method names its exchange by the algorithm's registry name (quant/ sits below exchange/ and
// cannot hold its type); every registered method's name resolves to an algorithm of
// exchange/algorithms/algorithms.def, so a misspelled or removed one fails here, not in a run.
TEST_CASE("every method's default algorithm is a registered exchange algorithm", "[exchange]") {
  for (const QuantMethodInfo* m : quant_methods()) {
    INFO(m->name << ": algorithm '" << m->algorithm << "'");
    const ReduceAlgorithm a = default_algorithm(m->id);
    CHECK(std::string(reduce_algorithm_name(a)) == m->algorithm);
  }
}

TEST_CASE("every method and algorithm: identical on all ranks and equal to the simulation", "[exchange][mpi]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{method: fp16}", "allreduce"},
      {"{method: bf16}", "allreduce"},
      {"{method: dettmers8}", "allgather"},
      {"{method: dettmers8, variant: linear}", "reduce_scatter_allgather"},
      {"{method: onebit}", "reduce_scatter_allgather"},
      {"{method: onebit, mode: bucket, bucket: 64}", "allgather"},
      {"{method: qsgd, bits: 4}", "reduce_scatter_allgather"},
      {"{method: qsgd, bits: 2, norm: l2}", "allgather"},
      {"{method: qsgd, bits: 8}", "reduce_scatter_allgather"},
      {"{method: adaptive}", "reduce_scatter_allgather"},
      {"{method: adaptive}", "allgather"},
      {"{method: topk, fraction: 0.02}", "allgather"},
      {"{method: terngrad}", "reduce_scatter_allgather"},
      {"{method: terngrad, clip: 0, bucket: 512}", "allgather"},
      {"{method: efsign}", "allgather"},
      {"{method: efsign}", "reduce_scatter_allgather"},
      {"{method: signsgd}", "reduce_scatter_allgather"},
      {"{method: signsgd, momentum: 0.9}", "reduce_scatter_allgather"},
      {"{method: signsgd, momentum: 0.9}", "allgather"},
      {"{method: randomk, fraction: 0.05}", "auto"},
      {"{method: randomk, fraction: 0.05}", "allreduce"},
      {"{method: randomk}", "allgather"},
      {"{method: codebook}", "auto"},
      {"{method: codebook, bits: 4, error_feedback: true}", "allgather"},
  };
  for (const auto& [qyaml, algorithm] : cases) {
    // Whole stripes (these tensors are far below piece_mb's default), and reduce-scatter +
    // allgather in pieces of 1048 values: 3 to 6 per stripe, some empty on the 2048-value columns.
    const bool striped = algorithm == "reduce_scatter_allgather";
    // The pieces go through the pipelined schedule on point-to-point messages, or, when a piece's
    // payload exceeds one MPI message (forced here with 256-byte messages), piece by piece through
    // the streaming collectives: both must give the simulation's bits.
    struct Variant {
      bool overlap;
      double piece_mb;
      size_t max_message;
    };
    std::vector<Variant> variants = {{true, 4.0, 0}, {false, 4.0, 0}};
    if (striped) {
      variants.push_back({true, 0.004, 0});
      variants.push_back({true, 0.004, 256});
    }
    for (const auto& [overlap, piece_mb, max_message] : variants) {
      INFO(qyaml << " " << algorithm << " overlap " << overlap << " piece_mb " << piece_mb << " max message "
                 << max_message << " on " << P << " ranks");
      auto* mpi = dynamic_cast<MpiComm*>(comm.get());
      if (mpi) mpi->set_max_message_bytes(max_message > 0 ? max_message : size_t{1} << 30);
      const QuantizationConfig qc = quantization(qyaml);
      const ExchangeConfig cc = communication(algorithm, overlap, piece_mb);
      GradientExchange ex(*comm, Device::cpu(), kSeed, cc, qc, layout());
      const bool simulated = qc.base.method != QuantMethod::fp16 && qc.base.method != QuantMethod::bf16;
      std::unique_ptr<Simulation> sim;
      if (simulated) sim = std::make_unique<Simulation>(P, cc, qc);
      Context ctx = Context::cpu(kSeed, 1);
      for (int k = 0; k < 3; ++k) {  // several steps: error-feedback residuals carry over
        Tensor grads = Tensor::zeros({arena_size()}, DType::f32);
        std::vector<float> mine(static_cast<size_t>(arena_size()));
        fill(mine, me, k);
        std::memcpy(grads.data<float>(), mine.data(), mine.size() * 4);
        ex.exchange(ctx, grads, static_cast<uint64_t>(k));
        // Bit-identical on every rank.
        const uint64_t h = bits_hash(grads);
        const auto all = comm->all_gather_u64(h);
        // CHECK, not REQUIRE: a rank leaving the test early would leave the others in a collective.
        for (uint64_t other : all) CHECK(other == all[0]);
        if (!simulated) continue;
        std::vector<std::vector<float>> world(static_cast<size_t>(P),
                                              std::vector<float>(static_cast<size_t>(arena_size())));
        for (int r = 0; r < P; ++r) fill(world[static_cast<size_t>(r)], r, k);
        const std::vector<float> expected = sim->step(world, static_cast<uint64_t>(k));
        const float* got = grads.data<float>();
        int64_t mismatches = 0;
        std::string first;
        for (size_t ti = 0; ti < layout().size(); ++ti) {
          const ExchangeTensor& t = layout()[ti];
          for (int64_t i = 0; i < t.numel; ++i) {
            const size_t at = static_cast<size_t>(t.offset + i);
            // Native sums (the small fp32 bias, randomk's bodies): MPI may add in another order, so a
            // few ulps; the other quantized tensors: the same bits.
            const bool same = sim->summed_by_mpi(ti)
                                  ? std::abs(got[at] - expected[at]) <= 1e-5f * std::abs(expected[at]) + 1e-9f
                                  : std::memcmp(&got[at], &expected[at], 4) == 0;
            if (!same && mismatches++ == 0)
              first = fmt::format("{} element {}: exchange {} simulation {}", t.name, i, got[at], expected[at]);
          }
        }
        INFO("first mismatch: " << first);
        CHECK(mismatches == 0);
      }
      const ExchangeStats st = ex.take_stats();
      REQUIRE(st.steps == 3);
      if (P > 1) REQUIRE(st.bytes_sent > 0);
      REQUIRE(ex.fraction_quantized() > 0.99);
    }
  }
}

TEST_CASE("fp32 allreduce is exact on crafted values", "[exchange][mpi]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  GradientExchange ex(*comm, Device::cpu(), kSeed, communication("auto", true), quantization("{method: fp32}"),
                      layout());
  Tensor grads = Tensor::empty({arena_size()}, DType::f32);
  float* g = grads.data<float>();
  // Small integers times a power of two: every partial sum is exact, so any order gives the same.
  for (int64_t i = 0; i < arena_size(); ++i) g[i] = static_cast<float>((i % 97) * (me + 1)) * 0.25f;
  Context ctx = Context::cpu(kSeed, 1);
  ex.exchange(ctx, grads, 0);
  const int ranks_sum = P * (P + 1) / 2;  // 1 + 2 + ... + P, the sum of the ranks' factors (me + 1)
  const auto rank_sum = static_cast<float>(ranks_sum);
  int64_t wrong = 0;
  for (int64_t i = 0; i < arena_size(); ++i)
    wrong += g[i] != static_cast<float>(i % 97) * 0.25f * rank_sum / static_cast<float>(P);
  CHECK(wrong == 0);
}

TEST_CASE("small_tensors: with_quantized carries the fp32 bias in the payload collectives, exactly",
          "[exchange][mpi]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  const auto bias = layout()[1];
  for (const char* algorithm : {"reduce_scatter_allgather", "allgather"}) {
    ExchangeConfig native = communication(algorithm, true);
    ExchangeConfig carried = native;
    carried.small_tensors = "with_quantized";
    GradientExchange a(*comm, Device::cpu(), kSeed, native, quantization("{method: qsgd}"), layout());
    GradientExchange b(*comm, Device::cpu(), kSeed, carried, quantization("{method: qsgd}"), layout());
    INFO(algorithm << " on " << P << " ranks");
    CHECK(reduce_algorithm_name(a.algorithm(1)) == std::string("allreduce"));
    CHECK(reduce_algorithm_name(b.algorithm(1)) == std::string(algorithm));
    Context ctx = Context::cpu(kSeed, 1);
    for (int k = 0; k < 2; ++k) {
      std::vector<float> mine(static_cast<size_t>(arena_size()));
      fill(mine, me, k);
      // The bias: small integers times a power of two, so that every order of the sum is exact.
      for (int64_t i = 0; i < bias.numel; ++i)
        mine[static_cast<size_t>(bias.offset + i)] = static_cast<float>((i % 13 - 6) * (me + 1)) * 0.5f;
      Tensor ga = Tensor::zeros({arena_size()}, DType::f32), gb = Tensor::zeros({arena_size()}, DType::f32);
      std::memcpy(ga.data<float>(), mine.data(), mine.size() * 4);
      std::memcpy(gb.data<float>(), mine.data(), mine.size() * 4);
      a.exchange(ctx, ga, static_cast<uint64_t>(k));
      b.exchange(ctx, gb, static_cast<uint64_t>(k));
      CHECK_FALSE(comm->first_disagreement(bits_hash(gb)).has_value());
      // The quantized weights keep their own streams and payloads: the same bits either way.
      CHECK(std::memcmp(ga.data<float>(), gb.data<float>(), static_cast<size_t>(arena_size()) * 4) == 0);
      const float ranks_sum = static_cast<float>(P * (P + 1) / 2);
      int64_t wrong = 0;
      for (int64_t i = 0; i < bias.numel; ++i)
        wrong += gb.data<float>()[bias.offset + i] !=
                 static_cast<float>(i % 13 - 6) * 0.5f * ranks_sum / static_cast<float>(P);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("allreduce of quantized payloads is a configuration error", "[exchange]") {
  auto comm = make_communicator("auto", Device::cpu());
  REQUIRE_THROWS_WITH(GradientExchange(*comm, Device::cpu(), kSeed, communication("allreduce", true),
                                       quantization("{method: qsgd}"), layout()),
                      Catch::Contains("allreduce cannot carry qsgd payloads"));
}

TEST_CASE("a bucket holding fp16 and bf16 tensors sums each in its own format", "[exchange][mpi]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  // One bucket (the default 25 MB): dense1.weight in fp16, dense2.weight in bf16, the bias in fp32.
  const QuantizationConfig qc = quantization("{method: fp16, overrides: [{match: {name: dense2}, method: bf16}]}");
  ExchangeConfig cc = communication("auto", true);
  cc.bucket_mb = 25;
  GradientExchange ex(*comm, Device::cpu(), kSeed, cc, qc, layout());
  REQUIRE(ex.num_buckets() == 1);
  Context ctx = Context::cpu(kSeed, 1);
  for (int k = 0; k < 2; ++k) {
    Tensor grads = Tensor::zeros({arena_size()}, DType::f32);
    std::vector<float> mine(static_cast<size_t>(arena_size()));
    fill(mine, me, k);
    std::memcpy(grads.data<float>(), mine.data(), mine.size() * 4);
    ex.exchange(ctx, grads, static_cast<uint64_t>(k));
    CHECK_FALSE(comm->first_disagreement(bits_hash(grads)).has_value());  // the same bits on every rank
    // Each weight holds values of its own format (times the mean's power-of-two 1/P), close to the
    // mean: bf16 keeps 8 significant bits, fp16 11; each combine of the sum rounds once.
    const float* got = grads.data<float>();
    for (const ExchangeTensor& t : layout()) {
      if (t.numel < 10000) continue;  // the fp32 bias
      const bool bf16 = t.layer_name == "dense2";
      int64_t wrong_format = 0, far = 0, beyond_bf16 = 0;
      for (int64_t i = 0; i < t.numel; ++i) {
        const int64_t at = t.offset + i;
        uint32_t bits;
        std::memcpy(&bits, &got[at], 4);
        wrong_format += (bits & (bf16 ? 0xFFFFu : 0x1FFFu)) != 0;
        beyond_bf16 += (bits & 0xFFFFu) != 0;
        double mean = 0, mean_abs = 0;
        for (int r = 0; r < P; ++r) {
          mean += value(r, k, at) / P;
          mean_abs += std::abs(value(r, k, at)) / P;
        }
        far += std::abs(got[at] - mean) > mean_abs * (bf16 ? 1.0 / 64 : 1.0 / 512) + 1e-7;
      }
      INFO(t.name << " on " << P << " ranks, step " << k);
      CHECK(wrong_format == 0);
      CHECK(far == 0);
      if (!bf16) CHECK(beyond_bf16 > 0);  // fp16, not bf16, values
    }
  }
}

TEST_CASE("two levels: every rank the same bits; fp32 the exact sum; state per level", "[exchange][mpi][hierarchy]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  // Nodes of two ranks where the world splits so (4 ranks: 2 x 2), else nodes of one rank.
  const int per_node = P % 2 == 0 ? 2 : 1;
  Context ctx = Context::cpu(kSeed, 1);
  // Pieces of the default size (one chunk), and pieces so small that the arena is cut into 4 chunks
  // pipelined through the cross-node exchange's thread.
  for (const double piece_mb : {4.0, 0.02})
    for (const char* method : {"fp32", "qsgd", "onebit", "dettmers8"}) {
      ExchangeConfig cc = communication("auto", true);
      cc.hierarchy = "two_level";
      cc.ranks_per_node = per_node;
      cc.piece_mb = piece_mb;
      const QuantizationConfig qc = quantization(fmt::format("{{method: {}}}", method));
      GradientExchange ex(*comm, Device::cpu(), kSeed, cc, qc, layout());
      INFO(method << " on " << P << " ranks, nodes of " << per_node << ", pieces of " << piece_mb << " MB");
      if (P > 1) CHECK_THAT(ex.describe(), Catch::Contains("two levels"));  // a world of one is flat
      if (per_node > 1 && piece_mb < 1) CHECK_THAT(ex.describe(), Catch::Contains("in 4 chunks"));
      for (int k = 0; k < 3; ++k) {
        Tensor grads = Tensor::empty({arena_size()}, DType::f32);
        std::vector<float> mine(static_cast<size_t>(arena_size()));
        if (std::string(method) == "fp32") {
          // Small integers times a power of two: every order of summation gives the exact mean.
          for (int64_t i = 0; i < arena_size(); ++i)
            mine[static_cast<size_t>(i)] = static_cast<float>((i % 89) * (me + 1) + k) * 0.125f;
        } else {
          fill(mine, me, k);
        }
        std::memcpy(grads.data<float>(), mine.data(), mine.size() * 4);
        ex.exchange(ctx, grads, static_cast<uint64_t>(k));
        CHECK_FALSE(comm->first_disagreement(bits_hash(grads)).has_value());  // the same bits on every rank
        const float* g = grads.data<float>();
        int64_t wrong = 0;
        for (int64_t i = 0; i < arena_size(); ++i) {
          if (std::string(method) == "fp32") {
            const int64_t ranks_sum = P * (P + 1) / 2;  // 1 + 2 + ... + P: every rank's factor summed
            const float exact = static_cast<float>((i % 89) * ranks_sum + P * k) * 0.125f / static_cast<float>(P);
            wrong += g[i] != exact;
          } else {
            wrong += !std::isfinite(g[i]);
          }
        }
        CHECK(wrong == 0);
      }
      if (P > 1)
        for (const auto& [name, t] : ex.state()) CHECK(name.rfind("inter/", 0) == 0);
      if (std::string(method) == "onebit") CHECK(!ex.state().empty());  // error feedback between nodes
    }
}

TEST_CASE("two levels in chunks: overlapping backward gives the bits of the exchange after it",
          "[exchange][mpi][hierarchy]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  const int per_node = P % 2 == 0 ? 2 : 1;
  Context ctx = Context::cpu(kSeed, 1);
  for (const char* method : {"fp32", "qsgd", "onebit"}) {
    const QuantizationConfig qc = quantization(fmt::format("{{method: {}}}", method));
    std::vector<uint64_t> hashes;
    for (const bool overlap : {false, true}) {
      ExchangeConfig cc = communication("auto", overlap, 0.02);  // 4 chunks
      cc.hierarchy = "two_level";
      cc.ranks_per_node = per_node;
      GradientExchange ex(*comm, Device::cpu(), kSeed, cc, qc, layout());
      INFO(method << " on " << P << " ranks, overlap " << overlap);
      uint64_t h = 0;
      for (int k = 0; k < 3; ++k) {
        Tensor grads = Tensor::empty({arena_size()}, DType::f32);
        std::vector<float> mine(static_cast<size_t>(arena_size()));
        fill(mine, me, k);
        std::memcpy(grads.data<float>(), mine.data(), mine.size() * 4);
        // As backward reports them: the last tensor first, a pause between them.
        ex.begin_step(grads, static_cast<uint64_t>(k));
        for (int t = static_cast<int>(layout().size()) - 1; t >= 0; --t) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          ex.tensor_ready(ctx, t);
        }
        ex.finish_step();
        h = h * 31 + bits_hash(grads);
      }
      CHECK_FALSE(comm->first_disagreement(h).has_value());  // the same bits on every rank
      hashes.push_back(h);
    }
    CHECK(hashes[0] == hashes[1]);
  }
}

TEST_CASE("two levels leave OpenBLAS's thread count as the run set it", "[exchange][mpi][hierarchy]") {
  auto comm = make_communicator("auto", Device::cpu());
  if (comm->size() % 2 != 0) return;               // nodes of 2 ranks (a world of one is flat)
  const Context compute = Context::cpu(kSeed, 2);  // as the trainer's context sets it, before the exchange
  if (compute.cpu_threads() < 2) return;           // an OpenBLAS that cannot run 2 threads here
  ExchangeConfig cc = communication("auto", true);
  cc.hierarchy = "two_level";
  cc.ranks_per_node = 2;
  const GradientExchange ex(*comm, Device::cpu(), kSeed, cc, quantization("{method: qsgd}"), layout());
  REQUIRE(ex.two_levels());
  CHECK(openblas_get_num_threads() == compute.cpu_threads());
}

TEST_CASE("two levels: unequal nodes and impossible requests are errors naming the setting", "[exchange][hierarchy]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size();
  if (P == 4) {
    ExchangeConfig cc = communication("auto", true);
    cc.hierarchy = "two_level";
    cc.ranks_per_node = 3;
    REQUIRE_THROWS_WITH(GradientExchange(*comm, Device::cpu(), kSeed, cc, quantization("{method: qsgd}"), layout()),
                        Catch::Contains("communication.ranks_per_node: 4 ranks do not split into nodes of 3"));
  }
  // auto on one node of several ranks, or nodes of one rank: flat.
  ExchangeConfig cc = communication("auto", true);
  cc.ranks_per_node = 1;
  GradientExchange flat(*comm, Device::cpu(), kSeed, cc, quantization("{method: qsgd}"), layout());
  CHECK_THAT(flat.describe(), !Catch::Contains("two levels"));
}

TEST_CASE("signsgd: the majority vote of the ranks' signs, +1 on ties, the same on every rank",
          "[exchange][mpi][vote]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  // Rank r's value i is positive when bit r of i % 16 is set: with P ranks, i votes +1 when at least
  // half of bits 0 .. P-1 are set (ties, e.g. 2 of 4, vote +1), else -1. Magnitudes differ per rank
  // and position, which a sign cannot see.
  auto crafted = [](int r, int64_t i) {
    const float magnitude = 0.001f * static_cast<float>(1 + (i * 7 + r) % 5);
    return (i % 16) >> r & 1 ? magnitude : -magnitude;
  };
  for (const char* algorithm : {"allgather", "reduce_scatter_allgather"}) {
    for (const char* q : {"{method: signsgd}", "{method: signsgd, momentum: 0.9}"}) {
      INFO(q << " " << algorithm << " on " << P << " ranks");
      GradientExchange ex(*comm, Device::cpu(), kSeed, communication(algorithm, true, 0.004), quantization(q),
                          layout());
      Context ctx = Context::cpu(kSeed, 1);
      for (int k = 0; k < 2; ++k) {  // with momentum, m keeps each value's sign: the same vote
        Tensor grads = Tensor::empty({arena_size()}, DType::f32);
        for (int64_t i = 0; i < arena_size(); ++i) grads.data<float>()[i] = crafted(me, i);
        ex.exchange(ctx, grads, static_cast<uint64_t>(k));
        CHECK_FALSE(comm->first_disagreement(bits_hash(grads)).has_value());  // the same bits on every rank
        int64_t wrong = 0;
        for (const ExchangeTensor& t : layout()) {
          if (t.numel < 10000) continue;  // the fp32 bias: the mean
          for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
            int plus = 0;
            for (int r = 0; r < P; ++r) plus += (i % 16) >> r & 1;
            const float vote = 2 * plus >= P ? 1.0f : -1.0f;  // not scaled by 1/P
            wrong += grads.data<float>()[i] != vote;
          }
        }
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("randomk: the compact allreduce sums the k values at the indices every rank shares",
          "[exchange][mpi][randomk]") {
  auto comm = make_communicator("auto", Device::cpu());
  const int P = comm->size(), me = comm->rank();
  // Small integers times 1/4: every partial sum is exact, so MPI's order cannot change the result.
  auto crafted = [](int r, int k, int64_t i) { return static_cast<float>((i * 13 + 5 * r + 3 * k) % 41 - 20) * 0.25f; };
  const QuantizationConfig qc = quantization("{method: randomk, fraction: 0.05, error_feedback: false}");
  ExchangeConfig cc = communication("auto", true);
  cc.mean = false;  // the sum itself, not a mean whose 1/P rounds
  GradientExchange ex(*comm, Device::cpu(), kSeed, cc, qc, layout());
  for (int t = 0; t < 3; ++t)
    CHECK(ex.algorithm(t) == (layout()[static_cast<size_t>(t)].numel < 10000 ? ReduceAlgorithm::allreduce
                                                                             : ReduceAlgorithm::allreduce_compact));
  Context ctx = Context::cpu(kSeed, 1);
  for (int k = 0; k < 2; ++k) {
    Tensor grads = Tensor::empty({arena_size()}, DType::f32);
    for (int64_t i = 0; i < arena_size(); ++i) grads.data<float>()[i] = crafted(me, k, i);
    ex.exchange(ctx, grads, static_cast<uint64_t>(k));
    CHECK_FALSE(comm->first_disagreement(bits_hash(grads)).has_value());  // the same bits on every rank
    int64_t wrong = 0, sent = 0;
    for (size_t t = 0; t < layout().size(); ++t) {
      const ExchangeTensor& x = layout()[t];
      if (x.numel < 10000) continue;
      // The indices from the stream of (seed, step, tensor) alone (wire::randomk_index).
      const PhiloxKey key =
          QuantState(kSeed, 0, GradientExchange::state_id(static_cast<int>(t), StreamRole::whole, 0)).shared_rng_key(k);
      const int64_t kk = wire::count_for_proportion(0.05, x.numel);
      std::vector<char> chosen(static_cast<size_t>(x.numel), 0);
      for (int64_t j = 0; j < kk; ++j) chosen[static_cast<size_t>(wire::randomk_index(key, j, x.numel, kk))] = 1;
      for (int64_t i = 0; i < x.numel; ++i) {
        float sum = 0;
        for (int r = 0; r < P; ++r) sum += crafted(r, k, x.offset + i);
        wrong += grads.data<float>()[x.offset + i] != (chosen[static_cast<size_t>(i)] ? sum : 0.0f);
        sent += chosen[static_cast<size_t>(i)];
      }
    }
    CHECK(sent == wire::count_for_proportion(0.05, 64 * 300) + wire::count_for_proportion(0.05, 11 * 2048));
    CHECK(wrong == 0);
  }
  // Only the k values of each tensor cross the wire: 2 (P - 1) / P of 4k bytes per rank and step.
  const ExchangeStats st = ex.take_stats();
  if (P > 1) CHECK(st.bytes_sent_per_tensor[0] == Approx(2.0 * 2 * (P - 1) / P * 4 * 960));
}
