// The execution model: a grid's blocks run one after another; a block's threads are fibers that switch
// only where CUDA threads wait for each other: at __syncthreads (the whole block) and at a warp
// collective (__shfl*_sync, __ballot_sync, __syncwarp: the 32 lanes of one warp, as on Volta and
// later). Between those points a lane runs alone, so any read of another thread's write that is not
// ordered by a barrier or a collective sees whatever the schedule made of it: the shuffled schedule
// (CUEMU_SEED) runs warps, lanes and blocks in a random order, and shared and device memory start
// poisoned, so such reads change results. What a GPU would refuse or leave undefined (a collective
// reached by part of a warp, a barrier after some threads exited or at different barriers, a
// deadlock, launch limits) aborts with a message naming the kernel, block, thread and source line.
#pragma once

#include <cstdint>
#include <cstring>

namespace cuemu {

struct uint3v {
  unsigned int x, y, z;
};

enum class Collective : uint8_t { ShflIdx, ShflXor, ShflUp, ShflDown, Ballot, Any, All, SyncWarp };

// A source position (file, line) of a barrier or collective, for messages.
struct Site {
  const char* file;
  int line;
};

struct ThreadState;

// What device code reads for threadIdx, blockIdx, blockDim and gridDim: kept up to date by the
// scheduler on every switch, read inline (a thread-local load, initial-exec: the emulator is linked
// into executables, never dlopen'ed) because kernels read them in every loop iteration. GNU __thread,
// not thread_local: an extern thread_local is read through a TLS wrapper check (for a dynamic
// initializer another file might have), and GCC 12 with -fsanitize=null tests the wrapper's flags as
// if they were the address's, reporting "member access within null pointer" in the UBSan variant.
// __thread has no dynamic initialization, hence no wrapper; it needs a trivial type (zeroed at start).
struct Geometry {
  ThreadState* thread;  // null outside a kernel
  uint3v thread_idx, block_idx, block_dim, grid_dim;
};
extern __thread Geometry g_geometry __attribute__((tls_model("initial-exec")));

inline ThreadState* current_thread() { return g_geometry.thread; }
const uint3v& thread_index_outside_kernel();  // fails: threadIdx read on the host
inline const uint3v& thread_index() {
  return g_geometry.thread ? g_geometry.thread_idx : thread_index_outside_kernel();
}
inline const uint3v& block_index() { return g_geometry.block_idx; }
inline const uint3v& block_dim() { return g_geometry.block_dim; }
inline const uint3v& grid_dim() { return g_geometry.grid_dim; }

// __syncthreads(): waits for every thread of the block at the same barrier.
void sync_block(Site site);
// A warp collective of this lane: returns the lane's result (the source lane's 64-bit payload, or the
// ballot bits).
uint64_t warp_collective(Site site, Collective op, unsigned mask, uint64_t value, int arg, int width);

// How a launch is run.
struct Schedule {
  uint64_t seed = 0;            // 0: blocks, warps and lanes in index order; else shuffled from this seed
  unsigned char poison = 0xFF;  // the byte fresh device allocations and __shared__ arrays hold
};
const Schedule& schedule();  // from CUEMU_SEED and CUEMU_POISON, read once

// Runs body(context) once per thread of every block of the grid. Launches are serialized across host
// threads (a valid GPU schedule: streams may but need not overlap).
void run_grid(const char* kernel, Site site, uint3v grid, uint3v block, void (*body)(void*), void* context);

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace cuemu
