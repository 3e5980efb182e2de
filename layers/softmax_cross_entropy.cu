// softmax_cross_entropy on CUDA: one warp per sample (row), lanes striding over the classes, shuffle
// reductions for the arg-max and the sum of exponentials. expf/logf (not the intrinsics) and the same
// operation order as the CPU reference keep the two within a few ulps. The per-sample loss and
// status go back to the host, where they are summed in double in row order (deterministic).
#include <cmath>

#include "framework/core/cuda_context.h"
#include "layers/softmax_cross_entropy.h"

namespace qtrain {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr unsigned kAllLanes = 0xffffffffu;

__global__ void softmax_ce_kernel(const float* __restrict__ z, const int* __restrict__ labels, float* __restrict__ dz,
                                  float* __restrict__ row_loss, int* __restrict__ row_status, long long batch,
                                  int classes, float inv_batch) {
  const int lane = threadIdx.x % kWarp;
  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x / kWarp);
  for (long long r = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / kWarp; r < batch; r += warps) {
    const float* __restrict__ row = z + r * classes;
    // First arg-max: each lane scans its classes in increasing order (strict >), then the warp keeps the
    // larger value and, on ties, the lower class, which is the CPU's left-to-right scan.
    float best = -INFINITY;
    int best_c = 0x7fffffff;
    for (int c = lane; c < classes; c += kWarp) {
      if (best_c == 0x7fffffff || row[c] > best) {
        best = row[c];
        best_c = c;
      }
    }
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(kAllLanes, best, offset);
      const int other_c = __shfl_xor_sync(kAllLanes, best_c, offset);
      if (other > best || (other == best && other_c < best_c)) {
        best = other;
        best_c = other_c;
      }
    }
    const float max = best;
    float sum = 0.0f;
    for (int c = lane; c < classes; c += kWarp) sum += expf(row[c] - max);
    for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(kAllLanes, sum, offset);

    const int label = labels[r];
    const bool valid = label >= 0 && label < classes;
    if (lane == 0) {
      row_loss[r] = valid ? logf(sum) - (row[label] - max) : 0.0f;
      row_status[r] = valid ? (best_c == label ? 1 : 0) : -1;
    }
    if (dz && valid) {
      float* __restrict__ drow = dz + r * classes;
      const float scale = 1.0f / sum * inv_batch;
      for (int c = lane; c < classes; c += kWarp) {
        const float g = expf(row[c] - max) * scale;
        drow[c] = c == label ? g - inv_batch : g;
      }
    }
  }
}

}  // namespace

LossStats softmax_cross_entropy_cuda(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                     SoftmaxCrossEntropyScratch& scratch) {
  const long long batch = logits.dim(0);
  const long long classes = logits.dim(1);
  QT_CHECK(classes > 0 && classes <= 0x7fffffffLL, "softmax_cross_entropy: {} classes", classes);
  QT_CHECK(scratch.row_loss.numel() >= batch && scratch.row_status.numel() >= batch &&
               scratch.host_loss.numel() >= batch && scratch.host_status.numel() >= batch,
           "softmax_cross_entropy: scratch smaller than the batch of {}", batch);
  LossStats stats;
  stats.count = batch;
  if (batch == 0) return stats;
  cudaStream_t stream = ctx.cuda().stream;
  // One warp per row: batch * 32 threads, grid-stride beyond the grid limit.
  const int blocks = blocks_for(batch * kWarp, kThreads);
  softmax_ce_kernel<<<blocks, kThreads, 0, stream>>>(
      logits.data<float>(), labels.data<int32_t>(), dlogits ? dlogits->data<float>() : nullptr,
      scratch.row_loss.data<float>(), scratch.row_status.data<int32_t>(), batch, static_cast<int>(classes),
      1.0f / static_cast<float>(batch));
  CUDA_CHECK(cudaGetLastError());

  float* host_loss = scratch.host_loss.data<float>();
  int32_t* host_status = scratch.host_status.data<int32_t>();
  CUDA_CHECK(cudaMemcpyAsync(host_loss, scratch.row_loss.raw(), static_cast<size_t>(batch) * sizeof(float),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(host_status, scratch.row_status.raw(), static_cast<size_t>(batch) * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  for (long long r = 0; r < batch; ++r) {
    if (host_status[r] < 0) {
      int32_t label = 0;
      CUDA_CHECK(cudaMemcpyAsync(&label, labels.data<int32_t>() + r, sizeof(label), cudaMemcpyDeviceToHost, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      input_error("softmax_cross_entropy: label {} of sample {} is outside [0, {})", label, r, classes);
    }
    stats.loss_sum += static_cast<double>(host_loss[r]);
    stats.correct += host_status[r];
  }
  return stats;
}

}  // namespace qtrain
