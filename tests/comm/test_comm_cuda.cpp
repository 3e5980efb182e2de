// GPU buffers through the transports, with the crafted values of comm_test_util.h: MpiComm staging
// device memory through pinned host buffers, LocalComm copying from the GPU, and NcclComm with one
// GPU per rank on device and host inputs (or, when a host has fewer GPUs than ranks,
// make_communicator's "one GPU per rank" error). Needs a GPU; skipped without.
#include <catch2/catch.hpp>
#include <mpi.h>

#include "comm/communicator.h"
#include "comm/transport_check.h"
#include "comm/local_comm.h"
#include "comm/mpi_comm.h"
#include "quant/numerics.h"
#include "tests/comm/comm_test_util.h"
#include "tests/comm/mpi_test_main.h"

using namespace qtrain;
using namespace qtrain::comm_test;
using namespace qtrain::quant_detail;
using Catch::Contains;

namespace {

Device my_gpu() { return Device::cuda(test_mpi().local_rank() % cuda_device_count()); }

int ranks_on_this_host() {
  MPI_Comm host;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
  int n = 0;
  MPI_CHECK(MPI_Comm_size(host, &n));
  MPI_CHECK(MPI_Comm_free(&host));
  return n;
}

// A buffer holding `host`'s bytes, on the GPU or (when gpu is the CPU) on the host.
template <typename T>
Tensor place(const std::vector<T>& host, Device device) {
  Tensor t = Tensor::empty({static_cast<int64_t>(host.size() * sizeof(T))}, DType::u8, device);
  device_copy(device, t.raw(), Device::cpu(), host.data(), host.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<T> fetch(const Tensor& t, Device device) {
  std::vector<T> host(t.nbytes() / sizeof(T));
  device_copy(Device::cpu(), host.data(), device, t.raw(), t.nbytes());
  return host;
}

std::span<const uint8_t> bytes_of(const Tensor& t) { return {static_cast<const uint8_t*>(t.raw()), t.nbytes()}; }

// The exact expectations of test_comm_mpi.cpp with the inputs in `where` (the GPU of ctx, or the
// host) and a CUDA context. Received bytes come back in host vectors.
void check_collectives(Communicator& comm, Context& ctx, Device where) {
  const int p = comm.size(), r = comm.rank();
  INFO("rank " << r << " of " << p << " via " << comm.name() << ", inputs on " << where.str());

  const size_t n = 1001;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = f32_value(r, i);
  Tensor dx = place(x, where);
  comm.all_reduce_sum(ctx, dx.raw(), static_cast<int64_t>(n), ReduceType::f32);
  ctx.synchronize();  // NcclComm leaves GPU results enqueued
  x = fetch<float>(dx, where);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += x[i] != f32_sum(p, i);
  CHECK(wrong == 0);

  // 16-bit sums: exact small sums on odd elements, the rounding cases on even ones.
  for (bool bf16 : {false, true}) {
    const auto& cases = bf16 ? bf16_rounding_cases() : f16_rounding_cases();
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) {
      const RoundingCase& c = cases[i % cases.size()];
      h[i] = i % 2 ? (bf16 ? float_to_bf16(small_value(r, i)) : float_to_half(small_value(r, i)))
                   : (r == 0   ? c.a
                      : r == 1 ? c.b
                               : uint16_t{0});
    }
    Tensor dh = place(h, where);
    comm.all_reduce_sum(ctx, dh.raw(), static_cast<int64_t>(n), bf16 ? ReduceType::bf16 : ReduceType::f16);
    ctx.synchronize();
    h = fetch<uint16_t>(dh, where);
    wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      const RoundingCase& c = cases[i % cases.size()];
      if (i % 2)
        wrong += (bf16 ? bf16_to_float(h[i]) : half_to_float(h[i])) != small_sum(p, i);
      else
        wrong += h[i] != (p == 1 ? c.a : c.sum);
    }
    CHECK(wrong == 0);
  }

  // all_gather_bytes: different sizes (rank 1 sends nothing), then equal sizes.
  std::vector<uint8_t> send(gather_size(r));
  for (size_t i = 0; i < send.size(); ++i) send[i] = gather_byte(r, i);
  Tensor dsend = place(send, where);
  std::vector<uint8_t> recv;
  std::vector<size_t> sizes, offsets;
  comm.all_gather_bytes(ctx, bytes_of(dsend), recv, sizes, offsets);
  size_t total = 0;
  for (int s = 0; s < p; ++s) total += gather_size(s);
  REQUIRE(recv.size() == total);
  wrong = 0;
  for (int s = 0; s < p; ++s) {
    const auto su = static_cast<size_t>(s);
    CHECK(sizes[su] == gather_size(s));
    for (size_t i = 0; i < gather_size(s); ++i) wrong += recv[offsets[su] + i] != gather_byte(s, i);
  }
  CHECK(wrong == 0);
  Tensor dsame = place(std::vector<uint8_t>(6, static_cast<uint8_t>(r + 1)), where);
  comm.all_gather_bytes(ctx, bytes_of(dsame), recv, sizes, offsets);
  REQUIRE(recv.size() == 6 * static_cast<size_t>(p));
  wrong = 0;
  for (size_t i = 0; i < recv.size(); ++i) wrong += static_cast<size_t>(recv[i]) != i / 6 + 1;
  CHECK(wrong == 0);

  // all_to_all_bytes with the scattered send layout.
  std::vector<size_t> send_sizes, send_offsets;
  std::vector<uint8_t> blocks(pair_layout(r, p, send_sizes, send_offsets), 0xee);
  for (int d = 0; d < p; ++d)
    for (size_t i = 0; i < send_sizes[static_cast<size_t>(d)]; ++i)
      blocks[send_offsets[static_cast<size_t>(d)] + i] = pair_byte(r, d, i);
  Tensor dblocks = place(blocks, where);
  std::vector<size_t> recv_sizes, recv_offsets;
  comm.all_to_all_bytes(ctx, bytes_of(dblocks), send_sizes, send_offsets, recv, recv_sizes, recv_offsets);
  total = 0;
  for (int s = 0; s < p; ++s) total += pair_size(s, r);
  REQUIRE(recv.size() == total);
  wrong = 0;
  for (int s = 0; s < p; ++s) {
    const auto su = static_cast<size_t>(s);
    CHECK(recv_sizes[su] == pair_size(s, r));
    for (size_t i = 0; i < pair_size(s, r); ++i) wrong += recv[recv_offsets[su] + i] != pair_byte(s, r, i);
  }
  CHECK(wrong == 0);

  for (int root = 0; root < p; ++root) {
    std::vector<uint8_t> data(101);
    for (size_t i = 0; i < data.size(); ++i) data[i] = r == root ? broadcast_byte(root, i) : uint8_t{0};
    Tensor ddata = place(data, where);
    comm.broadcast_bytes(ctx, {static_cast<uint8_t*>(ddata.raw()), ddata.nbytes()}, root);
    ctx.synchronize();
    data = fetch<uint8_t>(ddata, where);
    wrong = 0;
    for (size_t i = 0; i < data.size(); ++i) wrong += data[i] != broadcast_byte(root, i);
    CHECK(wrong == 0);
  }
}

}  // namespace

