// codebook kernels: the span's max (common.cu's bucket max, one bucket), the pool of keys, a bitonic
// sort of it (any correct sort gives the one sorted order the CPU's std::sort gives), the boundaries,
// one binning pass (codes, and the bins' fixed-point sums through shared-memory atomics, integers,
// so the totals do not depend on the order), the table, and with error feedback a residual pass.
// Every decision is quant/codebook_bins.h's, as on the CPU.
#include "quant/codebook_bins.h"
#include "quant/codebook_cuda.h"
#include "quant/codebook_wire.h"
#include "quant/cuda_common.cuh"

namespace qtrain::quant_detail {
namespace {

constexpr int kMaxBins = 256;
constexpr int kThreads = 256;
// The sort: a block sorts (or finishes a merge stage of) a chunk of kSortChunk keys in shared memory,
// one compare-exchange per thread and step; longer distances are global steps, one launch each.
constexpr int64_t kSortChunk = 2048;
constexpr int kSortThreads = static_cast<int>(kSortChunk / 2);
// The binning pass folds each block's shared sums into the global ones once: a few blocks per SM keep
// those atomics few; the blocks stride over the span.
constexpr int kBinBlocks = 512;

struct SpanValues {
  const float* g;
  const float* e;
  __device__ float operator()(int64_t i) const { return e ? g[i] + e[i] : g[i]; }
};

// What the binning and the table read: the boundaries, M and the fixed-point shift.
struct Plan {
  uint32_t t[kMaxBins];   // bins - 1 boundary keys
  uint8_t run[kMaxBins];  // codebook_run_start of each bin
  uint32_t max_bits;
  int shift;
};

// Key j of the pool: span value j (m == n), or sample j (codebook.cpp's sorted_pool); keys past m are
// the largest key, which sorts them to the end of the power-of-two pool.
__global__ void pool_kernel(SpanValues v, int64_t n, int64_t m, int64_t p, PhiloxKey key, uint32_t* pool) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < p;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t k = 0xffffffffu;
    if (j < m) {
      int64_t i = j;
      if (m != n) {
        const uint64_t block = static_cast<uint64_t>(j) / 4;
        const PhiloxBlock b =
            philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), kStage1, kTagCodebook, key);
        i = codebook_sample_index(b.v[j % 4], n);
      }
      k = codebook_key(float_bits(v(i)));
    }
    pool[j] = k;
  }
}

// Compare-exchange of the bitonic network: stage k, distance j, pair q (element i and i + j, in
// ascending order where i & k is 0).
__device__ __forceinline__ void compare_exchange(uint32_t* keys, int64_t offset, int64_t k, int64_t j, int64_t q) {
  const int64_t i = 2 * j * (q / j) + q % j;
  const bool ascending = ((offset + i) & k) == 0;
  const uint32_t a = keys[i], b = keys[i + j];
  if ((a > b) == ascending) {
    keys[i] = b;
    keys[i + j] = a;
  }
}

// Chunks of len = min(p, kSortChunk) keys in shared memory: with stage == 0 the network's stages
// 2 .. len (each chunk sorted, in the direction its place in the network asks), else the steps
// j = len / 2 .. 1 of stage `stage` (> len).
__global__ void __launch_bounds__(kSortThreads) sort_chunk_kernel(uint32_t* keys, int64_t p, int64_t stage) {
  __shared__ uint32_t s[kSortChunk];
  const int64_t len = p < kSortChunk ? p : kSortChunk;
  for (int64_t chunk = blockIdx.x; chunk * len < p; chunk += gridDim.x) {
    const int64_t base = chunk * len;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s[i] = keys[base + i];
    __syncthreads();
    auto step = [&](int64_t k, int64_t j) {
      for (int64_t q = threadIdx.x; q < len / 2; q += blockDim.x) compare_exchange(s, base, k, j, q);
      __syncthreads();
    };
    if (stage == 0) {
      for (int64_t k = 2; k <= len; k *= 2)
        for (int64_t j = k / 2; j >= 1; j /= 2) step(k, j);
    } else {
      for (int64_t j = len / 2; j >= 1; j /= 2) step(stage, j);
    }
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) keys[base + i] = s[i];
    __syncthreads();  // s is reused by the block's next chunk
  }
}

// One step (stage k, distance j >= kSortChunk) over the whole pool.
__global__ void sort_step_kernel(uint32_t* keys, int64_t p, int64_t k, int64_t j) {
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < p / 2;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x)
    compare_exchange(keys, 0, k, j, q);
}

// Sorts p keys (a power of two) ascending.
void sort_pool(Context& ctx, uint32_t* keys, int64_t p) {
  cudaStream_t s = stream_of(ctx);
  const int64_t len = p < kSortChunk ? p : kSortChunk;
  const int chunks = grid_for(p / len, 1);
  const int threads = len / 2 < kWarp ? kWarp : static_cast<int>(len / 2);
  sort_chunk_kernel<<<chunks, threads, 0, s>>>(keys, p, 0);
  for (int64_t k = 2 * len; k <= p; k *= 2) {
    for (int64_t j = k / 2; j >= len; j /= 2)
      sort_step_kernel<<<grid_for(p / 2, kThreads), kThreads, 0, s>>>(keys, p, k, j);
    sort_chunk_kernel<<<chunks, threads, 0, s>>>(keys, p, k);
  }
  CUDA_CHECK(cudaGetLastError());
}

