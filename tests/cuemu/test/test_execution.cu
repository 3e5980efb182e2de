// The emulator's execution model against CUDA's semantics: barriers, warp collectives, atomics,
// poisoned memory, and the faults it must refuse (each in a child process).
#include <catch2/catch.hpp>

#include <xmmintrin.h>

#include <cfloat>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "tests/cuemu/test/death.h"

namespace {

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  REQUIRE(cudaMalloc(&d, host.size() * sizeof(T)) == cudaSuccess);
  REQUIRE(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}

template <typename T>
std::vector<T> host_copy(const T* d, size_t n) {
  std::vector<T> h(n);
  REQUIRE(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

// A shared-memory tree reduction: correct only if every level's barrier holds.
__global__ void block_sum(const int* in, int* out) {
  __shared__ int s[256];
  const unsigned t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
    __syncthreads();
    if (t < h) s[t] += s[t + h];
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// A subnormal operand and a product below FLT_MIN: both zero under nvcc --ftz=true. The factors come
// from memory: a compiler folds x * 1.0f to x.
__global__ void flush_probe(const float* in, float* out) {
  out[0] = in[0] * in[2];
  out[1] = in[1] * in[3];
}

__global__ void shuffles(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int base = static_cast<int>(threadIdx.x) * 6;
  out[base + 0] = __shfl_xor_sync(0xffffffffu, lane, 1);
  out[base + 1] = __shfl_up_sync(0xffffffffu, lane, 3);
  out[base + 2] = __shfl_down_sync(0xffffffffu, lane, 5);
  out[base + 3] = __shfl_sync(0xffffffffu, lane, 7);
  out[base + 4] = __shfl_down_sync(0xffffffffu, lane, 4, 8);  // segments of 8 lanes
  out[base + 5] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
}

__global__ void count_odd(const int* in, int n, unsigned* count) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x))
    if (in[i] % 2) atomicAdd(count, 1u);
}

__global__ void read_shared_first(unsigned* out) {
  __shared__ unsigned s[4];
  if (threadIdx.x == 0) out[blockIdx.x] = s[blockIdx.x % 4];  // read before any write: the poison
  __syncthreads();
  s[threadIdx.x % 4] = 7;
}

__global__ void geometry(unsigned* out) {
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned b = blockIdx.x + gridDim.x * blockIdx.y;
  out[b * blockDim.x * blockDim.y * blockDim.z + t] = b * 1000 + t;
}

// Faults.
__global__ void partial_warp_shuffle(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}
__global__ void divergent_collectives(int* out) {
  if (threadIdx.x % 2)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  else
    out[threadIdx.x] = static_cast<int>(__ballot_sync(0xffffffffu, 1));
}
__global__ void barrier_after_exit(int* out) {
  if (threadIdx.x >= 32) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
__global__ void divergent_barriers(int* out) {
  if (threadIdx.x < 64) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}
__global__ void touch(int* out) { out[threadIdx.x] = 1; }
__global__ void read_into(const int* in, int* out) { out[threadIdx.x] = in[threadIdx.x]; }

}  // namespace

TEST_CASE("barriers order a block's shared-memory reduction") {
  std::vector<int> in(256 * 40);
  std::iota(in.begin(), in.end(), -3000);
  int* d_in = device_copy(in);
  int* d_out = nullptr;
  REQUIRE(cudaMalloc(&d_out, 40 * sizeof(int)) == cudaSuccess);
  block_sum<<<40, 256>>>(d_in, d_out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto out = host_copy(d_out, 40);
  for (int b = 0; b < 40; ++b) {
    long long want = 0;
    for (int i = 0; i < 256; ++i) want += in[static_cast<size_t>(b * 256 + i)];
    REQUIRE(out[static_cast<size_t>(b)] == want);
  }
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST_CASE("kernels flush subnormals as under --ftz=true, whatever the host thread's MXCSR") {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved & ~((1u << 15) | (1u << 6)));  // the host thread keeps subnormals
  float* d_in = device_copy(std::vector<float>{FLT_MIN / 4, FLT_MIN, 1.0f, 0.5f});
  float* d_out = device_copy(std::vector<float>{-1.0f, -1.0f});
  flush_probe<<<1, 1>>>(d_in, d_out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto out = host_copy(d_out, 2);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 0.0f);
  // The host thread's own flags are restored after the launch: its arithmetic keeps subnormals.
  const unsigned after = _mm_getcsr();
  _mm_setcsr(saved);
  CHECK((after & ((1u << 15) | (1u << 6))) == 0u);
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST_CASE("warp shuffles and ballots follow CUDA's lane rules") {
  int* d = nullptr;
  REQUIRE(cudaMalloc(&d, 64 * 6 * sizeof(int)) == cudaSuccess);
  shuffles<<<1, 64>>>(d);
  const auto out = host_copy(d, 64 * 6);
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l) ballot |= (l % 3 == 0 ? 1u : 0u) << l;
  for (int t = 0; t < 64; ++t) {
    const int l = t % 32;
    const int* o = &out[static_cast<size_t>(t * 6)];
    CHECK(o[0] == (l ^ 1));
    CHECK(o[1] == (l >= 3 ? l - 3 : l));
    CHECK(o[2] == (l + 5 < 32 ? l + 5 : l));
    CHECK(o[3] == 7);
    CHECK(o[4] == (l % 8 + 4 < 8 ? l + 4 : l));
    CHECK(static_cast<unsigned>(o[5]) == ballot);
  }
  cudaFree(d);
}

TEST_CASE("atomics count across blocks; grid and block geometry") {
  std::vector<int> in(10007);
  std::iota(in.begin(), in.end(), 0);
  int* d_in = device_copy(in);
  unsigned* count = nullptr;
  REQUIRE(cudaMalloc(&count, sizeof(unsigned)) == cudaSuccess);
  REQUIRE(cudaMemset(count, 0, sizeof(unsigned)) == cudaSuccess);
  count_odd<<<7, 96>>>(d_in, static_cast<int>(in.size()), count);
  REQUIRE(host_copy(count, 1)[0] == 5003u);

  unsigned* g = nullptr;
  REQUIRE(cudaMalloc(&g, 6 * 24 * sizeof(unsigned)) == cudaSuccess);
  geometry<<<dim3(3, 2), dim3(4, 3, 2)>>>(g);
  const auto out = host_copy(g, 6 * 24);
  for (unsigned b = 0; b < 6; ++b)
    for (unsigned t = 0; t < 24; ++t) REQUIRE(out[b * 24 + t] == b * 1000 + t);
  cudaFree(d_in);
  cudaFree(count);
  cudaFree(g);
}

TEST_CASE("fresh device memory and every block's shared memory hold the poison byte") {
  const unsigned char poison = ::cuemu::schedule().poison;
  uint32_t word;
  std::memset(&word, poison, 4);
  unsigned* d = nullptr;
  REQUIRE(cudaMalloc(&d, 8 * sizeof(unsigned)) == cudaSuccess);
  REQUIRE(host_copy(d, 8)[3] == word);
  read_shared_first<<<8, 32>>>(d);
  for (unsigned v : host_copy(d, 8)) REQUIRE(v == word);  // not the 7s of the previous block
  cudaFree(d);
}

TEST_CASE("pointer attributes tell device, pinned and plain host memory apart") {
  void* dev = nullptr;
  void* pinned = nullptr;
  int plain = 0;
  REQUIRE(cudaMalloc(&dev, 100) == cudaSuccess);
  REQUIRE(cudaMallocHost(&pinned, 100) == cudaSuccess);
  cudaPointerAttributes a{};
  REQUIRE(cudaPointerGetAttributes(&a, static_cast<char*>(dev) + 99) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeDevice);
  REQUIRE(cudaPointerGetAttributes(&a, pinned) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeHost);
  REQUIRE(cudaPointerGetAttributes(&a, &plain) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeUnregistered);
  CHECK(cudaFree(pinned) == cudaErrorInvalidDevicePointer);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevicePointer);
  CHECK(cudaGetLastError() == cudaSuccess);
  cudaFree(dev);
  cudaFreeHost(pinned);
}

TEST_CASE("faults a GPU leaves undefined abort with a message naming the kernel and line") {
  using cuemu_test::run_in_child;
  int* d = nullptr;
  REQUIRE(cudaMalloc(&d, 2048 * sizeof(int)) == cudaSuccess);
  struct Case {
    const char* name;
    void (*launch)(int*);
    const char* message;
  };
  const Case cases[] = {
      {"collective in part of a warp", [](int* p) { partial_warp_shuffle<<<1, 32>>>(p); }, "only part of a warp"},
      {"different collectives", [](int* p) { divergent_collectives<<<1, 32>>>(p); }, "different warp collectives"},
      {"barrier after exit", [](int* p) { barrier_after_exit<<<1, 64>>>(p); },
       "after some threads of the block exited"},
      {"different barriers", [](int* p) { divergent_barriers<<<1, 128>>>(p); }, "different __syncthreads"},
      {"block too large", [](int* p) { touch<<<1, 1025>>>(p); }, "more than 1024 threads"},
      {"grid too large", [](int* p) { touch<<<dim3(1, 65536), 1>>>(p); }, "grid dimension"},
      {"partial warp", [](int* p) { partial_warp_shuffle<<<1, 16>>>(p); }, "fewer than 32 threads"},
      {"host pointer argument",
       [](int*) {
         static int host[32];
         touch<<<1, 32>>>(host);
       },
       "host memory a GPU cannot address"},
      {"copy kind",
       [](int* p) {
         int h = 0;
         cudaMemcpy(p, &h, 4, cudaMemcpyDeviceToHost);
       },
       "the copy's kind says host"},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      const auto death = run_in_child([&] { c.launch(d); });
      INFO(death.stderr_text);
      CHECK(death.aborted);
      CHECK(death.stderr_text.find(c.message) != std::string::npos);
      CHECK(death.stderr_text.find("cuemu: ") != std::string::npos);
    }
  }
  cudaFree(d);
}

