// A small emulated program with a known set of calls, for the CUEMU_STATS check (check_stats.py): the
// line it leaves at exit must count exactly these.
#include <vector>

template <typename T>
__global__ void fill(T* p, T v) {
  p[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

int main() {
  int* d = nullptr;
  if (cudaMalloc(&d, 256 * sizeof(int)) != cudaSuccess) return 1;  // 1 allocation
  fill<int><<<4, 64>>>(d, 7);                                      // fill<int>: 4 blocks, 256 threads
  fill<int><<<2, 32>>>(d, 9);                                      // 2 blocks, 64 threads
  std::vector<int> h(256);
  cudaMemcpy(h.data(), d, 256 * sizeof(int), cudaMemcpyDeviceToHost);  // 1 D2H copy of 1024 bytes, 1 wait
  cudaStreamSynchronize(nullptr);                                      // 1 wait
  cudaFree(d);                                                         // 1 free, 1 allocation sync
  return h[0] == 9 && h[255] == 7 ? 0 : 1;
}
