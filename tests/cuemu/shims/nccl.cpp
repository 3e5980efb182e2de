// NCCL over MPI (include/nccl.h), so that NcclComm's code runs under mpirun without GPUs.
//
// Communicators. ncclGetUniqueId draws a random 64-bit key; ncclCommInitRank splits MPI_COMM_WORLD by
// it (MPI_Comm_split is collective over the world: every MPI rank must call ncclCommInitRank, as
// qtrain's NcclComm does), ordered by NCCL rank, and checks what NCCL would refuse or hang on: the
// group's size against nranks, one caller per NCCL rank, one GPU per rank on a host ("Duplicate GPU
// detected", ncclInvalidUsage). Each communicator owns two MPI communicators: one for data, one for
// abort notices.
//
// Data. Every call posts nonblocking MPI messages (buffers in emulated device memory; a host pointer is
// a bug and aborts) and, outside a group, waits for them before returning: the emulator's streams are
// synchronous. Inside ncclGroupStart/End the messages are posted at the call and completed at the
// outermost ncclGroupEnd, so sends and receives between the same ranks cannot deadlock. Each
// collective has its own tag, so ranks that call different collectives wait (as on NCCL) instead of
// mixing their bytes; a message of another size than the receiver expects aborts with both sizes.
// Reductions (ncclSum only: all qtrain asks for) combine the ranks' values in rank order, rounding to
// the type after every addition as NCCL's kernels reduce in the type itself, so every rank gets the
// same bits; integers wrap. fp16 and bf16 add in fp32 and round to nearest even: fp32 has at least
// 2p + 2 bits for both, so that is the correctly rounded 16-bit sum CUDA's __hadd gives.
//
// Failures. A communicator fails when a peer aborts its own (an abort sends a notice to every peer) or
// by injection: with CUEMU_NCCL_FAIL_AFTER=N set when ncclCommInitRank runs, the communicator's
// (N+1)-th data call (a collective, send or receive) moves nothing. As on a GPU whose peer died, the
// call returns ncclSuccess (it only enqueued), its stream stalls (cudaStreamQuery: not ready;
// emu/streams.h), and ncclCommGetAsyncError reports ncclRemoteError from its third poll on, as a real
// error surfaces some time after the enqueue. Peers waiting for the failed rank see its abort notice
// and fail alike, except in a call whose receives have all arrived (the failed rank had finished it),
// which completes as its kernel would. ncclCommAbort releases the stalls; an aborted communicator's MPI communicators
// are never freed, because messages of its unfinished calls may still arrive and a freed communicator's context id can
// be reused by a later one, which would receive them.
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "tests/cuemu/emu/counters.h"
#include "tests/cuemu/emu/memory.h"
#include "tests/cuemu/emu/scheduler.h"
#include "tests/cuemu/emu/ordering.h"
#include "tests/cuemu/emu/streams.h"

struct ncclComm {
  MPI_Comm data = MPI_COMM_NULL;     // the communicator's ranks, MPI rank = NCCL rank
  MPI_Comm notices = MPI_COMM_NULL;  // abort notices only: never matched by a data receive
  uint64_t key = 0;
  int rank = 0, nranks = 0, device = 0;
  uint64_t notice = 0;  // the receive buffer of the posted notice receive: the sender's key
  MPI_Request notice_request = MPI_REQUEST_NULL;
  long calls = 0;        // data calls made, for the injection
  long fail_after = -1;  // CUEMU_NCCL_FAIL_AFTER, or -1
  bool failed = false;
  int polls_since_failure = 0;
  // Requests of calls that never completed (the communicator failed meanwhile), released by the abort.
  std::vector<MPI_Request> orphan_sends, orphan_recvs;
  std::vector<cudaStream_t> stalled;
};

