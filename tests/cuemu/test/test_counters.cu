// The emulator's counters (emu/counters.h): each counts what CUDA's documentation says the call does
// to the host, a launch counts its geometry per kernel, and an Uncounted scope (the shims') hides its
// thread's calls and no other thread's.
#include <catch2/catch.hpp>
#include <cublas_v2.h>

#include <thread>
#include <vector>

#include "tests/cuemu/emu/counters.h"

namespace {

using cuemu::Counters;

// What f did to the counters.
template <typename F>
Counters measure(F f) {
  const Counters before = cuemu::counters();
  f();
  return cuemu::counters() - before;
}

// Zero everywhere: no call of the region was counted.
bool nothing_counted(const Counters& c) {
  return c.host_syncs == 0 && c.queries == 0 && c.h2d_copies == 0 && c.h2d_bytes == 0 && c.d2h_copies == 0 &&
         c.d2h_bytes == 0 && c.d2d_copies == 0 && c.d2d_bytes == 0 && c.h2h_copies == 0 && c.h2h_bytes == 0 &&
         c.memsets == 0 && c.allocations == 0 && c.frees == 0 && c.allocation_syncs == 0 && c.event_records == 0 &&
         c.stream_waits == 0 && c.launches == 0 && c.blocks == 0 && c.threads == 0 && c.switches == 0 &&
         c.warp_collectives == 0 && c.barriers == 0 && c.per_kernel.empty();
}

__global__ void add_one(int* p, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] += 1;
}

// One barrier per block and one shuffle per warp.
template <int K>
__global__ void scaled_sum(int* p) {
  __shared__ int s[64];
  s[threadIdx.x] = K * static_cast<int>(threadIdx.x);
  __syncthreads();
  p[threadIdx.x] = __shfl_xor_sync(0xffffffffu, s[63 - threadIdx.x], 1);
}

}  // namespace

TEST_CASE("counters: every host wait counts once; queries, records and stream waits do not wait") {
  cudaStream_t s = nullptr, other = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);

  Counters c = measure([&] { REQUIRE(cudaStreamSynchronize(s) == cudaSuccess); });
  CHECK(c.host_syncs == 1);
  CHECK(c.queries == 0);
  c = measure([&] { REQUIRE(cudaDeviceSynchronize() == cudaSuccess); });
  CHECK(c.host_syncs == 1);
  c = measure([&] { REQUIRE(cudaEventRecord(e, s) == cudaSuccess); });
  CHECK(c.event_records == 1);
  CHECK(c.host_syncs == 0);
  c = measure([&] { REQUIRE(cudaEventSynchronize(e) == cudaSuccess); });
  CHECK(c.host_syncs == 1);
  c = measure([&] {
    REQUIRE(cudaStreamQuery(s) == cudaSuccess);
    REQUIRE(cudaEventQuery(e) == cudaSuccess);
  });
  CHECK(c.queries == 2);
  CHECK(c.host_syncs == 0);
  c = measure([&] { REQUIRE(cudaStreamWaitEvent(other, e, 0) == cudaSuccess); });
  CHECK(c.stream_waits == 1);
  CHECK(c.host_syncs == 0);
  // A call that fails waits for nothing.
  c = measure([&] { CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(0x1234)) != cudaSuccess); });
  CHECK(c.host_syncs == 0);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);

  cudaEventDestroy(e);
  cudaStreamDestroy(s);
  cudaStreamDestroy(other);
}