TEST_CASE("MpiComm stages GPU buffers through pinned host memory", "[cuda][mpi]") {
  MpiComm comm(my_gpu());
  Context ctx = Context::cuda(my_gpu().index, 1);
  for (size_t limit : {size_t{1} << 30, size_t{64}, size_t{7}}) {
    comm.set_max_message_bytes(limit);
    INFO("message limit " << limit);
    check_collectives(comm, ctx, my_gpu());
    check_collectives(comm, ctx, Device::cpu());  // host buffers with a CUDA context need no staging
  }
  // GPU memory needs a context on its GPU (the stream orders the staging copies).
  Tensor on_gpu = Tensor::zeros({16}, DType::f32, my_gpu());
  Context cpu = Context::cpu(1);
  CHECK_THROWS_WITH(
      comm.all_reduce_sum(cpu, on_gpu.raw(), 16, ReduceType::f32),
      Contains("all_reduce_sum: data is in " + my_gpu().str() + " memory; pass a context on " + my_gpu().str()));
}

TEST_CASE("LocalComm copies GPU bytes on the context's stream", "[cuda]") {
  LocalComm comm(my_gpu());  // a world of one on every rank, whatever the MPI world
  Context ctx = Context::cuda(my_gpu().index, 1);
  check_collectives(comm, ctx, my_gpu());
}

