// What the transports need from CUDA without including it: which device a pointer's memory is on,
// and (from framework/core) pinned host buffers to stage CUDA data through a host-only MPI and copies
// on a context's stream.
// cuda_staging.cpp implements it with the CUDA runtime; cuda_staging_nocuda.cpp is the build
// without CUDA, where every pointer is host memory and staging is an error. Internal to comm/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "framework/core/context.h"
#include "framework/core/device.h"
#include "framework/core/pinned_buffer.h"

namespace qtrain::comm_detail {

// cuda:N for device (or managed) memory of GPU N; cpu for everything else (pageable or pinned host
// memory), and always cpu in builds without CUDA or on machines without a GPU.
Device pointer_device(const void* ptr);

// The PCI bus id of GPU `index` ("0000:3b:00.0"): the identity of a physical GPU, which a device
// index is not when ranks see different CUDA_VISIBLE_DEVICES.
std::string gpu_bus_id(int index);

// Where the `bytes` at `ptr` live (cpu for an empty buffer). GPU memory needs a CUDA context on that
// GPU, whose stream will order the copies: otherwise an error naming `op` and `what`.
Device buffer_location(const char* op, const char* what, const void* ptr, size_t bytes, const Context& ctx);

// Pinned staging buffers and copies on a context's stream (framework/core/pinned_buffer.h).
using ::qtrain::copy_async;
using ::qtrain::PinnedBuffer;

}  // namespace qtrain::comm_detail