TEST_CASE("counters: copies by direction and bytes; the host waits on pageable memory, not pinned") {
  // A blocking stream: ordered with the legacy stream's cudaMemcpy below, as the ordering check needs.
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  char *d = nullptr, *d2 = nullptr, *pinned = nullptr;
  REQUIRE(cudaMalloc(&d, 1024) == cudaSuccess);
  REQUIRE(cudaMalloc(&d2, 1024) == cudaSuccess);
  REQUIRE(cudaMallocHost(&pinned, 1024) == cudaSuccess);
  std::vector<char> pageable(1024);
  char* h = pageable.data();

  SECTION("device to host") {
    Counters c = measure([&] { REQUIRE(cudaMemcpyAsync(pinned, d, 256, cudaMemcpyDeviceToHost, s) == cudaSuccess); });
    CHECK(c.d2h_copies == 1);
    CHECK(c.d2h_bytes == 256);
    CHECK(c.host_syncs == 0);  // async into pinned memory: the host goes on
    c = measure([&] { REQUIRE(cudaMemcpyAsync(h, d, 200, cudaMemcpyDeviceToHost, s) == cudaSuccess); });
    CHECK(c.d2h_copies == 1);
    CHECK(c.d2h_bytes == 200);
    CHECK(c.host_syncs == 1);  // into pageable memory: returns once the copy is done
    c = measure([&] { REQUIRE(cudaMemcpy(pinned, d, 64, cudaMemcpyDeviceToHost) == cudaSuccess); });
    CHECK(c.d2h_copies == 1);
    CHECK(c.host_syncs == 1);  // cudaMemcpy to the host waits, pinned or not
    CHECK(c.h2d_copies + c.d2d_copies + c.h2h_copies == 0);
  }
  SECTION("host to device") {
    Counters c = measure([&] { REQUIRE(cudaMemcpyAsync(d, pinned, 128, cudaMemcpyHostToDevice, s) == cudaSuccess); });
    CHECK(c.h2d_copies == 1);
    CHECK(c.h2d_bytes == 128);
    CHECK(c.host_syncs == 0);
    c = measure([&] { REQUIRE(cudaMemcpyAsync(d, h, 128, cudaMemcpyHostToDevice, s) == cudaSuccess); });
    CHECK(c.h2d_copies == 1);
    CHECK(c.host_syncs == 1);  // pageable memory is staged through the stream
    c = measure([&] { REQUIRE(cudaMemcpy(d, pinned, 128, cudaMemcpyHostToDevice) == cudaSuccess); });
    CHECK(c.host_syncs == 1);
    CHECK(c.d2h_copies + c.d2d_copies + c.h2h_copies == 0);
  }
  SECTION("within the device, within the host") {
    Counters c = measure([&] {
      REQUIRE(cudaMemcpy(d2, d, 32, cudaMemcpyDeviceToDevice) == cudaSuccess);
      REQUIRE(cudaMemcpyAsync(d2, d, 48, cudaMemcpyDeviceToDevice, s) == cudaSuccess);
    });
    CHECK(c.d2d_copies == 2);
    CHECK(c.d2d_bytes == 80);
    CHECK(c.host_syncs == 0);  // no host-side synchronization, even for cudaMemcpy
    c = measure([&] { REQUIRE(cudaMemcpyAsync(h, pinned, 16, cudaMemcpyHostToHost, s) == cudaSuccess); });
    CHECK(c.h2h_copies == 1);
    CHECK(c.h2h_bytes == 16);
    CHECK(c.host_syncs == 1);
  }
  SECTION("cudaMemcpyDefault is classified by where the pointers lie") {
    Counters c = measure([&] { REQUIRE(cudaMemcpyAsync(h, d, 8, cudaMemcpyDefault, s) == cudaSuccess); });
    CHECK(c.d2h_copies == 1);
    CHECK(c.d2h_bytes == 8);
    CHECK(c.host_syncs == 1);
    c = measure([&] { REQUIRE(cudaMemcpyAsync(d, pinned, 12, cudaMemcpyDefault, s) == cudaSuccess); });
    CHECK(c.h2d_copies == 1);
    CHECK(c.h2d_bytes == 12);
    CHECK(c.host_syncs == 0);
    c = measure([&] { REQUIRE(cudaMemcpy(d2, d, 4, cudaMemcpyDefault) == cudaSuccess); });
    CHECK(c.d2d_copies == 1);
    CHECK(c.host_syncs == 0);
  }
  SECTION("memsets do not wait; empty copies count nothing") {
    Counters c = measure([&] {
      REQUIRE(cudaMemset(d, 0, 100) == cudaSuccess);
      REQUIRE(cudaMemsetAsync(d, 1, 100, s) == cudaSuccess);
    });
    CHECK(c.memsets == 2);
    CHECK(c.host_syncs == 0);
    c = measure([&] {
      REQUIRE(cudaMemcpy(h, d, 0, cudaMemcpyDeviceToHost) == cudaSuccess);
      REQUIRE(cudaMemset(d, 0, 0) == cudaSuccess);
    });
    CHECK(nothing_counted(c));
  }
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  cudaFree(d);
  cudaFree(d2);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
}

TEST_CASE("counters: allocations, frees, and the ones that wait for the device") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  void* d = nullptr;
  Counters c = measure([&] { REQUIRE(cudaMalloc(&d, 64) == cudaSuccess); });
  CHECK(c.allocations == 1);
  CHECK(c.allocation_syncs == 0);
  c = measure([&] { REQUIRE(cudaFree(d) == cudaSuccess); });
  CHECK(c.frees == 1);
  CHECK(c.allocation_syncs == 1);
  c = measure([&] {
    REQUIRE(cudaMallocAsync(&d, 64, s) == cudaSuccess);
    REQUIRE(cudaFreeAsync(d, s) == cudaSuccess);
  });
  CHECK(c.allocations == 1);
  CHECK(c.frees == 1);
  CHECK(c.allocation_syncs == 0);  // stream-ordered: no wait
  c = measure([&] {
    REQUIRE(cudaMallocHost(&d, 64) == cudaSuccess);
    REQUIRE(cudaFreeHost(d) == cudaSuccess);
    REQUIRE(cudaFree(nullptr) == cudaSuccess);
  });
  CHECK(c.allocations == 1);
  CHECK(c.frees == 1);
  CHECK(c.allocation_syncs == 2);
  CHECK(c.host_syncs == 0);  // counted apart from the explicit waits and blocking copies
  cudaStreamDestroy(s);
}

