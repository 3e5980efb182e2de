// Where a tensor lives (the CPU or one CUDA device) and the raw memory operations on it.
// The CUDA implementations are in device_cuda.cpp; builds without the toolkit link device_nocuda.cpp,
// where every CUDA request is an error naming the operation (never a silent CPU fallback).
#pragma once

#include <cstddef>
#include <string>

namespace qtrain {

struct Device {
  enum class Kind : unsigned char { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {Kind::cuda, index}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  friend bool operator==(const Device&, const Device&) = default;
};

// True when this build has the CUDA paths and at least one GPU answers. Any CUDA error while asking
// (e.g. cudaErrorInsufficientDriver on a machine without a GPU) counts as "no GPU".
bool cuda_available();
int cuda_device_count();

// Raw memory; 64-byte aligned on the CPU so vector loops never straddle a cache line at the start.
void* device_alloc(Device device, size_t bytes);
void device_free(Device device, void* ptr) noexcept;
// Synchronous copies between any two devices.
void device_copy(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes);
void device_memset_zero(Device device, void* ptr, size_t bytes);
// Makes `device` the calling thread's current CUDA device (a no-op for the CPU). CUDA's current
// device is per thread: a thread that launches kernels or calls cuBLAS/NCCL for a rank's GPU must
// select it first, or it works on GPU 0.
void use_device_on_this_thread(Device device);

}  // namespace qtrain