namespace {

constexpr uint64_t kMagic = 0x6c63636e756d6563ull;  // "cemunccl": ids from ncclGetUniqueId
constexpr int kTagPointToPoint = 1, kTagAllReduce = 2, kTagReduceScatter = 3, kTagAllGather = 4, kTagBroadcast = 5;
constexpr int kTagNotice = 1;
constexpr size_t kMaxMessageBytes = size_t{1} << 30;  // MPI counts are int: larger transfers go in pieces
constexpr int kPollsBeforeErrorShows = 3;
const char* const kStallWhy = "an NCCL call of this stream's communicator failed and its communicator was not aborted";

struct IdContents {
  uint64_t magic;
  uint64_t key;
};
static_assert(sizeof(IdContents) <= sizeof(ncclUniqueId));

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  cuemu::fail("NCCL shim: %s failed: %s", what, text);
}

int world_rank() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

// fp16 and bf16, written here rather than taken from qtrain, so that the tests compare qtrain's
// conversions with another implementation.
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float half_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in fp32
    const float f = std::ldexp(static_cast<float>(m), -24);
    return sign ? -f : f;
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}
uint16_t float_half(float f) {
  uint32_t a = float_bits(f);
  const auto sign = static_cast<uint16_t>((a >> 16) & 0x8000u);
  a &= 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quiet
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);                        // from 65520 up: infinity
  if (a < 0x38800000u)  // below 2^-14: a subnormal half, round(|f| * 2^24) (the scaling is exact)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(bits_float(a) * 16777216.0f)));
  a -= 112u << 23;                 // rebias the exponent
  a += 0xfffu + ((a >> 13) & 1u);  // round to nearest even on the 13 dropped bits
  return static_cast<uint16_t>(sign | (a >> 13));
}
float bf16_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
uint16_t float_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN, quiet
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <typename T>
void add_into(void* acc, const void* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, static_cast<const char*>(acc) + i * sizeof(T), sizeof(T));
    std::memcpy(&b, static_cast<const char*>(x) + i * sizeof(T), sizeof(T));
    const T s = static_cast<T>(a + b);  // unsigned types wrap; signed ones are summed as unsigned
    std::memcpy(static_cast<char*>(acc) + i * sizeof(T), &s, sizeof(T));
  }
}
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void add_16bit_into(void* acc, const void* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t a, b;
    std::memcpy(&a, static_cast<const char*>(acc) + 2 * i, 2);
    std::memcpy(&b, static_cast<const char*>(x) + 2 * i, 2);
    const uint16_t s = FromFloat(ToFloat(a) + ToFloat(b));
    std::memcpy(static_cast<char*>(acc) + 2 * i, &s, 2);
  }
}
// acc[i] += x[i] in `type`, rounded as the type rounds.
void add(ncclDataType_t type, void* acc, const void* x, size_t n) {
  switch (type) {
    case ncclInt8:
    case ncclUint8: add_into<uint8_t>(acc, x, n); break;
    case ncclInt32:
    case ncclUint32: add_into<uint32_t>(acc, x, n); break;
    case ncclInt64:
    case ncclUint64: add_into<uint64_t>(acc, x, n); break;
    case ncclFloat16: add_16bit_into<half_float, float_half>(acc, x, n); break;
    case ncclBfloat16: add_16bit_into<bf16_float, float_bf16>(acc, x, n); break;
    case ncclFloat32: add_into<float>(acc, x, n); break;
    case ncclFloat64: add_into<double>(acc, x, n); break;
    default: cuemu::fail("NCCL shim: add of an unknown type %d", static_cast<int>(type));
  }
}

// recv = the sum of parts[0], parts[1], ... in that order (parts[0] is overwritten).
void sum_in_rank_order(ncclDataType_t type, std::vector<std::vector<char>>& parts, size_t count, void* recv) {
  for (size_t r = 1; r < parts.size(); ++r) add(type, parts[0].data(), parts[r].data(), count);
  std::memcpy(recv, parts[0].data(), parts[0].size());
}

// One data call: its posted messages and what completes it once they are done (the reduction, the
// local copy).
struct Call {
  const char* name;
  ncclComm* comm;
  cudaStream_t stream;
  std::vector<MPI_Request> requests;
  std::vector<long> expected;  // per request: a receive's byte count, or -1 for a send
  std::function<void()> finish;
  // waiting: messages outstanding. arrived: every receive is done, so the call completes (as its
  // kernel would on a GPU) even if its communicator fails before its own sends finish. failed: it
  // moves nothing more and stalls its stream.
  enum class State { waiting, arrived, failed } state = State::waiting;
};