// The boundaries from the sorted pool of m keys, M and the shift (one block of kMaxBins threads).
__global__ void plan_kernel(const uint32_t* pool, int64_t m, int bins, int64_t n, const uint32_t* max_bits,
                            Plan* plan) {
  __shared__ uint32_t t[kMaxBins];
  const int j = static_cast<int>(threadIdx.x) + 1;
  if (j < bins) plan->t[j - 1] = t[j - 1] = pool[codebook_boundary_index(j, m, bins)];
  __syncthreads();
  if (j - 1 < bins) plan->run[j - 1] = codebook_run_start(t, j - 1);
  if (threadIdx.x == 0) {
    plan->max_bits = *max_bits;
    plan->shift = codebook_shift(*max_bits, n);
  }
}

// Codes (byte j: value j, or with 4 bits values j and j + half) and the bins' sums and counts.
template <int Bits>
__global__ void __launch_bounds__(kThreads)
    bin_kernel(SpanValues v, int64_t n, int64_t half, const Plan* plan, uint8_t* __restrict__ codes,
               unsigned long long* sums, unsigned int* counts) {
  constexpr int kBins = 1 << Bits;
  __shared__ uint32_t t[kBins];
  __shared__ uint8_t run[kBins];
  __shared__ unsigned long long bin_sum[kBins];
  __shared__ unsigned int bin_count[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    if (b < kBins - 1) t[b] = plan->t[b];
    run[b] = plan->run[b];
    bin_sum[b] = 0;
    bin_count[b] = 0;
  }
  const int shift = plan->shift;
  __syncthreads();
  auto bin_of = [&](int64_t i) {
    const uint32_t bits = float_bits(v(i));
    const uint32_t key = codebook_key(bits);
    const uint32_t b = codebook_tied_bin(t, run, codebook_bin(t, Bits, key), key);
    // Two's complement: the unsigned sum of the terms is the bits of their signed sum.
    atomicAdd(&bin_sum[b], static_cast<unsigned long long>(codebook_fixed(bits, shift)));
    atomicAdd(&bin_count[b], 1u);
    return b;
  };
  const int64_t bytes = Bits == 8 ? n : half;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < bytes;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t byte = bin_of(j);
    if (Bits == 4 && j + half < n) byte |= bin_of(j + half) << 4;
    codes[j] = static_cast<uint8_t>(byte);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x)
    if (bin_count[b] != 0u) {
      atomicAdd(&sums[b], bin_sum[b]);
      atomicAdd(&counts[b], bin_count[b]);
    }
}

// The table (one block of kMaxBins threads).
__global__ void table_kernel(const Plan* plan, const unsigned long long* sums, const unsigned int* counts, int bins,
                             float* table) {
  const int b = static_cast<int>(threadIdx.x);
  if (b < bins)
    table[b] = codebook_entry(static_cast<int64_t>(sums[b]), counts[b], codebook_lo_key(plan->t, b, plan->max_bits),
                              codebook_hi_key(plan->t, b, bins, plan->max_bits), plan->shift);
}

template <int Bits>
__device__ __forceinline__ uint32_t code_at(const uint8_t* codes, int64_t half, int64_t i) {
  if (Bits == 8) return codes[i];
  return i < half ? codes[i] & 0xfu : static_cast<uint32_t>(codes[i - half] >> 4);
}

// e = (g + e) - table[code].
template <int Bits>
__global__ void residual_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n, int64_t half,
                                const float* table, const uint8_t* __restrict__ codes) {
  __shared__ float d[1 << Bits];
  for (int b = threadIdx.x; b < (1 << Bits); b += blockDim.x) d[b] = table[b];
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    residual[i] = (in[i] + residual[i]) - d[code_at<Bits>(codes, half, i)];
}

// The decode's checks (one block of kMaxBins threads): finite, non-decreasing entries; with 4 bits and
// an odd n, the last byte's unused high nibble (last_byte, else null) zero.
__global__ void check_kernel(const float* table, int bins, const uint8_t* last_byte, EncodeStatus* status) {
  const int b = static_cast<int>(threadIdx.x);
  bool bad = false;
  if (b < bins) bad = abs_bits(table[b]) >= kNonFinite || (b > 0 && !(table[b - 1] <= table[b]));
  if (b == 0 && last_byte != nullptr) bad |= (*last_byte >> 4) != 0;
  if (bad) atomicOr(&status->bad, 1u);
}

