// Communicator: the narrow, typed transport under the gradient exchange: few operations. Counts come
// from typed spans (never bytes-vs-elements confusion); arguments are checked once at the entry and
// errors name the operation. Implementations: LocalComm (a world of one), MpiComm (Open MPI; CUDA
// buffers staged through pinned host memory unless the MPI is CUDA-aware), NcclComm (one GPU per
// rank, unique id broadcast over MPI). All calls are collective unless stated otherwise, and every
// rank must make the same calls in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "framework/core/context.h"
#include "framework/core/tensor.h"

namespace qtrain {

// Element types a reduction can work on. Sums of 16-bit values accumulate in fp32 where the library
// allows it (a custom MPI operation does: each combine adds in fp32 and rounds to nearest even; NCCL
// reduces in the type itself).
enum class ReduceType { f32, f16, bf16, f64 };

const char* reduce_type_name(ReduceType type);
size_t reduce_type_size(ReduceType type);

// Where buffers live: `data` and `send` may be host memory or GPU memory (looked up per pointer);
// GPU memory needs a CUDA context on that GPU, whose stream orders the copies with the kernels that
// produce and consume the data. Received bytes always land in host vectors, and the size and offset
// vectors are host values, complete when a call returns. MpiComm stages GPU buffers through pinned
// host memory (unless the MPI is CUDA-aware) and returns with all results in place; NcclComm stages
// host buffers through device memory and leaves in-place GPU results (all_reduce_sum,
// broadcast_bytes) enqueued on ctx's stream.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* name() const = 0;  // "local", "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The run's device: where buffers best live (CPU for local/mpi on a CPU run, the rank's GPU for
  // nccl); every transport accepts both kinds as described above.
  virtual Device device() const = 0;

