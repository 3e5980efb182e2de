// DeMo's codec on CUDA buffers (demo_codec.h): one block per chunk, the kernels in the order of the CPU
// loops' arithmetic, so that their results are the CPU's bits. Thread k computes coefficient k (its sum
// over n ascending); thread n computes value n (its sum over the kept, or nonzero, k ascending); the
// serial parts of a chunk (the kept set in increasing k, the payload's entries, the sum over ranks) run
// on thread 0.
#include "framework/core/check.h"
#include "framework/core/cuda_context.h"
#include "train/sync/demo_codec.h"

namespace qtrain::demo::demo_cuda {
namespace {

constexpr int kThreads = 64;

__device__ __forceinline__ unsigned int abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

__device__ __forceinline__ int read_index(const uint8_t* indices, int index_bytes, long long i) {
  if (index_bytes == 1) return indices[i];
  return reinterpret_cast<const uint16_t*>(indices)[i];
}

__global__ void encode_kernel(Args a, float* momentum, const float* grads, uint8_t* payload) {
  __shared__ float coef[kMaxChunk];
  __shared__ float sent[kMaxChunk];
  __shared__ unsigned short kept[kMaxChunk];
  __shared__ unsigned char chosen[kMaxChunk];
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  for (long long c = blockIdx.x; c < a.chunks; c += gridDim.x) {
    const int64_t* row = a.table + c * kChunkFields;
    const int L = static_cast<int>(row[kLength]), K = static_cast<int>(row[kKept]);
    const long long first = row[kFirstKept];
    const double* T = a.forward + row[kBasis];
    const double* B = a.inverse + row[kBasis];
    float* m = momentum + row[kOffset];
    const float* g = grads + row[kOffset];
    for (int n = tid; n < L; n += threads) m[n] = a.beta * m[n] + g[n];
    __syncthreads();
    for (int k = tid; k < L; k += threads) {
      double acc = 0.0;
      for (int n = 0; n < L; ++n) acc += T[n * L + k] * static_cast<double>(m[n]);
      coef[k] = static_cast<float>(acc);
    }
    __syncthreads();
    // Coefficient k is kept when fewer than K others come before it in (|X| descending, k ascending).
    for (int k = tid; k < L; k += threads) {
      const unsigned int mine = abs_bits(coef[k]);
      int before = 0;
      for (int j = 0; j < L; ++j) {
        const unsigned int other = abs_bits(coef[j]);
        before += (other > mine || (other == mine && j < k)) ? 1 : 0;
      }
      chosen[k] = before < K ? 1 : 0;
    }
    __syncthreads();
    if (tid == 0) {
      int j = 0;
      for (int k = 0; k < L; ++k)
        if (chosen[k]) kept[j++] = static_cast<unsigned short>(k);
      auto* values = reinterpret_cast<float*>(payload + a.layout.values);
      uint8_t* indices = payload + a.layout.indices;
      if (a.sign) {
        double total = 0.0;
        for (j = 0; j < K; ++j) total += fabs(static_cast<double>(coef[kept[j]]));
        const float scale = static_cast<float>(total / static_cast<double>(K));
        values[c] = scale;
        uint8_t* bits = payload + a.layout.signs + row[kFirstSign];
        for (j = 0; j < (K + 7) / 8; ++j) bits[j] = 0;
        for (j = 0; j < K; ++j) {
          const bool negative = coef[kept[j]] < 0.0f;
          sent[j] = negative ? -scale : scale;
          if (negative) bits[j / 8] = static_cast<uint8_t>(bits[j / 8] | (1u << (j % 8)));
        }
      } else {
        for (j = 0; j < K; ++j) {
          sent[j] = coef[kept[j]];
          values[first + j] = sent[j];
        }
      }
      for (j = 0; j < K; ++j) {
        if (a.index_bytes == 1)
          indices[first + j] = static_cast<uint8_t>(kept[j]);
        else
          reinterpret_cast<uint16_t*>(indices)[first + j] = kept[j];
      }
    }
    __syncthreads();
    for (int n = tid; n < L; n += threads) {
      double acc = 0.0;
      for (int j = 0; j < K; ++j) acc += B[kept[j] * L + n] * static_cast<double>(sent[j]);
      m[n] = static_cast<float>(static_cast<double>(m[n]) - acc);
    }
    __syncthreads();  // the shared arrays serve the block's next chunk
  }
}

__global__ void decode_kernel(Args a, const uint8_t* payloads, int ranks, long long stride, float* grads) {
  __shared__ float sum[kMaxChunk];
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  for (long long c = blockIdx.x; c < a.chunks; c += gridDim.x) {
    const int64_t* row = a.table + c * kChunkFields;
    const int L = static_cast<int>(row[kLength]), K = static_cast<int>(row[kKept]);
    const long long first = row[kFirstKept];
    for (int k = tid; k < L; k += threads) sum[k] = 0.0f;
    __syncthreads();
    if (tid == 0) {
      for (int r = 0; r < ranks; ++r) {
        const uint8_t* p = payloads + r * stride;
        const auto* values = reinterpret_cast<const float*>(p + a.layout.values);
        for (int j = 0; j < K; ++j) {
          float v;
          if (a.sign) {
            const uint8_t bits = p[a.layout.signs + row[kFirstSign] + j / 8];
            v = (bits >> (j % 8)) & 1 ? -values[c] : values[c];
          } else {
            v = values[first + j];
          }
          sum[read_index(p + a.layout.indices, a.index_bytes, first + j)] += v;
        }
      }
    }
    __syncthreads();
    const double* B = a.inverse + row[kBasis];
    float* out = grads + row[kOffset];
    for (int n = tid; n < L; n += threads) {
      double acc = 0.0;
      for (int k = 0; k < L; ++k) {
        if (sum[k] == 0.0f) continue;
        acc += B[k * L + n] * static_cast<double>(sum[k]);
      }
      out[n] = acc > 0.0 ? 1.0f : (acc < 0.0 ? -1.0f : 0.0f);
    }
    __syncthreads();
  }
}

}  // namespace

void encode(Context& ctx, const Args& a, float* momentum, const float* grads, uint8_t* payload) {
  if (a.chunks == 0) return;
  encode_kernel<<<blocks_for(a.chunks, 1), kThreads, 0, ctx.cuda().stream>>>(a, momentum, grads, payload);
  CUDA_CHECK(cudaGetLastError());
}

void decode(Context& ctx, const Args& a, const uint8_t* payloads, int ranks, size_t stride, float* grads) {
  if (a.chunks == 0) return;
  decode_kernel<<<blocks_for(a.chunks, 1), kThreads, 0, ctx.cuda().stream>>>(a, payloads, ranks,
                                                                             static_cast<long long>(stride), grads);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::demo::demo_cuda