thread_local int t_group_depth = 0;  // NCCL's group state is per host thread
thread_local std::vector<std::unique_ptr<Call>> t_group;

void post_send(Call& c, const void* p, size_t bytes, int peer, int tag) {
  const char* q = static_cast<const char*>(p);
  do {  // at least one message, so that an empty transfer still pairs with its receive
    const size_t piece = bytes < kMaxMessageBytes ? bytes : kMaxMessageBytes;
    MPI_Request r;
    check_mpi(MPI_Isend(q, static_cast<int>(piece), MPI_BYTE, peer, tag, c.comm->data, &r), "MPI_Isend");
    c.requests.push_back(r);
    c.expected.push_back(-1);
    q += piece;
    bytes -= piece;
  } while (bytes > 0);
}

void post_recv(Call& c, void* p, size_t bytes, int peer, int tag) {
  char* q = static_cast<char*>(p);
  do {
    const size_t piece = bytes < kMaxMessageBytes ? bytes : kMaxMessageBytes;
    MPI_Request r;
    check_mpi(MPI_Irecv(q, static_cast<int>(piece), MPI_BYTE, peer, tag, c.comm->data, &r), "MPI_Irecv");
    c.requests.push_back(r);
    c.expected.push_back(static_cast<long>(piece));
    q += piece;
    bytes -= piece;
  } while (bytes > 0);
}

// A peer's abort notice, if one came (notices of another communicator that had the same MPI context
// id are recognized by their key and dropped).
void poll_notices(ncclComm* comm) {
  while (comm->notice_request != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_Status status;
    check_mpi(MPI_Test(&comm->notice_request, &done, &status), "MPI_Test (abort notice)");
    if (!done) return;
    const int sender = status.MPI_SOURCE;
    const bool ours = comm->notice == comm->key;
    comm->notice_request = MPI_REQUEST_NULL;
    check_mpi(
        MPI_Irecv(&comm->notice, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kTagNotice, comm->notices, &comm->notice_request),
        "MPI_Irecv (abort notice)");
    if (ours && !comm->failed) {
      std::fprintf(stderr, "cuemu NCCL: rank %d: peer rank %d aborted the communicator; its calls fail\n", comm->rank,
                   sender);
      comm->failed = true;
    }
  }
}

void stall(ncclComm* comm, cudaStream_t s) {
  cuemu::set_stream_stalled(s, kStallWhy);
  comm->stalled.push_back(s);
}

// Fails when receive `i` of `c` brought another byte count than the call expects.
void check_received(const Call& c, size_t i, const MPI_Status& status, bool truncated) {
  int got = 0;
  MPI_Get_count(&status, MPI_BYTE, &got);
  if (truncated || got != c.expected[i])
    cuemu::fail(
        "%s on rank %d: rank %d sent %s bytes where this rank expects %ld: the ranks' calls do not match "
        "(NCCL would hang or corrupt memory)",
        c.name, c.comm->rank, status.MPI_SOURCE, truncated ? "more" : std::to_string(got).c_str(), c.expected[i]);
}

// Whether all of the call's messages are done (then checked and released).
bool all_done(Call& c) {
  if (c.requests.empty()) return true;
  int done = 0;
  std::vector<MPI_Status> statuses(c.requests.size());
  const int rc = MPI_Testall(static_cast<int>(c.requests.size()), c.requests.data(), &done, statuses.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) check_mpi(rc, "MPI_Testall");
  if (!done && rc == MPI_SUCCESS) return false;
  for (size_t i = 0; i < statuses.size(); ++i)
    if (c.expected[i] >= 0)
      check_received(c, i, statuses[i], rc == MPI_ERR_IN_STATUS && statuses[i].MPI_ERROR == MPI_ERR_TRUNCATE);
  check_mpi(rc, "MPI_Testall");
  c.requests.clear();
  return true;
}

