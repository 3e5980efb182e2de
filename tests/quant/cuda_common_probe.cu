// Launchers that expose quant/cuda_common.cuh's warp helpers to test_quant_cuda.cpp, so that their
// contract is tested lane by lane, not only through the one caller each has today (a broadcast that
// only matters to other lanes would otherwise go unchecked; found by mutation testing).
#include "tests/quant/cuda_common_probe.h"

#include "framework/core/check.h"
#include "quant/cuda_common.cuh"

namespace qtrain::quant_test {
namespace {

__global__ void fold_partials_kernel(const float* partials, int64_t chunks, float* lanes) {
  lanes[threadIdx.x] = quant_detail::warp_fold_partials(partials, chunks);
}

}  // namespace

std::vector<float> warp_fold_partials_per_lane(const std::vector<float>& partials) {
  float* p = nullptr;
  float* out = nullptr;
  CUDA_CHECK(cudaMalloc(&p, partials.size() * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&out, quant_detail::kWarp * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(p, partials.data(), partials.size() * sizeof(float), cudaMemcpyHostToDevice));
  fold_partials_kernel<<<1, quant_detail::kWarp>>>(p, static_cast<int64_t>(partials.size()), out);
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> lanes(quant_detail::kWarp);
  CUDA_CHECK(cudaMemcpy(lanes.data(), out, lanes.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(p));
  CUDA_CHECK(cudaFree(out));
  return lanes;
}

}  // namespace qtrain::quant_test