  // In-place sum of `count` elements of `type` at `data` across ranks.
  virtual void all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) = 0;
  // Every rank contributes `send` (sizes may differ per rank); `recv` receives the concatenation in
  // rank order and `sizes[r]` / `offsets[r]` say where rank r's bytes are. `recv` is resized (its
  // capacity is kept, so a steady state allocates nothing); `send` must not point into it.
  virtual void all_gather_bytes(Context& ctx, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                                std::vector<size_t>& sizes, std::vector<size_t>& offsets) = 0;
  // Personalized exchange: rank r sends `send[send_offsets[d] .. + send_sizes[d])` to every rank d and
  // receives rank s's bytes for it at recv[recv_offsets[s] ..] (sizes are exchanged first; recv is
  // resized; recv_offsets are the prefix sums of recv_sizes).
  virtual void all_to_all_bytes(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& send_sizes,
                                const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                                std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) = 0;
  // Streaming forms of all_to_all_bytes and all_gather_bytes: the caller's encoding and decoding
  // overlap the transfers. `produce(d)` returns the bytes for rank d (host memory, valid until the
  // call returns); it is called once per rank, starting with the right neighbour and ending with this
  // rank, and every produce call comes before the first consume call. Rank s's bytes for this rank
  // arrive in host memory (inside `recv`, which is resized) and go to `consume(s, bytes)` in rank
  // order, each as soon as it and those before it have arrived. `recv_capacity[s]` bounds what rank s
  // may send here: more is an error. In all_to_all_streamed, `send_capacity[d]` bounds what this
  // rank produces for rank d and is what rank d gives as its recv_capacity for this rank, so that a
  // transport whose collectives need every block's length in advance (PythonCollectivesComm) can
  // size them without a round of sizes. These defaults produce everything, run the plain collective
  // and then consume; MpiComm overrides them with nonblocking point-to-point messages.
  using Produce = std::function<std::span<const uint8_t>(int rank)>;
  using Consume = std::function<void(int rank, std::span<const uint8_t> bytes)>;
  virtual void all_to_all_streamed(Context& ctx, const Produce& produce, const std::vector<size_t>& send_capacity,
                                   const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                                   const Consume& consume);
  // Every rank sends `send` (host memory) to every rank, itself included.
  virtual void all_gather_streamed(Context& ctx, std::span<const uint8_t> send,
                                   const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                                   const Consume& consume);
  // Device-resident forms of all_to_all_bytes and all_gather_bytes, for communicators that move GPU
  // memory themselves (nccl; device_byte_collectives() says so, and the defaults fail): `send` is in
  // the context's GPU memory, and the result is device memory holding rank s's block at
  // offsets[s] (sizes and offsets as the *_bytes forms give them), valid until this communicator's
  // next collective; null when nothing was received. The GPU exchange decodes there, without the
  // host round trip of the *_bytes forms.
  //
  // With `sizes_given`, recv_sizes (all_to_all) or sizes (all_gather) hold on entry what every rank
  // sends (the caller's plan knows it: fixed-size payloads, or slots of a fixed size), so no sizes are exchanged first,
  // and the call returns without waiting: the result is ordered on ctx's stream, and a failed peer is reported by the
  // next wait_stream(). Without it, the sizes are exchanged and the call waits.
  virtual bool device_byte_collectives() const { return false; }
  virtual const uint8_t* all_to_all_device(Context& ctx, std::span<const uint8_t> send,
                                           const std::vector<size_t>& send_sizes,
                                           const std::vector<size_t>& send_offsets, std::vector<size_t>& recv_sizes,
                                           std::vector<size_t>& recv_offsets, bool sizes_given);
  virtual const uint8_t* all_gather_device(Context& ctx, std::span<const uint8_t> send, std::vector<size_t>& sizes,
                                           std::vector<size_t>& offsets, bool sizes_given);
  // Waits for the work queued on ctx's stream (this communicator's included). NCCL polls for a peer's
  // failure meanwhile, instead of blocking in cudaStreamSynchronize on a collective that never ends.
  virtual void wait_stream(Context& ctx) { ctx.synchronize(); }
  // Nonblocking messages between host buffers, for algorithms that run their own schedule
  // (reduce-scatter + allgather in pipelined pieces). Transports without them (local, nccl) answer
  // false to has_point_to_point(), and their callers use the streaming collectives instead.
  // post_send / post_recv return a request number; buffers must stay valid until it completes; tags
  // are below kMaxPointToPointTag and a receive's buffer bounds what the sender may send (more is an
  // error). test() never blocks; wait_any() blocks until one of `among` completes and returns it;
  // both report a receive's byte count. complete_all() waits for every posted request and forgets
  // them. These defaults fail: only call them when has_point_to_point().
  static constexpr int kMaxPointToPointTag = 8192;
  virtual bool has_point_to_point() const { return false; }
  virtual size_t max_point_to_point_bytes() const { return 0; }  // the most bytes of one message
  virtual int post_send(std::span<const uint8_t> bytes, int dest, int tag);
  virtual int post_recv(std::span<uint8_t> buffer, int src, int tag);
  virtual bool test(int request, size_t* received);
  virtual int wait_any(const std::vector<int>& among, size_t* received);
  virtual void complete_all();
  // `data` of root is copied to every rank (the same size everywhere).
  virtual void broadcast_bytes(Context& ctx, std::span<uint8_t> data, int root) = 0;
  // Host-side helpers for control data (checksums, config hashes, metrics): always on the CPU.
  virtual std::vector<uint64_t> all_gather_u64(uint64_t value) = 0;
  // Whether every rank passed the same `value` (a config hash, a device kind, a checksum); if not, the
  // lowest rank that differs from rank 0, with both values for the error. Collective.
  struct Disagreement {
    int rank;
    uint64_t value, rank0_value;
  };
  std::optional<Disagreement> first_disagreement(uint64_t value);
  virtual void all_reduce_sum_f64(std::span<double> values) = 0;
  virtual void barrier() = 0;

  // Subgroups, for the hierarchical exchange. node_color(): ranks that share a node's memory
  // (MPI_COMM_TYPE_SHARED) get the same value, the lowest rank of the node. split(color, key): a new
  // communicator of the ranks with this color, ordered by key. Both collective; transports without
  // subgroups (nccl) say so.
  virtual bool has_subgroups() const { return false; }
  virtual int node_color();
  virtual std::unique_ptr<Communicator> split(int color, int key);
  // In-place reduce-scatter: `data` holds counts[0] + ... + counts[P-1] elements of `type`, block r
  // after the blocks before it; on return block r of rank r holds the sum over ranks of block r, and
  // the other blocks are undefined. The same counts on every rank. This default sums the whole
  // buffer (all_reduce_sum); MpiComm sends each block towards its owner only (the ring's
  // reduce-scatter phase: half an allreduce's bytes; GPU buffers staged through host memory), NcclComm runs
  // ncclReduceScatter on a buffer in its GPU's memory (blocks of different sizes padded to the
  // largest).
  virtual void reduce_scatter_sum(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type);
  // Its inverse, in place: on return every rank's block r holds rank r's block r, bit for bit (the
  // same counts on every rank; `type` gives the element size). This default goes through
  // all_gather_bytes; MpiComm passes the blocks around its ring (GPU buffers staged through host
  // memory), NcclComm gathers GPU buffers in place (ncclAllGather, or send/receive pairs for blocks
  // of different sizes).
  virtual void all_gather_blocks(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type);

 protected:
  // The elements of a reduce_scatter_sum buffer: the sum of `counts`, checked (one per rank, none negative).
  int64_t reduce_scatter_total(const char* op, std::span<const int64_t> counts) const;
  // Where block r of such a buffer begins, in elements.
  static int64_t block_begin(std::span<const int64_t> counts, int r);
  // Scratch of the default streaming forms and all_gather_blocks (one call at a time per communicator).
  std::vector<uint8_t> stream_send_;
  std::vector<size_t> stream_sizes_, stream_offsets_, stream_recv_sizes_, stream_recv_offsets_;
};

// The backend the config asks for: "local", "mpi", "nccl" or "auto" (nccl for CUDA devices when
// there is more than one rank and every rank runs on a GPU, else mpi; a world of one always gets
// LocalComm). mpi and nccl need MPI running or an MpiRuntime that deferred it (a process started
// alone: its singleton starts here); "mpi" also works in a world of one.
// An impossible request (nccl without a GPU on every rank or without NCCL in this build, local with
// several ranks, an unknown name) is an InputError saying why, raised on every rank alike.
std::unique_ptr<Communicator> make_communicator(const std::string& backend, Device device);

struct TransportConfig;
// The same from the `communication:` section, with its transport options applied (mpi_allreduce).
std::unique_ptr<Communicator> make_communicator(const TransportConfig& config, Device device);

}  // namespace qtrain