TEST_CASE("NcclComm with one GPU per rank", "[cuda][nccl]") {
  const int world = test_mpi().size();
  if (ranks_on_this_host() > cuda_device_count()) {
    // Every rank gets the same clear error instead of NCCL failing (or hanging) in its setup.
    CHECK_THROWS_AS(make_communicator("nccl", my_gpu()), InputError);
    CHECK_THROWS_WITH(make_communicator("nccl", my_gpu()), Contains("nccl needs one GPU per rank"));
    CHECK(std::string(make_communicator("auto", my_gpu())->name()) == "mpi");
    return;
  }
  auto comm = make_communicator("nccl", my_gpu());
  CHECK(std::string(comm->name()) == "nccl");
  CHECK(comm->size() == world);
  CHECK(comm->device() == my_gpu());
  Context ctx = Context::cuda(my_gpu().index, 1);
  check_collectives(*comm, ctx, my_gpu());
  check_collectives(*comm, ctx, Device::cpu());  // host buffers go through device scratch
  CHECK(comm->all_gather_u64(5) == std::vector<uint64_t>(static_cast<size_t>(world), 5));
  comm->barrier();

  Context cpu = Context::cpu(1);
  std::vector<float> host(4);
  CHECK_THROWS_WITH(comm->all_reduce_sum(cpu, host.data(), 4, ReduceType::f32),
                    Contains("all_reduce_sum: the context is on cpu, but the NCCL communicator works on"));
  CHECK(std::string(make_communicator("auto", my_gpu())->name()) == (world == 1 ? "local" : "nccl"));
}

TEST_CASE("NcclComm splits into NCCL communicators of subgroups (the two-level exchange's node and cross groups)",
          "[cuda][nccl]") {
  const int world = test_mpi().size();
  if (ranks_on_this_host() > cuda_device_count()) return;  // the case above checks the error
  auto comm = make_communicator("nccl", my_gpu());
  REQUIRE(comm->has_subgroups());
  CHECK(comm->node_color() == 0);  // every rank of this test shares one host, whose lowest rank is 0
  // Halves: ranks [0, h) and [h, world), ordered by descending rank within each.
  const int h = (world + 1) / 2, me = comm->rank();
  const int color = me < h ? 0 : 1;
  auto part = comm->split(color, world - me);
  CHECK(std::string(part->name()) == "nccl");
  const int first = color == 0 ? 0 : h, last = color == 0 ? h : world;  // [first, last)
  REQUIRE(part->size() == last - first);
  CHECK(part->rank() == last - 1 - me);
  // The subgroup's collectives on this rank's GPU, with the exact expectations of the world's.
  Context ctx = Context::cuda(my_gpu().index, 1);
  check_collectives(*part, ctx, my_gpu());
  // A sum over the subgroup only: ranks r + 1 of [first, last).
  std::vector<float> one{static_cast<float>(me + 1)};
  Tensor d = place(one, my_gpu());
  part->all_reduce_sum(ctx, d.raw(), 1, ReduceType::f32);
  float expected = 0;
  for (int r = first; r < last; ++r) expected += static_cast<float>(r + 1);
  CHECK(fetch<float>(d, my_gpu())[0] == expected);
}