// Whether all of the call's receives are done (each done one checked and released).
bool receives_done(Call& c) {
  bool all = true;
  for (size_t i = 0; i < c.requests.size(); ++i) {
    if (c.expected[i] < 0 || c.requests[i] == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Status status;
    const int rc = MPI_Test(&c.requests[i], &done, &status);
    if (rc == MPI_ERR_TRUNCATE) check_received(c, i, status, /*truncated=*/true);
    check_mpi(rc, "MPI_Test");
    if (done)
      check_received(c, i, status, /*truncated=*/false);
    else
      all = false;
  }
  return all;
}

// Waits for the calls' messages and finishes them; a call of a failed communicator stalls its stream
// and leaves its messages to the abort.
void complete(std::vector<std::unique_ptr<Call>>& calls) {
  using State = Call::State;
  const auto start = std::chrono::steady_clock::now();
  bool warned = false;
  for (long polls = 0;; ++polls) {
    bool waiting = false;
    for (auto& c : calls) {
      if (c->state != State::waiting) continue;
      if (all_done(*c)) {
        c->state = State::arrived;
        continue;
      }
      poll_notices(c->comm);
      if (c->comm->failed) {
        // A peer aborted. If it did so in a later call, after finishing this one, everything this call
        // receives is here: its messages came before the notice, over the same link.
        c->state = receives_done(*c) ? State::arrived : State::failed;
        continue;
      }
      waiting = true;
    }
    if (!waiting) break;
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));  // leave the core to the peer
    if (!warned && std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
      warned = true;
      std::fprintf(stderr,
                   "cuemu NCCL: world rank %d has waited 60 s in %s for its peers (a peer that never makes the "
                   "same call hangs a GPU too)\n",
                   world_rank(), calls.front()->name);
    }
  }
  for (auto& c : calls) {
    // What is left: the sends of an arrived call whose peer failed, every message of a failed call.
    for (size_t i = 0; i < c->requests.size(); ++i)
      if (c->requests[i] != MPI_REQUEST_NULL)
        (c->expected[i] < 0 ? c->comm->orphan_sends : c->comm->orphan_recvs).push_back(c->requests[i]);
    if (c->state == State::failed)
      stall(c->comm, c->stream);
    else if (c->finish)
      c->finish();
  }
}

// The messages of a sum: this rank sends send + peer * stride (bytes long) to each peer and receives each
// peer's block for it; the call's finish sums every rank's block (its own: send + rank * stride) in
// rank order into recv. stride 0: all-reduce (the same values to everyone); stride = bytes:
// reduce-scatter (block d to rank d). Its own block is copied now, as the sum may overwrite `send`.
void post_sum(Call& c, const char* send, size_t stride, size_t bytes, int tag, void* recv, size_t count,
              ncclDataType_t type) {
  const ncclComm* comm = c.comm;
  auto parts = std::make_shared<std::vector<std::vector<char>>>(static_cast<size_t>(comm->nranks));
  for (int peer = 0; peer < comm->nranks; ++peer) {
    auto& part = (*parts)[static_cast<size_t>(peer)];
    const char* block = send + static_cast<size_t>(peer) * stride;
    if (peer == comm->rank) {
      part.assign(block, block + bytes);
      continue;
    }
    post_send(c, block, bytes, peer, tag);
    part.resize(bytes);
    post_recv(c, part.data(), bytes, peer, tag);
  }
  c.finish = [parts, recv, count, type] { sum_in_rank_order(type, *parts, count, recv); };
}

ncclResult_t run(std::unique_ptr<Call> call) {
  if (t_group_depth > 0) {
    t_group.push_back(std::move(call));
    return ncclSuccess;
  }
  std::vector<std::unique_ptr<Call>> one;
  one.push_back(std::move(call));
  complete(one);
  return ncclSuccess;
}

void require_device(const char* call, const char* what, const void* p, size_t bytes) {
  if (bytes == 0) return;
  const cuemu::MemoryKind k = cuemu::kind_of(p, bytes);
  if (k != cuemu::MemoryKind::Device)
    cuemu::fail("%s: the %s [%p, +%zu bytes) is %s, not device memory: NCCL moves GPU memory only", call, what, p,
                bytes, k == cuemu::MemoryKind::PinnedHost ? "pinned host memory" : "host memory");
}