TEST_CASE("counters: a launch counts its blocks, threads and cost, per kernel") {
  int* d = nullptr;
  REQUIRE(cudaMalloc(&d, 1024 * sizeof(int)) == cudaSuccess);
  Counters c = measure([&] {
    add_one<<<dim3(3, 2), dim3(32, 2)>>>(d, 1024);
    add_one<<<4, 16>>>(d, 1024);
  });
  CHECK(c.launches == 2);
  CHECK(c.blocks == 6 + 4);
  CHECK(c.threads == 6 * 64 + 4 * 16);
  CHECK(c.barriers == 0);
  REQUIRE(c.per_kernel.size() == 1);
  const cuemu::KernelCounts& k = c.per_kernel.at("add_one");
  CHECK(k.launches == 2);
  CHECK(k.blocks == 10);
  CHECK(k.threads == 448);

  c = measure([&] { scaled_sum<3><<<5, 64>>>(d); });
  CHECK(c.launches == 1);
  CHECK(c.barriers == 5);             // one __syncthreads per block
  CHECK(c.warp_collectives == 10);    // one shuffle per warp, two warps per block
  CHECK(c.switches >= c.threads);     // every thread runs at least once
  REQUIRE(c.per_kernel.size() == 1);  // add_one did not launch in between: left out of the difference
  CHECK(c.per_kernel.at("scaled_sum<3>").threads == 5 * 64);
  CHECK(cuemu::counters().per_kernel.at("add_one").launches >= 2);  // the totals keep it
  cudaFree(d);
}

TEST_CASE("counters: nothing counts inside an Uncounted scope, and only on its thread") {
  int* d = nullptr;
  REQUIRE(cudaMalloc(&d, 64 * sizeof(int)) == cudaSuccess);
  std::vector<int> h(64);
  const auto work = [&] {
    add_one<<<1, 64>>>(d, 64);
    REQUIRE(cudaMemcpy(h.data(), d, 64 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  };
  Counters c = measure([&] {
    const cuemu::Uncounted outer;
    work();
    {
      const cuemu::Uncounted inner;  // nests
      work();
    }
    work();  // still inside `outer`
  });
  CHECK(nothing_counted(c));
  // The same work outside counts (the check above is not vacuous).
  c = measure(work);
  CHECK(c.launches == 1);
  CHECK(c.d2h_copies == 1);
  CHECK(c.host_syncs == 2);

  // A scope hides its own thread's calls, not those of another thread (the gradient exchange makes its
  // calls on its own thread while the training thread may be inside a shim).
  c = measure([&] {
    const cuemu::Uncounted quiet;
    std::thread other([] {
      for (int i = 0; i < 1000; ++i) cudaStreamSynchronize(nullptr);
    });
    for (int i = 0; i < 1000; ++i) cudaStreamSynchronize(nullptr);
    other.join();
  });
  CHECK(c.host_syncs == 1000);
  // Threads counting at once lose nothing.
  c = measure([] {
    std::thread a([] {
      for (int i = 0; i < 5000; ++i) cudaStreamSynchronize(nullptr);
    });
    std::thread b([] {
      for (int i = 0; i < 5000; ++i) cudaStreamQuery(nullptr);
    });
    for (int i = 0; i < 5000; ++i) cudaStreamSynchronize(nullptr);
    a.join();
    b.join();
  });
  CHECK(c.host_syncs == 10000);
  CHECK(c.queries == 5000);
  cudaFree(d);
}

TEST_CASE("counters: a library shim's work is not counted as qtrain's") {
  // On a GPU cuBLAS launches kernels of its own; qtrain's counts hold its own calls only.
  float* m = nullptr;
  REQUIRE(cudaMalloc(&m, 3 * 16 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemset(m, 0, 3 * 16 * sizeof(float)) == cudaSuccess);
  cublasHandle_t handle = nullptr;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  const Counters c = measure([&] {
    REQUIRE(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, m, 4, m + 16, 4, &zero, m + 32, 4) ==
            CUBLAS_STATUS_SUCCESS);
  });
  CHECK(nothing_counted(c));
  cublasDestroy(handle);
  cudaFree(m);
}
