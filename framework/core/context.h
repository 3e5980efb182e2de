// Context: everything a layer, optimizer or quantizer call needs besides its tensors: the device,
// the CUDA stream and library handles, the CPU thread budget and its worker threads, and the
// randomness key material.
// Passed explicitly to every call; there is no global mode and no singleton.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "framework/core/cpu_pool.h"
#include "framework/core/device.h"

namespace qtrain {

struct CudaHandles;  // framework/core/cuda_context.h; only CUDA sources need its definition
struct CudaHandlesDeleter {
  void operator()(CudaHandles* handles) const noexcept;  // context_cuda.cpp / context_nocuda.cpp
};

class Context {
 public:
  // A CPU context using `cpu_threads` threads for BLAS, with a CpuPool of as many lanes. OpenBLAS
  // has one thread count per process: a positive count sets it for every context and library call
  // in the process; 0 leaves it as it is (all cores, unless something set it before) and takes it.
  static Context cpu(uint64_t seed, int cpu_threads = 0);
  // A CUDA context on device `index`: creates a stream and cuBLAS/cuDNN/cuRAND handles.
  static Context cuda(int index, uint64_t seed);

  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  ~Context();

  Device device() const { return device_; }
  uint64_t seed() const { return seed_; }
  int cpu_threads() const { return cpu_threads_; }
  // The CPU layers' worker threads: cpu_threads() lanes on a CPU context, one (no threads) on CUDA.
  CpuPool& cpu_pool() { return *pool_; }

  // The optimizer step being computed; layers derive their random streams from (seed, step, layer id).
  uint64_t step() const { return step_; }
  void set_step(uint64_t step) { step_ = step; }

  // Only for CUDA contexts (checked).
  CudaHandles& cuda();
  // Waits for all work queued on this context's stream (no-op on the CPU).
  void synchronize();

 private:
  Context() = default;
  Device device_;
  uint64_t seed_ = 0;
  uint64_t step_ = 0;
  int cpu_threads_ = 1;
  std::unique_ptr<CpuPool> pool_;
  std::unique_ptr<CudaHandles, CudaHandlesDeleter> cuda_;
};

// A point in one context's stream that another context's stream can be ordered after, without the
// host waiting: a CUDA event (recorded lazily, reused). On the CPU, where every call completes before
// it returns, both operations do nothing. The gradient exchange orders its stream after backward's
// with it, instead of synchronizing the compute stream once per bucket.
class StreamEvent {
 public:
  StreamEvent() = default;
  ~StreamEvent();
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;

  // Marks the work queued on `ctx`'s stream so far.
  void record(Context& ctx);
  // Makes the work queued on `ctx`'s stream from now on wait for the marked work (nothing when
  // nothing was recorded).
  void make_wait(Context& ctx) const;

 private:
  void* event_ = nullptr;  // cudaEvent_t, created by the first record on a CUDA context
  bool recorded_ = false;
};

// The device a config's `device:` key (or a command's --device) selects on this rank (auto: CUDA when
// a GPU is present); `setting_name` names the setting in the error for cuda without a GPU.
Device select_device(const std::string& setting, int local_rank, const std::string& setting_name = "device");
// Builds a Context for `device`.
Context make_context(Device device, uint64_t seed, int threads);

// Sets OpenBLAS's thread count (0 = all cores) and returns the count in effect.
int set_blas_threads(int threads);

}  // namespace qtrain