// The checks every data call makes, in NCCL's order and with its results; null when the call may go
// on, with `call` set up (and, for the injected failure, already failed).
ncclResult_t begin(const char* name, ncclComm* comm, ncclDataType_t type, cudaStream_t stream,
                   std::unique_ptr<Call>& call) {
  if (!comm) {
    std::fprintf(stderr, "cuemu NCCL WARN %s: comm is NULL\n", name);
    return ncclInvalidArgument;
  }
  if (type_size(type) == 0) {
    std::fprintf(stderr, "cuemu NCCL WARN %s: invalid type %d\n", name, static_cast<int>(type));
    return ncclInvalidArgument;
  }
  if (!cuemu::stream_is_live(stream)) return ncclUnhandledCudaError;
  call = std::make_unique<Call>();
  call->name = name;
  call->comm = comm;
  call->stream = stream;
  if (comm->fail_after >= 0 && comm->calls == comm->fail_after && !comm->failed) {
    std::fprintf(stderr,
                 "cuemu NCCL: rank %d: %s fails (CUEMU_NCCL_FAIL_AFTER=%ld): it moves nothing, its stream "
                 "stalls, and the communicator reports ncclRemoteError\n",
                 comm->rank, name, comm->fail_after);
    comm->failed = true;
  }
  if (comm->failed) call->state = Call::State::failed;
  ++comm->calls;
  return ncclSuccess;
}

bool is_valid_rank(ncclComm* comm, int r) { return r >= 0 && r < comm->nranks; }

// What a call reads and writes on its stream, for the stream-ordering check (emu/ordering.h): on a
// GPU an NCCL call's buffers are in use until its stream has run it.
void note_access(const char* name, cudaStream_t stream, const void* p, size_t bytes, bool write) {
  if (bytes > 0) cuemu::stream_access(stream, p, bytes, write, name);
}

void require_sum(const char* name, ncclRedOp_t op) {
  if (op != ncclSum)
    cuemu::fail("%s: only ncclSum is emulated (qtrain sums), got operation %d", name, static_cast<int>(op));
}

