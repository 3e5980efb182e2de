// The target of the build-time launch rewrite (tools/launch_rewrite.cpp): `k<<<grid, block, shmem,
// stream>>>(args)` becomes `::cuemu::launch("k", site, ::cuemu::LaunchConfig(grid, block, shmem,
// stream), [&](auto&&... a) { k(a...); }, args)`. As at a real launch the arguments are evaluated and
// copied once; every thread then calls the kernel with its own copies.
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "tests/cuemu/emu/device_functions.h"
#include "tests/cuemu/emu/memory.h"
#include "tests/cuemu/emu/ordering.h"
#include "tests/cuemu/emu/scheduler.h"

struct CUstream_st;

namespace cuemu {

struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes;
  CUstream_st* stream;
  LaunchConfig(dim3 g, dim3 b, size_t shmem = 0, CUstream_st* s = nullptr)
      : grid(g), block(b), shared_bytes(shmem), stream(s) {}
};

// Aborts on a configuration a GPU refuses (cudaErrorInvalidConfiguration): the code under test
// checks every launch, but an emulator that returned the error would let a test pass that expects it.
void check_launch_config(const char* kernel, Site site, const LaunchConfig& c);
// Aborts when a pointer argument points at memory a kernel cannot reach: neither device memory nor
// pinned host memory (nor null).
void check_kernel_pointer(const char* kernel, Site site, int index, const void* p);
// Aborts when a stream argument is not a live stream of this emulator.
void check_stream(const char* kernel, Site site, CUstream_st* s);

template <typename Body, typename Args>
struct KernelCall {
  Body* body;
  Args* args;
  static void run(void* self) {
    auto* call = static_cast<KernelCall*>(self);
    std::apply(*call->body, *call->args);  // the kernel's by-value parameters copy the launch's arguments
  }
};

// A pointer argument is checked, and noted as memory the kernel's stream may touch (written unless
// the pointee is const) until the host learns the stream's work is done (emu/ordering.h).
template <typename Arg>
void check_argument(const char* kernel, Site site, CUstream_st* stream, int index, const Arg& a) {
  if constexpr (std::is_pointer_v<Arg>) {
    check_kernel_pointer(kernel, site, index, static_cast<const void*>(a));
    stream_access(stream, static_cast<const void*>(a), 0, !std::is_const_v<std::remove_pointer_t<Arg>>, kernel);
  }
}

template <typename Body, typename... Args>
void launch(const char* kernel, Site site, const LaunchConfig& c, Body body, Args... args) {
  check_launch_config(kernel, site, c);
  check_stream(kernel, site, c.stream);
  int index = 0;
  (check_argument(kernel, site, c.stream, index++, args), ...);
  std::tuple<Args...> copied(std::move(args)...);
  KernelCall<Body, std::tuple<Args...>> call{&body, &copied};
  run_grid(kernel, site, {c.grid.x, c.grid.y, c.grid.z}, {c.block.x, c.block.y, c.block.z},
           &KernelCall<Body, std::tuple<Args...>>::run, &call);
}

}  // namespace cuemu
