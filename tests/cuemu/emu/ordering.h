// Stream ordering: the emulator runs every stream's work at once, in the order it is enqueued, so
// it cannot show a race between streams by a wrong result. On a GPU, work on a stream created with
// cudaStreamNonBlocking is not ordered with the legacy default stream, on which cudaMemcpy,
// cudaMemset and Tensor::to/copy_from run: reading a kernel's output that way without waiting for the
// kernel's stream reads whatever is there (the first GPU run found a test doing so). This module
// finds such races without a GPU: each non-blocking stream keeps what its kernels and copies may
// still touch (a kernel's pointer arguments, from the pointer to the end of its allocation, written
// unless the argument's pointee is const; a copy's exact ranges; an NCCL call's buffers, noted by the
// NCCL shim) until the host learns that work is done
// (stream, event or device synchronization, a successful query, cudaFree, or the legacy stream made
// to wait for an event). A legacy-stream access that overlaps such work, one of them a write, aborts
// with both sides named. Work of non-blocking streams among themselves is not checked. The launch
// rewrite sees the arguments' types, not the kernel's parameters: a non-const pointer passed to a
// const parameter counts as written, which can only report a race that a read-only kernel would
// not have (never miss one).
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace cuemu {

// Marks a stream created with cudaStreamNonBlocking (the null, legacy and per-thread streams and
// blocking streams are ordered with the legacy stream and count as it).
void set_stream_non_blocking(CUstream_st* s, bool non_blocking);

// Work enqueued on `s` that may touch [p, p + bytes) (bytes 0: to the end of p's allocation): noted
// when s is non-blocking, else checked against what non-blocking streams may still touch.
void stream_access(CUstream_st* s, const void* p, std::size_t bytes, bool write, const char* what);

// The position of `s` after its last enqueued work (an event records it).
std::uint64_t stream_position(CUstream_st* s);
// The host knows the work of `s` up to `position` is done (and what it had waited for).
void stream_done_up_to(CUstream_st* s, std::uint64_t position);
void stream_done(CUstream_st* s);
void device_done();
// `waiter` waits for `s` up to `position` (cudaStreamWaitEvent): for the legacy stream that orders
// its later work after it; for another stream, that stream's completion implies it.
void stream_waits(CUstream_st* waiter, CUstream_st* s, std::uint64_t position);
void forget_stream(CUstream_st* s);

}  // namespace cuemu
