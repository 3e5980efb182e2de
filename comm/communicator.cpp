// make_communicator: turns communication.backend into a transport. Every decision that depends on
// more than this rank (is there a GPU everywhere? does a GPU serve two ranks?) is agreed on with one
// small collective, so all ranks build the same backend or all raise the same InputError; a rank
// that decided alone would leave the others waiting in NCCL's setup forever.
#include <mpi.h>

#include <algorithm>
#include <cstring>

#include "comm/communicator.h"
#include "comm/transport_check.h"
#include "comm/buffer_ops.h"
#include "comm/transport_config.h"
#include "comm/cuda_staging.h"
#include "comm/local_comm.h"
#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_comm.h"
#include "comm/transport_common.h"
#include "comm/watchdog.h"
#include "framework/core/check.h"

namespace qtrain {
namespace {

// The ranks of MPI_COMM_WORLD, or 0 when MPI is not running (a process without an MpiRuntime).
int mpi_world_size() {
  int initialized = 0, finalized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  MPI_CHECK(MPI_Finalized(&finalized));
  if (!initialized || finalized) return 0;
  int size = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return size;
}

// Why NCCL cannot run, in increasing order of severity: the world reports the worst.
enum NcclProblem : int { kNcclOk = 0, kRunOnCpu = 1, kSharedGpu = 2, kNoGpu = 3 };

// This rank's problem, then the worst over all ranks (`mine` keeps this rank's own).
int nccl_problem(Device device, int world, int& mine) {
  mine = !cuda_available() ? kNoGpu : (device.is_cuda() ? kNcclOk : kRunOnCpu);
  if (world <= 1) return mine;
  // Two ranks of one host on the same physical GPU (more ranks than GPUs) would fail inside NCCL's
  // setup; compare PCI bus ids, because device indices differ under per-rank CUDA_VISIBLE_DEVICES.
  constexpr int kIdBytes = 32;
  char id[kIdBytes] = {};
  if (mine == kNcclOk) {
    const std::string bus = comm_detail::gpu_bus_id(device.index);
    std::memcpy(id, bus.data(), std::min(bus.size(), size_t{kIdBytes - 1}));
  }
  MPI_Comm host;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
  int host_size = 0;
  MPI_CHECK(MPI_Comm_size(host, &host_size));
  std::vector<char> ids(static_cast<size_t>(host_size) * kIdBytes);
  MPI_CHECK(MPI_Allgather(id, kIdBytes, MPI_CHAR, ids.data(), kIdBytes, MPI_CHAR, host));
  MPI_CHECK(MPI_Comm_free(&host));
  if (mine == kNcclOk) {
    int users = 0;
    for (int r = 0; r < host_size; ++r) users += std::memcmp(ids.data() + r * kIdBytes, id, kIdBytes) == 0;
    if (users > 1) mine = kSharedGpu;
  }
  int worst = mine;
  MPI_CHECK(MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return worst;
}

[[noreturn]] void nccl_impossible(int problem, int mine) {
  const bool here = problem == mine;
  switch (problem) {
    case kNoGpu:
      input_error("communication.backend: nccl needs a CUDA GPU on every rank; {}",
                  here ? "this machine has none" : "another rank's machine has none (use backend mpi)");
    case kSharedGpu:
      input_error(
          "communication.backend: nccl needs one GPU per rank, but {} runs more ranks than it has GPUs; "
          "start fewer ranks per host or use backend mpi",
          here ? "this host" : "another host");
    default:
      input_error(
          "communication.backend: nccl runs on GPUs, but {} device is cpu; set device: cuda (or auto), "
          "or use backend mpi",
          here ? "this rank's" : "another rank's");
  }
}

}  // namespace

std::unique_ptr<Communicator> make_communicator(const std::string& backend, Device device) {
  if (backend != "auto" && backend != "local" && backend != "mpi" && backend != "nccl")
    input_error("communication.backend: unknown backend '{}' (known: auto, local, mpi, nccl)", backend);
  int world = mpi_world_size();
  if (backend == "local") {
    if (world > 1)
      input_error(
          "communication.backend: local is a world of one process, but {} ranks are running; use auto, "
          "mpi or nccl",
          world);
    return std::make_unique<LocalComm>(device);
  }
  if (backend == "auto" && world <= 1) return std::make_unique<LocalComm>(device);
  // mpi and nccl run over MPI: a process started alone starts its singleton now (MpiRuntime defers it).
  if (world == 0 && start_mpi_on_demand()) world = mpi_world_size();

  if (backend == "nccl") {
    if (!nccl_built())
      input_error("communication.backend: nccl: this qtrain was built without CUDA/NCCL; use mpi or auto");
    int mine = kNcclOk;
    const int problem = nccl_problem(device, world, mine);
    if (problem != kNcclOk) nccl_impossible(problem, mine);
  }
  QT_CHECK(world > 0, "make_communicator: backend {} needs MPI running; create an MpiRuntime first", backend);
  if (backend == "nccl") return make_nccl_comm(device);
  if (backend == "auto" && nccl_built()) {
    // NCCL only when every rank can use it; otherwise MPI (staging CUDA buffers) on all of them.
    int mine = kNcclOk;
    if (nccl_problem(device, world, mine) == kNcclOk) return make_nccl_comm(device);
  }
  return std::make_unique<MpiComm>(device);
}

// ---- the default streaming forms -------------------------------------------------------------------

void Communicator::all_to_all_streamed(Context& ctx, const Produce& produce, const std::vector<size_t>& send_capacity,
                                       const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                                       const Consume& consume) {
  const int P = size(), me = rank();
  QT_CHECK(recv_capacity.size() == static_cast<size_t>(P) && send_capacity.size() == static_cast<size_t>(P),
           "all_to_all_streamed: {} send and {} receive capacities for {} ranks", send_capacity.size(),
           recv_capacity.size(), P);
  stream_sizes_.assign(static_cast<size_t>(P), 0);
  stream_offsets_.assign(static_cast<size_t>(P), 0);
  stream_send_.clear();
  for (int k = 1; k <= P; ++k) {
    const int d = (me + k) % P;
    const std::span<const uint8_t> bytes = produce(d);
    QT_CHECK(bytes.size() <= send_capacity[static_cast<size_t>(d)],
             "all_to_all_streamed: {} bytes produced for rank {}, more than its capacity {}", bytes.size(), d,
             send_capacity[static_cast<size_t>(d)]);
    stream_offsets_[static_cast<size_t>(d)] = stream_send_.size();
    stream_sizes_[static_cast<size_t>(d)] = bytes.size();
    stream_send_.insert(stream_send_.end(), bytes.begin(), bytes.end());
  }
  // all_to_all_bytes wants the blocks in any order with their offsets: they are.
  all_to_all_bytes(ctx, stream_send_, stream_sizes_, stream_offsets_, recv, stream_recv_sizes_, stream_recv_offsets_);
  comm_detail::check_capacities("all_to_all_streamed", recv_capacity, stream_recv_sizes_, P);
  for (int s = 0; s < P; ++s)
    consume(s,
            {recv.data() + stream_recv_offsets_[static_cast<size_t>(s)], stream_recv_sizes_[static_cast<size_t>(s)]});
}

const uint8_t* Communicator::all_to_all_device(Context&, std::span<const uint8_t>, const std::vector<size_t>&,
                                               const std::vector<size_t>&, std::vector<size_t>&, std::vector<size_t>&,
                                               bool) {
  QT_FAIL("the {} communicator has no device byte collectives", name());
  return nullptr;
}

const uint8_t* Communicator::all_gather_device(Context&, std::span<const uint8_t>, std::vector<size_t>&,
                                               std::vector<size_t>&, bool) {
  QT_FAIL("the {} communicator has no device byte collectives", name());
  return nullptr;
}

int Communicator::post_send(std::span<const uint8_t>, int, int) {
  QT_FAIL("the {} communicator has no point-to-point messages", name());
  return -1;
}

int Communicator::post_recv(std::span<uint8_t>, int, int) {
  QT_FAIL("the {} communicator has no point-to-point messages", name());
  return -1;
}

bool Communicator::test(int, size_t*) {
  QT_FAIL("the {} communicator has no point-to-point messages", name());
  return false;
}

int Communicator::wait_any(const std::vector<int>&, size_t*) {
  QT_FAIL("the {} communicator has no point-to-point messages", name());
  return -1;
}

int Communicator::node_color() {
  input_error("the {} communicator has no subgroups (communication.hierarchy two_level needs backend mpi or nccl)",
              name());
}

std::unique_ptr<Communicator> Communicator::split(int, int) {
  input_error("the {} communicator has no subgroups (communication.hierarchy two_level needs backend mpi or nccl)",
              name());
}

int64_t Communicator::reduce_scatter_total(const char* op, std::span<const int64_t> counts) const {
  QT_CHECK(counts.size() == static_cast<size_t>(size()), "{}: {} counts for {} ranks", op, counts.size(), size());
  int64_t total = 0;
  for (int64_t c : counts) {
    QT_CHECK(c >= 0, "{}: a negative count {}", op, c);
    total += c;
  }
  return total;
}

void Communicator::reduce_scatter_sum(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) {
  all_reduce_sum(ctx, data, reduce_scatter_total("reduce_scatter_sum", counts), type);
}

int64_t Communicator::block_begin(std::span<const int64_t> counts, int r) {
  int64_t begin = 0;
  for (int q = 0; q < r; ++q) begin += counts[static_cast<size_t>(q)];
  return begin;
}

void Communicator::all_gather_blocks(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) {
  reduce_scatter_total("all_gather_blocks", counts);
  const size_t element = reduce_type_size(type);
  const int me = rank();
  const size_t mine_at = static_cast<size_t>(block_begin(counts, me)) * element;
  auto* bytes = static_cast<uint8_t*>(data);
  const size_t mine = static_cast<size_t>(counts[static_cast<size_t>(me)]) * element;
  all_gather_bytes(ctx, {bytes + mine_at, mine}, stream_send_, stream_sizes_, stream_offsets_);
  size_t at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    const size_t n = static_cast<size_t>(counts[r]) * element;
    QT_CHECK(stream_sizes_[r] == n, "all_gather_blocks: rank {} sent {} bytes, its block holds {}", r, stream_sizes_[r],
             n);
    if (static_cast<int>(r) != me && n > 0)
      copy_from_host(ctx, bytes + at, stream_send_.data() + stream_offsets_[r], n);
    at += n;
  }
}

std::optional<Communicator::Disagreement> Communicator::first_disagreement(uint64_t value) {
  const std::vector<uint64_t> all = all_gather_u64(value);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0]) return Disagreement{static_cast<int>(r), all[r], all[0]};
  return std::nullopt;
}