// emu/ordering.h: work on a non-blocking stream is not ordered with the legacy stream's copies.
TEST_CASE("a legacy-stream copy of a non-blocking stream's memory needs the host to wait for it first") {
  using cuemu_test::run_in_child;
  struct Case {
    const char* name;
    void (*run)(int* a, int* b, cudaStream_t s, cudaStream_t t);
    bool races;
  };
  const Case cases[] = {
      {"read back without waiting",
       [](int* a, int*, cudaStream_t s, cudaStream_t) {
         touch<<<1, 32, 0, s>>>(a);
         int h[32];
         cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
       },
       true},
      {"overwrite what a kernel still reads",
       [](int* a, int* b, cudaStream_t s, cudaStream_t) {
         read_into<<<1, 32, 0, s>>>(a, b);
         cudaMemset(a, 0, 32 * sizeof(int));
       },
       true},
      {"read what a kernel only reads (const at the launch: the rewrite sees the arguments' types)",
       [](int* a, int* b, cudaStream_t s, cudaStream_t) {
         read_into<<<1, 32, 0, s>>>(static_cast<const int*>(a), b);
         int h[32];
         cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
       },
       false},
      {"read back after cudaStreamSynchronize",
       [](int* a, int*, cudaStream_t s, cudaStream_t) {
         touch<<<1, 32, 0, s>>>(a);
         cudaStreamSynchronize(s);
         int h[32];
         cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
       },
       false},
      {"read back after an event on the stream",
       [](int* a, int*, cudaStream_t s, cudaStream_t) {
         cudaEvent_t e;
         cudaEventCreate(&e);
         touch<<<1, 32, 0, s>>>(a);
         cudaEventRecord(e, s);
         cudaEventSynchronize(e);
         int h[32];
         cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
       },
       false},
      {"read back when the event is older than the write",
       [](int* a, int*, cudaStream_t s, cudaStream_t) {
         cudaEvent_t e;
         cudaEventCreate(&e);
         cudaEventRecord(e, s);
         touch<<<1, 32, 0, s>>>(a);
         cudaEventSynchronize(e);
         int h[32];
         cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
       },
       true},
      {"the legacy stream waits for the stream's event",
       [](int* a, int*, cudaStream_t s, cudaStream_t) {
         cudaEvent_t e;
         cudaEventCreate(&e);
         touch<<<1, 32, 0, s>>>(a);
         cudaEventRecord(e, s);
         cudaStreamWaitEvent(cudaStreamLegacy, e, 0);
         int h[32];
         cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
       },
       false},
      {"another stream waited for it, and the host for that stream",
       [](int* a, int* b, cudaStream_t s, cudaStream_t t) {
         cudaEvent_t e;
         cudaEventCreate(&e);
         touch<<<1, 32, 0, s>>>(a);
         cudaEventRecord(e, s);
         cudaStreamWaitEvent(t, e, 0);
         touch<<<1, 32, 0, t>>>(b);
         cudaStreamSynchronize(t);
         int h[32];
         cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
       },
       false},
      {"a copy on the stream itself",
       [](int* a, int*, cudaStream_t s, cudaStream_t) {
         static int* h = nullptr;
         cudaMallocHost(&h, 32 * sizeof(int));
         touch<<<1, 32, 0, s>>>(a);
         cudaMemcpyAsync(h, a, 32 * sizeof(int), cudaMemcpyDeviceToHost, s);
         cudaStreamSynchronize(s);
       },
       false},
  };
  int *a = nullptr, *b = nullptr;
  REQUIRE(cudaMalloc(&a, 32 * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMalloc(&b, 32 * sizeof(int)) == cudaSuccess);
  cudaStream_t s, t;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking) == cudaSuccess);
  for (const Case& c : cases) {
    SECTION(c.name) {
      const auto death = run_in_child([&] { c.run(a, b, s, t); });
      INFO(death.stderr_text);
      CHECK(death.aborted == c.races);
      CHECK((death.stderr_text.find("unordered access") != std::string::npos) == c.races);
    }
  }
  SECTION("a blocking stream is ordered with the legacy stream") {
    cudaStream_t blocking;
    REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
    const auto death = run_in_child([&] {
      touch<<<1, 32, 0, blocking>>>(a);
      int h[32];
      cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
    });
    CHECK_FALSE(death.aborted);
    cudaStreamDestroy(blocking);
  }
  cudaStreamDestroy(s);
  cudaStreamDestroy(t);
  cudaFree(a);
  cudaFree(b);
}
