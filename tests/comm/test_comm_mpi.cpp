// MpiComm and make_communicator under mpirun (1, 2 and 4 ranks), with exact expectations on crafted
// values (comm_test_util.h). Every collective test runs three times: with the default message limit
// (one MPI call), with 64 bytes (several windows and pieces) and with 7 bytes (one or a few elements
// per call, and the point-to-point path of all_to_all_bytes). Checks use CHECK so that every rank
// always makes the same sequence of collective calls, even after a failed expectation.
#include <catch2/catch.hpp>

#include <cstring>

#include "comm/communicator.h"
#include "comm/transport_check.h"
#include "comm/mpi_comm.h"
#include "quant/numerics.h"
#include "tests/comm/comm_test_util.h"

using namespace qtrain;
using namespace qtrain::comm_test;
using Catch::Contains;

namespace {

constexpr size_t kDefaultLimit = size_t{1} << 30;

// The message limits each collective test runs with (the same sequence on every rank). A macro:
// GENERATE must appear in the test case itself, and as<> stops it from storing a reference to
// kDefaultLimit (Catch2 v2 deduces a reference type from an lvalue).
#define MESSAGE_LIMIT() GENERATE(as<size_t>{}, kDefaultLimit, 64, 7)

std::string where(const Communicator& comm) {
  return "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size());
}

// Sums n crafted f32 and f64 values per rank (comm_test_util.h) and checks every element is exact.
void check_exact_f32_f64_sums(MpiComm& comm, Context& ctx, size_t n) {
  const int p = comm.size(), r = comm.rank();
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = f32_value(r, i);
  comm.all_reduce_sum(ctx, x.data(), static_cast<int64_t>(n), ReduceType::f32);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += x[i] != f32_sum(p, i);
  CHECK(wrong == 0);

  std::vector<double> y(n);
  for (size_t i = 0; i < n; ++i) y[i] = f64_value(r, i);
  comm.all_reduce_sum(ctx, y.data(), static_cast<int64_t>(n), ReduceType::f64);
  wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += y[i] != f64_sum(p, i);
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("MpiComm reports the world", "[mpi]") {
  MpiComm comm;
  int rank = -1, size = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  CHECK(comm.rank() == rank);
  CHECK(comm.size() == size);
  CHECK(std::string(comm.name()) == "mpi");
  CHECK(comm.device() == Device::cpu());
  CHECK_FALSE(comm.cuda_aware());  // a CPU-only Open MPI here; the CUDA tests cover the other case
  CHECK(comm.max_message_bytes() == kDefaultLimit);
  CHECK_THROWS_WITH(comm.set_max_message_bytes(0), Contains("set_max_message_bytes: 0 is outside"));
  CHECK_THROWS_WITH(comm.set_max_message_bytes(size_t{1} << 31), Contains("MPI counts are int"));
}

TEST_CASE("all_reduce_sum of f32 and f64 is exact on crafted values", "[mpi]") {
  MpiComm comm;
  comm.set_max_message_bytes(MESSAGE_LIMIT());
  INFO(where(comm) << ", message limit " << comm.max_message_bytes());
  Context ctx = Context::cpu(1);

  for (size_t n : {size_t{1}, size_t{1001}}) {
    check_exact_f32_f64_sums(comm, ctx, n);
  }
  // Zero elements: nothing to do, on every rank.
  comm.all_reduce_sum(ctx, nullptr, 0, ReduceType::f32);
}

TEST_CASE("all_reduce_sum of f16 and bf16 adds in fp32 and rounds to nearest even", "[mpi]") {
  using namespace qtrain::quant_detail;
  MpiComm comm;
  comm.set_max_message_bytes(MESSAGE_LIMIT());
  INFO(where(comm) << ", message limit " << comm.max_message_bytes());
  Context ctx = Context::cpu(1);
  const int p = comm.size(), r = comm.rank();

  SECTION("sums of small multiples of 1/4 are exact") {
    const size_t n = 777;
    std::vector<uint16_t> h(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      h[i] = float_to_half(small_value(r, i));
      b[i] = float_to_bf16(small_value(r, i));
    }
    comm.all_reduce_sum(ctx, h.data(), static_cast<int64_t>(n), ReduceType::f16);
    comm.all_reduce_sum(ctx, b.data(), static_cast<int64_t>(n), ReduceType::bf16);
    size_t wrong_h = 0, wrong_b = 0;
    for (size_t i = 0; i < n; ++i) {
      wrong_h += half_to_float(h[i]) != small_sum(p, i);
      wrong_b += bf16_to_float(b[i]) != small_sum(p, i);
    }
    CHECK(wrong_h == 0);
    CHECK(wrong_b == 0);
  }

  SECTION("rounding cases: rank 0 gives a, rank 1 gives b, the rest +0") {
    for (bool bf16 : {false, true}) {
      const auto& cases = bf16 ? bf16_rounding_cases() : f16_rounding_cases();
      // Each case repeated so that the 7-byte limit splits the buffer into many calls.
      const size_t n = cases.size() * 25;
      std::vector<uint16_t> x(n, 0);
      for (size_t i = 0; i < n; ++i) {
        const RoundingCase& c = cases[i % cases.size()];
        if (r == 0) x[i] = c.a;
        if (r == 1) x[i] = c.b;
      }
      comm.all_reduce_sum(ctx, x.data(), static_cast<int64_t>(n), bf16 ? ReduceType::bf16 : ReduceType::f16);
      for (size_t i = 0; i < cases.size(); ++i) {
        const RoundingCase& c = cases[i];
        INFO((bf16 ? "bf16 " : "f16 ") << std::hex << c.a << " + " << c.b);
        CHECK(x[i] == (p == 1 ? c.a : c.sum));
      }
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += x[i] != x[i % cases.size()];
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("reduce_scatter_sum leaves rank r the exact sum of block r, blocks of unequal and zero sizes",
          "[mpi][ring]") {
  using namespace qtrain::quant_detail;
  MpiComm comm;
  // Segments of the default size, 64 bytes and 7 bytes (one element or less per message).
  comm.set_max_message_bytes(MESSAGE_LIMIT());
  INFO(where(comm) << ", message limit " << comm.max_message_bytes());
  Context ctx = Context::cpu(1);
  const int p = comm.size(), r = comm.rank();
  std::vector<int64_t> counts;
  for (int q = 0; q < p; ++q) counts.push_back(q == 1 ? 0 : 37 * q + 5);  // rank 1's block is empty
  int64_t total = 0, before = 0;
  for (int q = 0; q < p; ++q) {
    if (q < r) before += counts[static_cast<size_t>(q)];
    total += counts[static_cast<size_t>(q)];
  }
  const int64_t mine = counts[static_cast<size_t>(r)];
  std::vector<float> x(static_cast<size_t>(total));
  std::vector<uint16_t> b(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    x[static_cast<size_t>(i)] = f32_value(r, static_cast<size_t>(i));
    b[static_cast<size_t>(i)] = float_to_bf16(small_value(r, static_cast<size_t>(i)));
  }
  comm.reduce_scatter_sum(ctx, x.data(), counts, ReduceType::f32);
  comm.reduce_scatter_sum(ctx, b.data(), counts, ReduceType::bf16);
  size_t wrong = 0, wrong_b = 0;
  for (int64_t i = before; i < before + mine; ++i) {
    wrong += x[static_cast<size_t>(i)] != f32_sum(p, static_cast<size_t>(i));
    wrong_b += bf16_to_float(b[static_cast<size_t>(i)]) != small_sum(p, static_cast<size_t>(i));
  }
  CHECK(wrong == 0);
  CHECK(wrong_b == 0);
  // The base class's default (a whole-buffer allreduce) gives block r the same sums.
  std::vector<float> y(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) y[static_cast<size_t>(i)] = f32_value(r, static_cast<size_t>(i));
  comm.Communicator::reduce_scatter_sum(ctx, y.data(), counts, ReduceType::f32);
  CHECK(std::equal(x.begin() + before, x.begin() + before + mine, y.begin() + before));
  CHECK_THROWS_WITH(
      comm.reduce_scatter_sum(ctx, x.data(), std::vector<int64_t>(static_cast<size_t>(p) + 1, 1), ReduceType::f32),
      Contains("counts for"));
}

TEST_CASE("all_gather_blocks gives every rank block r of rank r, bit for bit, blocks of unequal and zero sizes",
          "[mpi][ring]") {
  MpiComm comm;
  comm.set_max_message_bytes(MESSAGE_LIMIT());
  INFO(where(comm) << ", message limit " << comm.max_message_bytes());
  Context ctx = Context::cpu(1);
  const int p = comm.size(), r = comm.rank();
  for (bool equal : {true, false}) {
    std::vector<int64_t> counts;
    for (int q = 0; q < p; ++q) counts.push_back(equal ? 23 : (q == 1 ? 0 : 37 * q + 5));
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    // Block q of rank q holds its values, every other block a marker that must be overwritten.
    auto start = [&] {
      std::vector<float> x(static_cast<size_t>(total), -7.0f);
      int64_t at = 0;
      for (int q = 0; q < p; ++q) {
        for (int64_t i = 0; i < counts[static_cast<size_t>(q)]; ++i)
          if (q == r) x[static_cast<size_t>(at + i)] = f32_value(q, static_cast<size_t>(i));
        at += counts[static_cast<size_t>(q)];
      }
      return x;
    };
    std::vector<float> x = start(), y = start();
    comm.all_gather_blocks(ctx, x.data(), counts, ReduceType::f32);
    comm.Communicator::all_gather_blocks(ctx, y.data(), counts, ReduceType::f32);  // the default
    size_t wrong = 0;
    int64_t at = 0;
    for (int q = 0; q < p; ++q) {
      for (int64_t i = 0; i < counts[static_cast<size_t>(q)]; ++i)
        wrong += x[static_cast<size_t>(at + i)] != f32_value(q, static_cast<size_t>(i));
      at += counts[static_cast<size_t>(q)];
    }
    INFO((equal ? "equal" : "unequal") << " blocks");
    CHECK(wrong == 0);
    CHECK(x == y);
  }
  std::vector<float> x(4);
  CHECK_THROWS_WITH(
      comm.all_gather_blocks(ctx, x.data(), std::vector<int64_t>(static_cast<size_t>(p) + 1, 1), ReduceType::f32),
      Contains("counts for"));
}

TEST_CASE("the ring allreduce is exact on crafted values for every segment size", "[mpi][ring]") {
  using namespace qtrain::quant_detail;
  MpiComm comm;
  // 512 KiB: one segment per chunk here; 12 bytes: several segments; 2 bytes: one element each.
  const size_t segment = GENERATE(as<size_t>{}, size_t{512} << 10, 12, 2);
  comm.set_ring(1, segment);  // the ring for every size
  INFO(where(comm) << ", ring segment " << segment);
  Context ctx = Context::cpu(1);
  const int p = comm.size(), r = comm.rank();

  // Fewer elements than ranks (empty chunks), a prime count, and a few thousand.
  for (size_t n : {size_t{1}, size_t{3}, size_t{1001}, size_t{4099}}) {
    INFO(n << " elements");
    check_exact_f32_f64_sums(comm, ctx, n);

    std::vector<uint16_t> h(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      h[i] = float_to_half(small_value(r, i));
      b[i] = float_to_bf16(small_value(r, i));
    }
    comm.all_reduce_sum(ctx, h.data(), static_cast<int64_t>(n), ReduceType::f16);
    comm.all_reduce_sum(ctx, b.data(), static_cast<int64_t>(n), ReduceType::bf16);
    size_t wrong_h = 0, wrong_b = 0;
    for (size_t i = 0; i < n; ++i) {
      wrong_h += half_to_float(h[i]) != small_sum(p, i);
      wrong_b += bf16_to_float(b[i]) != small_sum(p, i);
    }
    CHECK(wrong_h == 0);
    CHECK(wrong_b == 0);
  }

  // One rounding per addition, to nearest even, as the library path's operation: rank 0 gives a,
  // rank 1 gives b, the others +0 (exact), so every element must come out as round(a + b).
  for (bool bf16 : {false, true}) {
    const auto& cases = bf16 ? bf16_rounding_cases() : f16_rounding_cases();
    const size_t n = cases.size() * 7;
    std::vector<uint16_t> x(n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (r == 0) x[i] = cases[i % cases.size()].a;
      if (r == 1) x[i] = cases[i % cases.size()].b;
    }
    comm.all_reduce_sum(ctx, x.data(), static_cast<int64_t>(n), bf16 ? ReduceType::bf16 : ReduceType::f16);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      const RoundingCase& c = cases[i % cases.size()];
      wrong += x[i] != (p == 1 ? c.a : c.sum);
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("all_gather_bytes concatenates different sizes in rank order", "[mpi]") {
  MpiComm comm;
  comm.set_max_message_bytes(MESSAGE_LIMIT());
  INFO(where(comm) << ", message limit " << comm.max_message_bytes());
  Context ctx = Context::cpu(1);
  const int p = comm.size(), r = comm.rank();

  std::vector<uint8_t> send(gather_size(r));
  for (size_t i = 0; i < send.size(); ++i) send[i] = gather_byte(r, i);
  std::vector<uint8_t> recv;
  std::vector<size_t> sizes, offsets;
  for (int round = 0; round < 2; ++round) {  // the second round reuses recv
    comm.all_gather_bytes(ctx, send, recv, sizes, offsets);
    REQUIRE(sizes.size() == static_cast<size_t>(p));
    REQUIRE(offsets.size() == static_cast<size_t>(p));
    size_t at = 0, wrong = 0;
    for (int s = 0; s < p; ++s) {
      const auto su = static_cast<size_t>(s);
      CHECK(sizes[su] == gather_size(s));
      CHECK(offsets[su] == at);
      at += gather_size(s);
      for (size_t i = 0; i < gather_size(s) && offsets[su] + i < recv.size(); ++i)
        wrong += recv[offsets[su] + i] != gather_byte(s, i);
    }
    CHECK(recv.size() == at);
    CHECK(wrong == 0);
  }

  // Equal sizes, and everyone empty.
  std::vector<uint8_t> same(5, static_cast<uint8_t>(r + 1));
  comm.all_gather_bytes(ctx, same, recv, sizes, offsets);
  REQUIRE(recv.size() == 5 * static_cast<size_t>(p));
  size_t wrong = 0;
  for (size_t i = 0; i < recv.size(); ++i) wrong += static_cast<size_t>(recv[i]) != i / 5 + 1;
  CHECK(wrong == 0);
  comm.all_gather_bytes(ctx, {}, recv, sizes, offsets);
  CHECK(sizes == std::vector<size_t>(static_cast<size_t>(p), 0));
  CHECK(recv.empty());
}

TEST_CASE("all_to_all_bytes delivers rank-pair-specific blocks", "[mpi]") {
  MpiComm comm;
  comm.set_max_message_bytes(MESSAGE_LIMIT());
  INFO(where(comm) << ", message limit " << comm.max_message_bytes());
  Context ctx = Context::cpu(1);
  const int p = comm.size(), r = comm.rank();

  std::vector<size_t> send_sizes, send_offsets;
  std::vector<uint8_t> send(pair_layout(r, p, send_sizes, send_offsets), 0xee);
  for (int d = 0; d < p; ++d) {
    const auto du = static_cast<size_t>(d);
    for (size_t i = 0; i < send_sizes[du]; ++i) send[send_offsets[du] + i] = pair_byte(r, d, i);
  }
  std::vector<uint8_t> recv;
  std::vector<size_t> recv_sizes, recv_offsets;
  for (int round = 0; round < 2; ++round) {
    comm.all_to_all_bytes(ctx, send, send_sizes, send_offsets, recv, recv_sizes, recv_offsets);
    REQUIRE(recv_sizes.size() == static_cast<size_t>(p));
    REQUIRE(recv_offsets.size() == static_cast<size_t>(p));
    size_t at = 0, wrong = 0;
    for (int s = 0; s < p; ++s) {
      const auto su = static_cast<size_t>(s);
      CHECK(recv_sizes[su] == pair_size(s, r));
      CHECK(recv_offsets[su] == at);
      at += pair_size(s, r);
      for (size_t i = 0; i < pair_size(s, r) && recv_offsets[su] + i < recv.size(); ++i)
        wrong += recv[recv_offsets[su] + i] != pair_byte(s, r, i);
    }
    CHECK(recv.size() == at);
    CHECK(wrong == 0);
  }
}

TEST_CASE("the streaming all-to-all and allgather produce once per rank and consume in rank order", "[mpi][stream]") {
  MpiComm comm;
  // 1 GiB: the point-to-point path; 7 bytes: the capacities do not fit one message, so every rank
  // falls back to the plain collectives together.
  comm.set_max_message_bytes(GENERATE(as<size_t>{}, kDefaultLimit, 7));
  INFO(where(comm) << ", message limit " << comm.max_message_bytes());
  Context ctx = Context::cpu(1);
  const int p = comm.size(), me = comm.rank();
  // Rank s sends rank d (3 + 5s + d) % 11 bytes (some empty), each byte 16s + d.
  auto length = [](int s, int d) { return static_cast<size_t>((3 + 5 * s + d) % 11); };
  std::vector<std::vector<uint8_t>> outgoing(static_cast<size_t>(p));
  std::vector<int> produced, consumed;
  std::vector<size_t> capacity(static_cast<size_t>(p)), send_capacity(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) capacity[static_cast<size_t>(s)] = length(s, me) + static_cast<size_t>(s);  // slack
  for (int d = 0; d < p; ++d) send_capacity[static_cast<size_t>(d)] = length(me, d) + static_cast<size_t>(me);
  std::vector<uint8_t> recv;
  size_t wrong = 0;
  comm.all_to_all_streamed(
      ctx,
      [&](int d) -> std::span<const uint8_t> {
        CHECK(consumed.empty());  // every produce comes first
        produced.push_back(d);
        auto& v = outgoing[static_cast<size_t>(d)];
        v.assign(length(me, d), static_cast<uint8_t>(16 * me + d));
        return v;
      },
      send_capacity, capacity, recv,
      [&](int s, std::span<const uint8_t> bytes) {
        consumed.push_back(s);
        wrong += bytes.size() != length(s, me);
        for (uint8_t b : bytes) wrong += b != static_cast<uint8_t>(16 * s + me);
      });
  CHECK(wrong == 0);
  std::vector<int> ring, order;
  for (int k = 1; k <= p; ++k) ring.push_back((me + k) % p);
  for (int s = 0; s < p; ++s) order.push_back(s);
  CHECK(produced == ring);
  CHECK(consumed == order);

  // allgather: rank s sends length(s, 0) bytes of value 16s to everyone.
  std::vector<uint8_t> mine(length(me, 0), static_cast<uint8_t>(16 * me));
  for (int s = 0; s < p; ++s) capacity[static_cast<size_t>(s)] = length(s, 0);
  consumed.clear();
  wrong = 0;
  comm.all_gather_streamed(ctx, mine, capacity, recv, [&](int s, std::span<const uint8_t> bytes) {
    consumed.push_back(s);
    wrong += bytes.size() != length(s, 0);
    for (uint8_t b : bytes) wrong += b != static_cast<uint8_t>(16 * s);
  });
  CHECK(wrong == 0);
  CHECK(consumed == order);
}

TEST_CASE("broadcast_bytes copies the root's bytes to every rank", "[mpi]") {
  MpiComm comm;
  comm.set_max_message_bytes(MESSAGE_LIMIT());
  INFO(where(comm) << ", message limit " << comm.max_message_bytes());
  Context ctx = Context::cpu(1);
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<uint8_t> data(101, 0);
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = comm.rank() == root ? broadcast_byte(root, i) : static_cast<uint8_t>(comm.rank());
    comm.broadcast_bytes(ctx, data, root);
    size_t wrong = 0;
    for (size_t i = 0; i < data.size(); ++i) wrong += data[i] != broadcast_byte(root, i);
    CHECK(wrong == 0);
  }
  comm.broadcast_bytes(ctx, {}, 0);
}

TEST_CASE("host helpers: all_gather_u64, all_to_all_u64, all_reduce_sum_f64, barrier", "[mpi]") {
  MpiComm comm;
  comm.set_max_message_bytes(MESSAGE_LIMIT());
  INFO(where(comm) << ", message limit " << comm.max_message_bytes());
  const int p = comm.size(), r = comm.rank();
  const auto big = [](int rank) { return (uint64_t{1} << 40) + static_cast<uint64_t>(rank * rank) + 7; };

  const std::vector<uint64_t> all = comm.all_gather_u64(big(r));
  REQUIRE(all.size() == static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) CHECK(all[static_cast<size_t>(s)] == big(s));

  std::vector<uint64_t> to(static_cast<size_t>(p));
  for (int d = 0; d < p; ++d) to[static_cast<size_t>(d)] = static_cast<uint64_t>(100 * r + d);
  const std::vector<uint64_t> from = comm.all_to_all_u64(to);
  REQUIRE(from.size() == static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) CHECK(from[static_cast<size_t>(s)] == static_cast<uint64_t>(100 * s + r));

  std::vector<double> values(9);
  for (size_t i = 0; i < values.size(); ++i) values[i] = f64_value(r, i);
  comm.all_reduce_sum_f64(values);
  for (size_t i = 0; i < values.size(); ++i) CHECK(values[i] == f64_sum(p, i));

  for (int i = 0; i < 3; ++i) comm.barrier();
}

TEST_CASE("MpiComm rejects bad arguments on the entry, before any collective", "[mpi]") {
  MpiComm comm;
  Context ctx = Context::cpu(1);
  const auto p = static_cast<size_t>(comm.size());
  std::vector<uint8_t> bytes(8), recv;
  std::vector<size_t> a, b;
  CHECK_THROWS_WITH(comm.all_reduce_sum(ctx, nullptr, 3, ReduceType::f16), Contains("all_reduce_sum: data is null"));
  CHECK_THROWS_WITH(comm.broadcast_bytes(ctx, bytes, comm.size()), Contains("broadcast_bytes: root"));
  CHECK_THROWS_WITH(
      comm.all_to_all_bytes(ctx, bytes, std::vector<size_t>(p + 1), std::vector<size_t>(p + 1), recv, a, b),
      Contains("all_to_all_bytes: send_sizes has"));
  CHECK_THROWS_WITH(comm.all_to_all_bytes(ctx, bytes, std::vector<size_t>(p, 1), std::vector<size_t>(p, 8), recv, a, b),
                    Contains("all_to_all_bytes: the block for rank 0"));
  CHECK_THROWS_WITH(comm.all_gather_bytes(ctx, std::span<const uint8_t>(bytes.data(), 4), bytes, a, b),
                    Contains("all_gather_bytes: send (4 bytes) points into recv"));
  CHECK_THROWS_WITH(comm.all_to_all_u64({}), Contains("all_to_all_u64: 0 values"));
  // The communicator still works afterwards: nothing was half-sent.
  CHECK(comm.all_gather_u64(1) == std::vector<uint64_t>(p, 1));
}

TEST_CASE("make_communicator under MPI agrees on every rank", "[mpi][factory]") {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  const auto mpi = make_communicator("mpi", Device::cpu());
  CHECK(std::string(mpi->name()) == "mpi");
  CHECK(mpi->size() == size);
  CHECK(std::string(make_communicator("auto", Device::cpu())->name()) == (size == 1 ? "local" : "mpi"));
  if (size > 1) {
    CHECK_THROWS_AS(make_communicator("local", Device::cpu()), InputError);
    CHECK_THROWS_WITH(make_communicator("local", Device::cpu()),
                      Contains("local is a world of one process, but " + std::to_string(size) + " ranks"));
  } else {
    CHECK(std::string(make_communicator("local", Device::cpu())->name()) == "local");
  }
  if (!cuda_available()) {
    // Every rank raises the same error (none is left waiting in NCCL's setup).
    CHECK_THROWS_AS(make_communicator("nccl", Device::cpu()), InputError);
    CHECK_THROWS_WITH(make_communicator("nccl", Device::cpu()),
                      Contains(QTRAIN_HAS_CUDA ? "nccl needs a CUDA GPU on every rank; this machine has none"
                                               : "built without CUDA/NCCL"));
  }
  // The communicators are independent: traffic on one does not match the other's.
  mpi->barrier();
}