void Communicator::complete_all() { QT_FAIL("the {} communicator has no point-to-point messages", name()); }

void Communicator::all_gather_streamed(Context& ctx, std::span<const uint8_t> send,
                                       const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                                       const Consume& consume) {
  const int P = size();
  QT_CHECK(recv_capacity.size() == static_cast<size_t>(P), "all_gather_streamed: {} receive capacities for {} ranks",
           recv_capacity.size(), P);
  all_gather_bytes(ctx, send, recv, stream_recv_sizes_, stream_recv_offsets_);
  comm_detail::check_capacities("all_gather_streamed", recv_capacity, stream_recv_sizes_, P);
  for (int s = 0; s < P; ++s)
    consume(s,
            {recv.data() + stream_recv_offsets_[static_cast<size_t>(s)], stream_recv_sizes_[static_cast<size_t>(s)]});
}

std::unique_ptr<Communicator> make_communicator(const TransportConfig& config, Device device) {
  std::unique_ptr<Communicator> comm = make_communicator(config.backend, device);
  if (auto* mpi = dynamic_cast<MpiComm*>(comm.get()); mpi && config.mpi_allreduce == "library")
    mpi->set_ring(0, mpi->ring_segment_bytes());
  // A world of one never waits for anyone; every MPI or NCCL job is watched.
  if (comm->size() > 1) {
    char host[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    MPI_CHECK(MPI_Get_processor_name(host, &length));
    start_watchdog(
        config.timeout_s,
        fmt::format("rank {} of {} on {}", comm->rank(), comm->size(), std::string(host, static_cast<size_t>(length))),
        abort_mpi_job);
  }
  return comm;
}

}  // namespace qtrain