namespace {
// reduce_scatter_sum of a buffer on ctx's GPU, equal and unequal blocks (one empty): block r of rank r
// must hold the exact sum, in fp32 and bf16.
void check_reduce_scatter_on_gpu(Communicator& comm, Context& ctx) {
  const int p = comm.size(), r = comm.rank();
  for (bool equal : {true, false}) {
    std::vector<int64_t> counts;
    for (int q = 0; q < p; ++q) counts.push_back(equal ? 29 : (q == 1 ? 0 : 37 * q + 5));  // unequal: rank 1's is empty
    int64_t total = 0, before = 0;
    for (int q = 0; q < p; ++q) {
      if (q < r) before += counts[static_cast<size_t>(q)];
      total += counts[static_cast<size_t>(q)];
    }
    const int64_t mine = counts[static_cast<size_t>(r)];
    INFO(comm.name() << ", rank " << r << " of " << p << (equal ? ", equal blocks" : ", unequal blocks"));
    std::vector<float> x(static_cast<size_t>(total));
    std::vector<uint16_t> b(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) {
      x[static_cast<size_t>(i)] = f32_value(r, static_cast<size_t>(i));
      b[static_cast<size_t>(i)] = float_to_bf16(small_value(r, static_cast<size_t>(i)));
    }
    Tensor dx = place(x, my_gpu()), db = place(b, my_gpu());
    comm.reduce_scatter_sum(ctx, dx.raw(), counts, ReduceType::f32);
    comm.reduce_scatter_sum(ctx, db.raw(), counts, ReduceType::bf16);
    const std::vector<float> gx = fetch<float>(dx, my_gpu());
    const std::vector<uint16_t> gb = fetch<uint16_t>(db, my_gpu());
    size_t wrong = 0, wrong_b = 0;
    for (int64_t i = before; i < before + mine; ++i) {
      wrong += gx[static_cast<size_t>(i)] != f32_sum(p, static_cast<size_t>(i));
      wrong_b += bf16_to_float(gb[static_cast<size_t>(i)]) != small_sum(p, static_cast<size_t>(i));
    }
    CHECK(wrong == 0);
    CHECK(wrong_b == 0);
  }
}
}  // namespace

TEST_CASE("reduce_scatter_sum on GPU memory: NcclComm's ncclReduceScatter and MpiComm's staging", "[cuda][nccl]") {
  Context ctx = Context::cuda(my_gpu().index, 1);
  MpiComm mpi(my_gpu());
  check_reduce_scatter_on_gpu(mpi, ctx);
  if (ranks_on_this_host() > cuda_device_count()) return;
  auto nccl = make_communicator("nccl", my_gpu());
  check_reduce_scatter_on_gpu(*nccl, ctx);
}

namespace {
// all_gather_blocks of a buffer on ctx's GPU, equal and unequal blocks (one empty): every rank must
// end with block q of rank q, bit for bit.
void check_all_gather_blocks_on_gpu(Communicator& comm, Context& ctx, bool base) {
  const int p = comm.size(), r = comm.rank();
  for (bool equal : {true, false}) {
    std::vector<int64_t> counts;
    for (int q = 0; q < p; ++q) counts.push_back(equal ? 29 : (q == 1 ? 0 : 37 * q + 5));
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    std::vector<float> x(static_cast<size_t>(total), -7.0f), expected(x.size());
    int64_t at = 0;
    for (int q = 0; q < p; ++q) {
      for (int64_t i = 0; i < counts[static_cast<size_t>(q)]; ++i) {
        expected[static_cast<size_t>(at + i)] = f32_value(q, static_cast<size_t>(i));
        if (q == r) x[static_cast<size_t>(at + i)] = expected[static_cast<size_t>(at + i)];
      }
      at += counts[static_cast<size_t>(q)];
    }
    INFO(comm.name() << (base ? " (the default)" : "") << ", rank " << r << " of " << p
                     << (equal ? ", equal blocks" : ", unequal blocks"));
    Tensor dx = place(x, my_gpu());
    if (base)
      comm.Communicator::all_gather_blocks(ctx, dx.raw(), counts, ReduceType::f32);
    else
      comm.all_gather_blocks(ctx, dx.raw(), counts, ReduceType::f32);
    CHECK(fetch<float>(dx, my_gpu()) == expected);
  }
}
}  // namespace