void release(ncclComm* comm, bool notify) {
  if (notify)
    for (int peer = 0; peer < comm->nranks; ++peer) {
      if (peer == comm->rank) continue;
      // The send buffer must outlive the freed request, and the communicator: a leaked copy of the key.
      const uint64_t* key = new uint64_t(comm->key);
      MPI_Request r;
      check_mpi(MPI_Isend(key, 1, MPI_UINT64_T, peer, kTagNotice, comm->notices, &r), "MPI_Isend (abort notice)");
      check_mpi(MPI_Request_free(&r), "MPI_Request_free");
    }
  for (cudaStream_t s : comm->stalled) cuemu::set_stream_stalled(s, nullptr);
  std::vector<MPI_Request> recvs = comm->orphan_recvs;
  if (comm->notice_request != MPI_REQUEST_NULL) recvs.push_back(comm->notice_request);
  for (MPI_Request& r : recvs) {
    check_mpi(MPI_Cancel(&r), "MPI_Cancel");
    check_mpi(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait (cancelled receive)");
  }
  // Sends cannot be cancelled reliably: they finish, or not, in the background.
  for (MPI_Request& r : comm->orphan_sends) check_mpi(MPI_Request_free(&r), "MPI_Request_free");
  const bool clean = !comm->failed && !notify;
  if (clean) {
    check_mpi(MPI_Comm_free(&comm->data), "MPI_Comm_free");
    check_mpi(MPI_Comm_free(&comm->notices), "MPI_Comm_free");
  }
  delete comm;
}

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::random_device entropy;
  IdContents c{kMagic, (static_cast<uint64_t>(entropy()) << 32) ^ entropy()};
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, &c, sizeof c);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) cuemu::fail("ncclCommInitRank: the NCCL shim runs over MPI, and MPI is not initialized");
  IdContents c;
  std::memcpy(&c, id.internal, sizeof c);
  if (c.magic != kMagic) cuemu::fail("ncclCommInitRank: the id does not come from ncclGetUniqueId (a GPU would hang)");

  auto comm = std::make_unique<ncclComm>();
  comm->key = c.key;
  comm->rank = rank;
  comm->nranks = nranks;
  {
    cuemu::Uncounted shim;  // NCCL's own runtime calls are not qtrain's (emu/counters.h)
    cudaGetDevice(&comm->device);
  }
  // The ranks with this id, ordered by NCCL rank. Colors are 31 bits of the key: the keys are compared
  // below, so a collision of two communicators starting together is reported, not merged.
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(c.key & 0x7fffffff), rank, &comm->data), "MPI_Comm_split");
  check_mpi(MPI_Comm_set_errhandler(comm->data, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  int size = 0, me = 0;
  MPI_Comm_size(comm->data, &size);
  MPI_Comm_rank(comm->data, &me);
  if (size != nranks)
    cuemu::fail(
        "ncclCommInitRank: %d ranks called it with this id, but nranks is %d (a GPU would wait for the rest "
        "forever)",
        size, nranks);
  struct Member {
    uint64_t key;
    int rank, device;
    char host[MPI_MAX_PROCESSOR_NAME];
  } mine{}, *all = new Member[static_cast<size_t>(size)];
  std::unique_ptr<Member[]> members(all);
  mine.key = c.key;
  mine.rank = rank;
  mine.device = comm->device;
  int len = 0;
  MPI_Get_processor_name(mine.host, &len);
  check_mpi(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, comm->data), "MPI_Allgather");
  for (int r = 0; r < size; ++r) {
    if (all[r].key != c.key) cuemu::fail("ncclCommInitRank: two unique ids met in one MPI_Comm_split color");
    if (all[r].rank != r) cuemu::fail("ncclCommInitRank: two ranks called it as NCCL rank %d", all[r].rank);
  }
  for (int r = 0; r < size; ++r)
    for (int s = r + 1; s < size; ++s)
      if (all[r].device == all[s].device && std::strcmp(all[r].host, all[s].host) == 0) {
        std::fprintf(stderr, "cuemu NCCL WARN Duplicate GPU detected : rank %d and rank %d both on CUDA device %d\n", r,
                     s, all[r].device);
        MPI_Comm_free(&comm->data);
        return ncclInvalidUsage;
      }
  check_mpi(MPI_Comm_dup(comm->data, &comm->notices), "MPI_Comm_dup");
  check_mpi(MPI_Irecv(&comm->notice, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kTagNotice, comm->notices, &comm->notice_request),
            "MPI_Irecv (abort notice)");
  if (const char* e = std::getenv("CUEMU_NCCL_FAIL_AFTER"); e && *e) {
    char* end = nullptr;
    comm->fail_after = std::strtol(e, &end, 10);
    if (*end != '\0' || comm->fail_after < 0) cuemu::fail("CUEMU_NCCL_FAIL_AFTER=%s is not a count of calls", e);
  }
  *out = comm.release();
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (!comm || !error) return ncclInvalidArgument;
  poll_notices(comm);
  *error = comm->failed && ++comm->polls_since_failure >= kPollsBeforeErrorShows ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm) release(comm, /*notify=*/true);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm) release(comm, /*notify=*/false);
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<std::unique_ptr<Call>> calls = std::move(t_group);
  t_group.clear();
  complete(calls);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  std::unique_ptr<Call> c;
  if (ncclResult_t r = begin("ncclAllReduce", comm, type, stream, c)) return r;
  require_sum("ncclAllReduce", op);
  const size_t bytes = count * type_size(type);
  require_device("ncclAllReduce", "send buffer", send, bytes);
  require_device("ncclAllReduce", "receive buffer", recv, bytes);
  note_access("ncclAllReduce", stream, send, bytes, false);
  note_access("ncclAllReduce", stream, recv, bytes, true);
  if (count == 0 || comm->failed) return run(std::move(c));
  // Every rank sends its values to every other one and sums all of them in rank order.
  post_sum(*c, static_cast<const char*>(send), /*stride=*/0, bytes, kTagAllReduce, recv, count, type);
  return run(std::move(c));
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  std::unique_ptr<Call> c;
  if (ncclResult_t r = begin("ncclReduceScatter", comm, type, stream, c)) return r;
  require_sum("ncclReduceScatter", op);
  const size_t bytes = count * type_size(type);  // of one rank's block
  require_device("ncclReduceScatter", "send buffer", send, bytes * static_cast<size_t>(comm->nranks));
  require_device("ncclReduceScatter", "receive buffer", recv, bytes);
  note_access("ncclReduceScatter", stream, send, bytes * static_cast<size_t>(comm->nranks), false);
  note_access("ncclReduceScatter", stream, recv, bytes, true);
  if (count == 0 || comm->failed) return run(std::move(c));
  // Rank d's block goes to rank d, which sums the blocks it receives in rank order.
  post_sum(*c, static_cast<const char*>(send), /*stride=*/bytes, bytes, kTagReduceScatter, recv, count, type);
  return run(std::move(c));
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  std::unique_ptr<Call> c;
  if (ncclResult_t r = begin("ncclAllGather", comm, type, stream, c)) return r;
  const size_t bytes = count * type_size(type);  // of one rank's block
  require_device("ncclAllGather", "send buffer", send, bytes);
  require_device("ncclAllGather", "receive buffer", recv, bytes * static_cast<size_t>(comm->nranks));
  note_access("ncclAllGather", stream, send, bytes, false);
  note_access("ncclAllGather", stream, recv, bytes * static_cast<size_t>(comm->nranks), true);
  if (count == 0 || comm->failed) return run(std::move(c));
  // The other ranks' blocks land at their slots; this rank's slot is written last, when the sends that
  // read `send` are done (in place, `send` is that slot).
  char* blocks = static_cast<char*>(recv);
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank) continue;
    post_send(*c, send, bytes, peer, kTagAllGather);
    post_recv(*c, blocks + static_cast<size_t>(peer) * bytes, bytes, peer, kTagAllGather);
  }
  char* slot = blocks + static_cast<size_t>(comm->rank) * bytes;
  c->finish = [send, slot, bytes] { std::memmove(slot, send, bytes); };
  return run(std::move(c));
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  std::unique_ptr<Call> c;
  if (ncclResult_t r = begin("ncclBroadcast", comm, type, stream, c)) return r;
  if (!is_valid_rank(comm, root)) return ncclInvalidArgument;
  const size_t bytes = count * type_size(type);
  if (comm->rank == root) require_device("ncclBroadcast", "send buffer", send, bytes);
  require_device("ncclBroadcast", "receive buffer", recv, bytes);
  if (comm->rank == root) note_access("ncclBroadcast", stream, send, bytes, false);
  note_access("ncclBroadcast", stream, recv, bytes, true);
  if (count == 0 || comm->failed) return run(std::move(c));
  if (comm->rank == root) {
    for (int peer = 0; peer < comm->nranks; ++peer)
      if (peer != root) post_send(*c, send, bytes, peer, kTagBroadcast);
    c->finish = [send, recv, bytes] { std::memmove(recv, send, bytes); };
  } else {
    post_recv(*c, recv, bytes, root, kTagBroadcast);
  }
  return run(std::move(c));
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  std::unique_ptr<Call> c;
  if (ncclResult_t r = begin("ncclSend", comm, type, stream, c)) return r;
  if (!is_valid_rank(comm, peer)) return ncclInvalidArgument;
  const size_t bytes = count * type_size(type);
  require_device("ncclSend", "send buffer", send, bytes);
  note_access("ncclSend", stream, send, bytes, false);
  if (!comm->failed) post_send(*c, send, bytes, peer, kTagPointToPoint);
  return run(std::move(c));
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  std::unique_ptr<Call> c;
  if (ncclResult_t r = begin("ncclRecv", comm, type, stream, c)) return r;
  if (!is_valid_rank(comm, peer)) return ncclInvalidArgument;
  const size_t bytes = count * type_size(type);
  require_device("ncclRecv", "receive buffer", recv, bytes);
  note_access("ncclRecv", stream, recv, bytes, true);
  if (!comm->failed) post_recv(*c, recv, bytes, peer, kTagPointToPoint);
  return run(std::move(c));
}
