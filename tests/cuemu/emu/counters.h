// Counters of what the code under test asks of the CUDA runtime: how often the host waits for the
// device, the copies each way and their bytes, the kernel launches (per kernel), events and stream
// waits. The emulator runs everything at once, so it cannot time a GPU's stalls; it can count the
// calls that cause them, exactly and on every run, so that a test can hold a training step to its
// number of host waits. What the library shims (shims/*.cpp: NCCL, cuBLAS, cuDNN, cuRAND) do inside
// is not counted: the counters describe qtrain's own calls, not the emulator's way of standing in for
// a library (a shim that calls the runtime does so under an Uncounted guard).
//
// Reading them: a test includes this header and takes cuemu::counters() before and after a region;
// the difference (operator-) is what the region did, on every thread of the process (the gradient
// exchange runs on a thread of its own). CUEMU_STATS writes the totals at exit (tests/cuemu/README.md).
//
// What a host wait is follows CUDA's "API synchronization behavior" (runtime API documentation):
// - cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize: each call;
// - cudaMemcpy: every direction but device to device ("no host-side synchronization is performed");
// - cudaMemcpyAsync: to or from pageable host memory (device to pageable host returns once the copy
//   is done; pageable to device may synchronize with the stream to stage it), and host to host;
//   a copy between device memory and pinned host memory, or within the device, does not wait;
// - cudaMemset and cudaMemsetAsync on device memory do not wait (asynchronous with respect to the
//   host; the emulator accepts device memory only), and are counted as memsets;
// - cudaStreamQuery and cudaEventQuery do not wait: they are counted as queries.
// cudaFree, cudaFreeHost and cudaMallocHost also wait for the device on a GPU; they are counted apart,
// as allocation_syncs. A copy or memset of zero bytes, or a call that fails, counts nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace cuemu {

struct KernelCounts {
  std::uint64_t launches = 0;
  std::uint64_t blocks = 0;
  std::uint64_t threads = 0;  // blocks x threads per block, summed over the launches
};

// A snapshot of the process's counters (each read once, at some moment of the call).
struct Counters {
  std::uint64_t host_syncs = 0;  // the calls above that make the host wait for the device
  std::uint64_t queries = 0;     // cudaStreamQuery, cudaEventQuery
  // Copies by direction (cudaMemcpy and cudaMemcpyAsync; cudaMemcpyDefault by where the pointers lie).
  std::uint64_t h2d_copies = 0, h2d_bytes = 0;
  std::uint64_t d2h_copies = 0, d2h_bytes = 0;
  std::uint64_t d2d_copies = 0, d2d_bytes = 0;
  std::uint64_t h2h_copies = 0, h2h_bytes = 0;
  std::uint64_t memsets = 0;           // cudaMemset, cudaMemsetAsync
  std::uint64_t allocations = 0;       // cudaMalloc, cudaMallocAsync, cudaMallocHost, cudaHostAlloc
  std::uint64_t frees = 0;             // cudaFree, cudaFreeAsync, cudaFreeHost (of a non-null pointer)
  std::uint64_t allocation_syncs = 0;  // of those, the ones that wait for the device on a GPU
  std::uint64_t event_records = 0;     // cudaEventRecord
  std::uint64_t stream_waits = 0;      // cudaStreamWaitEvent
  // Kernel launches, and what running them cost the emulator.
  std::uint64_t launches = 0, blocks = 0, threads = 0;
  std::uint64_t switches = 0;                      // fiber switches
  std::uint64_t warp_collectives = 0;              // warp collectives resolved (one per warp)
  std::uint64_t barriers = 0;                      // __syncthreads passed (one per block)
  std::map<std::string, KernelCounts> per_kernel;  // by the kernel's name as its launch site writes it
};

Counters counters();
// What happened between two snapshots (`later` minus `earlier`, per kernel too; kernels without a
// launch in between are left out).
Counters operator-(const Counters& later, const Counters& earlier);

// While one lives, nothing this thread does is counted (other threads count on). The shims take one
// around any runtime call they make; it nests.
class Uncounted {
 public:
  Uncounted();
  ~Uncounted();
  Uncounted(const Uncounted&) = delete;
  Uncounted& operator=(const Uncounted&) = delete;
};

// ---- For the emulator's runtime and scheduler ----

enum class Count {
  HostSyncs,
  Queries,
  Memsets,
  Allocations,
  Frees,
  AllocationSyncs,
  EventRecords,
  StreamWaits,
  kCount
};
// Adds one to `c`, unless this thread is inside an Uncounted scope.
void count(Count c);

enum class CopyDirection { HostToHost, HostToDevice, DeviceToHost, DeviceToDevice };
// A copy of `bytes` bytes in that direction (and, with host_sync, a host wait).
void count_copy(CopyDirection d, std::uint64_t bytes, bool host_sync);

// A finished launch of `kernel` (a string literal from the launch rewrite) and its cost.
struct LaunchCost {
  std::uint64_t blocks = 0, threads = 0, switches = 0, collectives = 0, barriers = 0;
};
void count_launch(const char* kernel, const LaunchCost& cost);

}  // namespace cuemu
