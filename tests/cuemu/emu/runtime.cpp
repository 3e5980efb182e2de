// The CUDA runtime API over the emulator: memory in host allocations (emu/memory.h), streams as
// tokens (every call is synchronous; emu/ordering.h checks the order a GPU would not guarantee), the last-error word
// per host thread as in CUDA. Misuse a GPU would report is reported the same way (an error code), and misuse it would
// leave undefined (a copy whose pointers are not what its kind claims) aborts with a message.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "tests/cuemu/emu/counters.h"
#include "tests/cuemu/emu/memory.h"
#include "tests/cuemu/emu/ordering.h"
#include "tests/cuemu/emu/scheduler.h"
#include "tests/cuemu/emu/streams.h"

struct CUstream_st {
  unsigned flags;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point when;
  bool recorded = false;
  CUstream_st* stream = nullptr;  // where it was recorded, and that stream's position then
  std::uint64_t position = 0;
};

namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

// The number of emulated GPUs: CUEMU_DEVICES (default 1). Zero emulates a machine without a GPU.
int device_count() {
  static const int n = [] {
    const char* e = std::getenv("CUEMU_DEVICES");
    return e && *e ? std::atoi(e) : 1;
  }();
  return n;
}

struct Streams {
  std::mutex mutex;
  std::set<const CUstream_st*> live;
  std::map<const CUstream_st*, const char*> stalled;  // emu/streams.h: why each stalled stream waits
};
Streams& streams() {
  static Streams* s = new Streams;
  return *s;
}

bool is_live_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
  Streams& all = streams();
  std::lock_guard<std::mutex> lock(all.mutex);
  return all.live.count(s) != 0;
}

// Why `s` is stalled, or null; with s == nullptr and any_stream, why any stream is.
const char* stall_of(cudaStream_t s, bool any_stream = false) {
  Streams& all = streams();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (any_stream) return all.stalled.empty() ? nullptr : all.stalled.begin()->second;
  const auto it = all.stalled.find(s);
  return it == all.stalled.end() ? nullptr : it->second;
}

const char* kind_name(cuemu::MemoryKind k) {
  switch (k) {
    case cuemu::MemoryKind::Device: return "device memory";
    case cuemu::MemoryKind::PinnedHost: return "pinned host memory";
    default: return "unregistered host memory";
  }
}

// A copy's pointers must be what its kind says (with UVA, cudaMemcpyDefault accepts any).
void check_copy_side(const char* call, const char* side, const void* p, size_t bytes, bool device) {
  const cuemu::MemoryKind k = cuemu::kind_of(p, bytes);
  if (device && k != cuemu::MemoryKind::Device)
    cuemu::fail("%s: the %s [%p, +%zu bytes) is %s, not device memory", call, side, p, bytes, kind_name(k));
  if (!device && k == cuemu::MemoryKind::Device)
    cuemu::fail("%s: the %s %p is device memory, but the copy's kind says host", call, side, p);
}

// Counts a copy (emu/counters.h): its direction from where the pointers lie (so cudaMemcpyDefault is
// classified too; an explicit kind was checked against them), and whether it makes the host wait, by
// CUDA's "API synchronization behavior": cudaMemcpy waits unless device to device; cudaMemcpyAsync
// waits when a host side is pageable (device to pageable returns once done; pageable to device may
// stage through the stream) and host to host, never between device memory and pinned memory.
void note_copy(void* dst, const void* src, size_t bytes, bool async) {
  const cuemu::MemoryKind d = cuemu::kind_of(dst, bytes), s = cuemu::kind_of(src, bytes);
  const bool to_device = d == cuemu::MemoryKind::Device, from_device = s == cuemu::MemoryKind::Device;
  const cuemu::CopyDirection direction =
      to_device ? (from_device ? cuemu::CopyDirection::DeviceToDevice : cuemu::CopyDirection::HostToDevice)
                : (from_device ? cuemu::CopyDirection::DeviceToHost : cuemu::CopyDirection::HostToHost);
  bool waits = false;
  switch (direction) {
    case cuemu::CopyDirection::DeviceToDevice: waits = false; break;
    case cuemu::CopyDirection::HostToHost: waits = true; break;
    case cuemu::CopyDirection::HostToDevice: waits = !async || s != cuemu::MemoryKind::PinnedHost; break;
    case cuemu::CopyDirection::DeviceToHost: waits = !async || d != cuemu::MemoryKind::PinnedHost; break;
  }
  cuemu::count_copy(direction, bytes, waits);
}