template <int Bits, bool Add>
__global__ void decode_kernel(const float* table, const uint8_t* __restrict__ codes, int64_t n, int64_t half,
                              float* __restrict__ out) {
  __shared__ float d[1 << Bits];
  for (int b = threadIdx.x; b < (1 << Bits); b += blockDim.x) d[b] = table[b];
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float y = d[code_at<Bits>(codes, half, i)];
    out[i] = Add ? out[i] + y : y;
  }
}

int64_t pow2_at_least(int64_t m) {
  int64_t p = 1;
  while (p < m) p *= 2;
  return p;
}

}  // namespace

void codebook_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::CodebookLayout& l, int64_t pool,
                          const WireHeader& h) {
  cudaStream_t s = stream_of(ctx);
  cuda_write_header(ctx, a.out, h);
  auto* table = reinterpret_cast<float*>(a.out + l.table_offset);
  if (a.n == 0) {
    cuda_zero_bytes(ctx, a.out + l.table_offset, 4 * static_cast<size_t>(l.bins));
    return;
  }
  const int64_t p = pow2_at_least(pool);
  const size_t need = Carver::bytes<EncodeStatus>(1) + Carver::bytes<uint32_t>(1) + Carver::bytes<Plan>(1) +
                      Carver::bytes<unsigned long long>(kMaxBins) + Carver::bytes<unsigned int>(kMaxBins) +
                      Carver::bytes<uint32_t>(static_cast<size_t>(p));
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* max_bits = carver.take<uint32_t>(1);
  auto* plan = carver.take<Plan>(1);
  auto* sums = carver.take<unsigned long long>(kMaxBins);
  auto* counts = carver.take<unsigned int>(kMaxBins);
  auto* keys = carver.take<uint32_t>(static_cast<size_t>(p));
  CUDA_CHECK(cudaMemsetAsync(sums, 0, kMaxBins * sizeof(unsigned long long), s));
  CUDA_CHECK(cudaMemsetAsync(counts, 0, kMaxBins * sizeof(unsigned int), s));
  cuda_bucket_max_bits(ctx, a.in, a.residual, a.n, a.n, 1, max_bits, status);
  const SpanValues v{a.in, a.residual};
  pool_kernel<<<grid_for(p, kThreads), kThreads, 0, s>>>(v, a.n, pool, p, a.key, keys);
  CUDA_CHECK(cudaGetLastError());
  sort_pool(ctx, keys, p);
  plan_kernel<<<1, kMaxBins, 0, s>>>(keys, pool, l.bins, a.n, max_bits, plan);
  const int64_t bytes = l.bits == 8 ? a.n : l.half;
  const int grid = grid_for(bytes, kThreads) < kBinBlocks ? grid_for(bytes, kThreads) : kBinBlocks;
  uint8_t* codes = a.out + l.codes_offset;
  if (l.bits == 8)
    bin_kernel<8><<<grid, kThreads, 0, s>>>(v, a.n, l.half, plan, codes, sums, counts);
  else
    bin_kernel<4><<<grid, kThreads, 0, s>>>(v, a.n, l.half, plan, codes, sums, counts);
  table_kernel<<<1, kMaxBins, 0, s>>>(plan, sums, counts, l.bins, table);
  if (a.residual) {
    if (l.bits == 8)
      residual_kernel<8><<<grid_for(a.n, kThreads), kThreads, 0, s>>>(a.in, a.residual, a.n, l.half, table, codes);
    else
      residual_kernel<4><<<grid_for(a.n, kThreads), kThreads, 0, s>>>(a.in, a.residual, a.n, l.half, table, codes);
  }
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("codebook encode: the input of {} values holds NaN or Inf", n));
  });
}

void codebook_decode_cuda(Context& ctx, const wire::CodebookLayout& l, const uint8_t* payload, float* out, bool add) {
  cudaStream_t s = stream_of(ctx);
  const auto* table = reinterpret_cast<const float*>(payload + l.table_offset);
  const uint8_t* codes = payload + l.codes_offset;
  DecodeStatus status(ctx);
  check_kernel<<<1, kMaxBins, 0, s>>>(table, l.bins, l.bits == 4 && l.n % 2 == 1 ? codes + l.half - 1 : nullptr,
                                      status.get());
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status.get(), [](const EncodeStatus& done) {
    if (done.bad)
      wire::bad_payload(QuantMethod::codebook,
                        "the table is not finite and non-decreasing, or the last code byte's unused nibble is set");
  });
  if (l.n == 0) return;
  const int grid = grid_for(l.n, kThreads);
  if (l.bits == 8 && add)
    decode_kernel<8, true><<<grid, kThreads, 0, s>>>(table, codes, l.n, l.half, out);
  else if (l.bits == 8)
    decode_kernel<8, false><<<grid, kThreads, 0, s>>>(table, codes, l.n, l.half, out);
  else if (add)
    decode_kernel<4, true><<<grid, kThreads, 0, s>>>(table, codes, l.n, l.half, out);
  else
    decode_kernel<4, false><<<grid, kThreads, 0, s>>>(table, codes, l.n, l.half, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