TEST_CASE("all_gather_blocks on GPU memory: NcclComm's in place, MpiComm's staging and the default", "[cuda][nccl]") {
  Context ctx = Context::cuda(my_gpu().index, 1);
  MpiComm mpi(my_gpu());
  check_all_gather_blocks_on_gpu(mpi, ctx, false);
  check_all_gather_blocks_on_gpu(mpi, ctx, true);
  if (ranks_on_this_host() > cuda_device_count()) return;
  auto nccl = make_communicator("nccl", my_gpu());
  check_all_gather_blocks_on_gpu(*nccl, ctx, false);
  check_all_gather_blocks_on_gpu(*nccl, ctx, true);
}

TEST_CASE("device byte collectives leave every block in GPU memory: NcclComm's, and none elsewhere", "[cuda][nccl]") {
  Context ctx = Context::cuda(my_gpu().index, 1);
  MpiComm mpi(my_gpu());
  CHECK_FALSE(mpi.device_byte_collectives());
  std::vector<size_t> sizes, offsets;
  CHECK_THROWS_WITH(mpi.all_gather_device(ctx, {}, sizes, offsets, false), Contains("has no device byte collectives"));
  if (ranks_on_this_host() > cuda_device_count()) return;
  auto comm = make_communicator("nccl", my_gpu());
  REQUIRE(comm->device_byte_collectives());
  const int p = comm->size(), r = comm->rank();
  INFO("rank " << r << " of " << p);
  // The received bytes, read back after the context's stream: the results are device memory.
  auto fetch_block = [&](const uint8_t* at, size_t n) {
    std::vector<uint8_t> host(n);
    ctx.synchronize();
    if (n > 0) device_copy(Device::cpu(), host.data(), my_gpu(), at, n);
    return host;
  };

  // all_gather_device: different sizes (rank 1 sends nothing), then equal sizes.
  std::vector<uint8_t> send(gather_size(r));
  for (size_t i = 0; i < send.size(); ++i) send[i] = gather_byte(r, i);
  Tensor dsend = place(send, my_gpu());
  const uint8_t* got = comm->all_gather_device(ctx, bytes_of(dsend), sizes, offsets, false);
  size_t wrong = 0;
  for (int s = 0; s < p; ++s) {
    const auto su = static_cast<size_t>(s);
    REQUIRE(sizes[su] == gather_size(s));
    const std::vector<uint8_t> block = fetch_block(got + offsets[su], sizes[su]);
    for (size_t i = 0; i < block.size(); ++i) wrong += block[i] != gather_byte(s, i);
  }
  CHECK(wrong == 0);
  Tensor dsame = place(std::vector<uint8_t>(6, static_cast<uint8_t>(r + 1)), my_gpu());
  got = comm->all_gather_device(ctx, bytes_of(dsame), sizes, offsets, false);
  const std::vector<uint8_t> all = fetch_block(got, 6 * static_cast<size_t>(p));
  wrong = 0;
  for (size_t i = 0; i < all.size(); ++i) wrong += static_cast<size_t>(all[i]) != i / 6 + 1;
  CHECK(wrong == 0);

  // all_to_all_device with the scattered send layout of check_collectives.
  std::vector<size_t> send_sizes, send_offsets, recv_sizes, recv_offsets;
  std::vector<uint8_t> blocks(pair_layout(r, p, send_sizes, send_offsets), 0xee);
  for (int d = 0; d < p; ++d)
    for (size_t i = 0; i < send_sizes[static_cast<size_t>(d)]; ++i)
      blocks[send_offsets[static_cast<size_t>(d)] + i] = pair_byte(r, d, i);
  Tensor dblocks = place(blocks, my_gpu());
  got = comm->all_to_all_device(ctx, bytes_of(dblocks), send_sizes, send_offsets, recv_sizes, recv_offsets, false);
  wrong = 0;
  for (int s = 0; s < p; ++s) {
    const auto su = static_cast<size_t>(s);
    REQUIRE(recv_sizes[su] == pair_size(s, r));
    const std::vector<uint8_t> block = fetch_block(got + recv_offsets[su], recv_sizes[su]);
    for (size_t i = 0; i < block.size(); ++i) wrong += block[i] != pair_byte(s, r, i);
  }
  CHECK(wrong == 0);
}