cudaError_t copy(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                 bool async) {
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return record(cudaErrorInvalidValue);
  cuemu::stream_access(stream, src, bytes, false, call);
  cuemu::stream_access(stream, dst, bytes, true, call);
  switch (kind) {
    case cudaMemcpyHostToHost:
      check_copy_side(call, "destination", dst, bytes, false);
      check_copy_side(call, "source", src, bytes, false);
      break;
    case cudaMemcpyHostToDevice:
      check_copy_side(call, "destination", dst, bytes, true);
      check_copy_side(call, "source", src, bytes, false);
      break;
    case cudaMemcpyDeviceToHost:
      check_copy_side(call, "destination", dst, bytes, false);
      check_copy_side(call, "source", src, bytes, true);
      break;
    case cudaMemcpyDeviceToDevice:
      check_copy_side(call, "destination", dst, bytes, true);
      check_copy_side(call, "source", src, bytes, true);
      break;
    case cudaMemcpyDefault: break;
    default: return record(cudaErrorInvalidMemcpyDirection);
  }
  note_copy(dst, src, bytes, async);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t set(const char* call, void* p, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (cuemu::kind_of(p, bytes) != cuemu::MemoryKind::Device)
    cuemu::fail("%s: [%p, +%zu bytes) is not inside one device allocation", call, p, bytes);
  cuemu::stream_access(stream, p, bytes, true, call);
  cuemu::count(cuemu::Count::Memsets);  // device memory: no host wait, cudaMemset included (emu/counters.h)
  std::memset(p, value, bytes);
  return cudaSuccess;
}

}  // namespace

namespace cuemu {

void check_launch_config(const char* kernel, Site site, const LaunchConfig& c) {
  const unsigned long long threads = 1ull * c.block.x * c.block.y * c.block.z;
  const char* why = nullptr;
  if (threads == 0 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0)
    why = "an empty grid or block";
  else if (threads > 1024)
    why = "more than 1024 threads per block";
  else if (c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64)
    why = "a block dimension beyond (1024, 1024, 64)";
  else if (c.grid.x > 0x7fffffffu || c.grid.y > 65535 || c.grid.z > 65535)
    why = "a grid dimension beyond (2^31-1, 65535, 65535)";
  else if (c.shared_bytes != 0)
    why = "dynamic shared memory (not emulated; qtrain's kernels use static __shared__ only)";
  if (why)
    fail("invalid launch of %s at %s:%d: grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared memory: %s",
         kernel, site.file, site.line, c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.shared_bytes,
         why);
}

void check_kernel_pointer(const char* kernel, Site site, int index, const void* p) {
  if (p == nullptr) return;
  const MemoryKind k = kind_of(p, 0);
  if (k == MemoryKind::Unregistered)
    fail(
        "kernel %s launched at %s:%d: argument %d (%p) is host memory a GPU cannot address (not from cudaMalloc or "
        "cudaMallocHost)",
        kernel, site.file, site.line, index, p);
}

bool stream_is_live(cudaStream_t s) { return is_live_stream(s); }

void set_stream_stalled(cudaStream_t s, const char* why) {
  Streams& all = streams();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (why)
    all.stalled[s] = why;
  else
    all.stalled.erase(s);
}

void check_stream(const char* kernel, Site site, CUstream_st* s) {
  if (!is_live_stream(s))
    fail("kernel %s launched at %s:%d on stream %p, which is not a live stream", kernel, site.file, site.line,
         static_cast<void*>(s));
}

}  // namespace cuemu

cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return *count > 0 ? cudaSuccess : record(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return record(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  cuemu::count(cuemu::Count::HostSyncs);
  if (const char* why = stall_of(nullptr, true)) cuemu::fail("cudaDeviceSynchronize would wait forever: %s", why);
  cuemu::device_done();
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (device < 0 || device >= device_count()) return record(cudaErrorInvalidDevice);
  std::snprintf(id, static_cast<size_t>(len), "0000:%02x:00.0", 0x10 + device);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  // An 80 GB device; what qtrain allocated is not free.
  *total = size_t{80} << 30;
  *free = *total - cuemu::device_bytes_in_use();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = cuemu::allocate(bytes, cuemu::MemoryKind::Device);
  if (!*p) return record(cudaErrorMemoryAllocation);
  cuemu::count(cuemu::Count::Allocations);
  return cudaSuccess;
}

namespace {

// Frees a device allocation, counted; `waits`: a call that waits for the device on a GPU (cudaFree,
// not cudaFreeAsync; the emulator's ordering check treats both as the device's work done).
cudaError_t free_device(void* p, bool waits) {
  if (!p) return cudaSuccess;
  cuemu::device_done();
  if (!cuemu::release(p, cuemu::MemoryKind::Device)) return record(cudaErrorInvalidDevicePointer);
  cuemu::count(cuemu::Count::Frees);
  if (waits) cuemu::count(cuemu::Count::AllocationSyncs);
  return cudaSuccess;
}

}  // namespace

// cudaFree, cudaMallocHost and cudaFreeHost wait for the device's work on a GPU.
cudaError_t cudaFree(void* p) { return free_device(p, /*waits=*/true); }
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
  if (!is_live_stream(s)) return record(cudaErrorInvalidResourceHandle);
  return cudaMalloc(p, bytes);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  if (!is_live_stream(s)) return record(cudaErrorInvalidResourceHandle);
  return free_device(p, /*waits=*/false);
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  cuemu::device_done();
  *p = cuemu::allocate(bytes, cuemu::MemoryKind::PinnedHost);
  if (!*p) return record(cudaErrorMemoryAllocation);
  cuemu::count(cuemu::Count::Allocations);
  cuemu::count(cuemu::Count::AllocationSyncs);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) { return cudaMallocHost(p, bytes); }
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  cuemu::device_done();
  if (!cuemu::release(p, cuemu::MemoryKind::PinnedHost)) return record(cudaErrorInvalidValue);
  cuemu::count(cuemu::Count::Frees);
  cuemu::count(cuemu::Count::AllocationSyncs);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  *a = {};
  switch (cuemu::kind_of(p, 0)) {
    case cuemu::MemoryKind::Device:
      a->type = cudaMemoryTypeDevice;
      a->device = t_device;
      a->devicePointer = const_cast<void*>(p);
      break;
    case cuemu::MemoryKind::PinnedHost:
      a->type = cudaMemoryTypeHost;
      a->devicePointer = a->hostPointer = const_cast<void*>(p);
      break;
    default: a->type = cudaMemoryTypeUnregistered; a->hostPointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy("cudaMemcpy", dst, src, bytes, kind, cudaStreamLegacy, /*async=*/false);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (!is_live_stream(s)) return record(cudaErrorInvalidResourceHandle);
  return copy("cudaMemcpyAsync", dst, src, bytes, kind, s, /*async=*/true);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  return set("cudaMemset", p, value, bytes, cudaStreamLegacy);
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  if (!is_live_stream(s)) return record(cudaErrorInvalidResourceHandle);
  return set("cudaMemsetAsync", p, value, bytes, s);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new CUstream_st{flags};
  cuemu::set_stream_non_blocking(*s, (flags & cudaStreamNonBlocking) != 0);
  Streams& all = streams();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.live.insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  Streams& all = streams();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (all.live.erase(s) == 0) return record(cudaErrorInvalidResourceHandle);
  all.stalled.erase(s);  // a GPU destroys a busy stream once its work ends; nothing waits for it here
  cuemu::forget_stream(s);
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (!is_live_stream(s)) return record(cudaErrorInvalidResourceHandle);
  if (const char* why = stall_of(s))
    cuemu::fail("cudaStreamSynchronize(%p) would wait forever: %s", static_cast<void*>(s), why);
  cuemu::count(cuemu::Count::HostSyncs);
  cuemu::stream_done(s);
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  if (!is_live_stream(s)) return record(cudaErrorInvalidResourceHandle);
  cuemu::count(cuemu::Count::Queries);  // the host asks, it does not wait
  // Not an error: CUDA does not record it as the last error.
  if (stall_of(s)) return cudaErrorNotReady;
  cuemu::stream_done(s);  // the host has learned that the stream's work is done
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!is_live_stream(s)) return record(cudaErrorInvalidResourceHandle);
  cuemu::count(cuemu::Count::EventRecords);
  e->when = std::chrono::steady_clock::now();
  e->recorded = true;
  e->stream = s;
  e->position = cuemu::stream_position(s);
  return cudaSuccess;
}
// The emulator's event is done as soon as it is recorded: a query learns what a synchronize does.
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  cuemu::count(cuemu::Count::HostSyncs);
  if (e->recorded) cuemu::stream_done_up_to(e->stream, e->position);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  cuemu::count(cuemu::Count::Queries);
  if (e->recorded) cuemu::stream_done_up_to(e->stream, e->position);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (!is_live_stream(s)) return record(cudaErrorInvalidResourceHandle);
  cuemu::count(cuemu::Count::StreamWaits);
  if (e->recorded) cuemu::stream_waits(s, e->stream, e->position);
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->recorded || !end->recorded) return record(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}
