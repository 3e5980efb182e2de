// codebook kernels, three launches per encode (four with error feedback), each needing the whole
// result of the one before: (1) the header, the span's max (each block's, no atomics), and the pool
// of keys in chunks that blocks sort in shared memory (a bitonic network); (2) the boundaries: each
// key's place in the merge of the sorted chunks (the one sorted order the CPU's sort gives, so the
// same boundaries), and in the last block to arrive the plan (runs of equal boundaries, M, the
// fixed-point shift); (3) one binning pass (codes, and the bins' fixed-point sums through
// shared-memory atomics, integers, so the totals do not depend on the order), the table in its last
// block; then with error feedback a residual pass. Fewer is not possible without a grid-wide barrier:
// the boundaries need every chunk sorted, the codes every boundary and M, the table every bin sum.
// Decode: one launch under DeferredChecks (block 0 checks the table). Every decision is
// quant/codebook_bins.h's, as on the CPU.
#include <algorithm>
#include <bit>

#include "quant/codebook_bins.h"
#include "quant/codebook_cuda.h"
#include "quant/codebook_wire.h"
#include "quant/cuda_common.cuh"

namespace qtrain::quant_detail {
namespace {

constexpr int kMaxBins = 256;
constexpr int kThreads = 256;
// The pool: a block sorts a chunk of kSortChunk keys in shared memory (a bitonic network, one
// compare-exchange per thread and step); the sorted chunks are merged by rank (bounds_kernel), one
// launch whatever the pool's size, instead of the network's global steps, a launch each.
constexpr int64_t kSortChunk = 2048;
constexpr int kSortThreads = static_cast<int>(kSortChunk / 2);
// The blocks of the pool kernel's max pass (at least the chunks): a few per SM.
constexpr int kMaxBlocks = 512;
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
// the largest key, which sorts them to the end of their chunk.
__device__ __forceinline__ uint32_t pool_key(const SpanValues& v, int64_t n, int64_t m, PhiloxKey key, int64_t j) {
  if (j >= m) return 0xffffffffu;
  int64_t i = j;
  if (m != n) {
    const uint64_t block = static_cast<uint64_t>(j) / 4;
    const PhiloxBlock b =
        philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), kStage1, kTagCodebook, key);
    i = codebook_sample_index(b.v[j % 4], n);
  }
  return codebook_key(float_bits(v(i)));
}

// Compare-exchange of the bitonic network: stage k, distance j, pair q (element i and i + j, in
// ascending order where (offset + i) & k is 0).
__device__ __forceinline__ void compare_exchange(uint32_t* keys, int64_t offset, int64_t k, int64_t j, int64_t q) {
  const int64_t i = 2 * j * (q / j) + q % j;
  const bool ascending = ((offset + i) & k) == 0;
  const uint32_t a = keys[i], b = keys[i + j];
  if ((a > b) == ascending) {
    keys[i] = b;
    keys[i + j] = a;
  }
}

// First launch (nothing before it in the encode): the header and the zeroed arrival counter of
// bounds_kernel (thread 0 of block 0); each block's max |v| bits over a grid-stride share of the span
// into block_max[block] (an integer max: any split gives the same M, and no atomics need a zeroed
// word); and block c < chunks builds chunk c of the pool (len keys) in shared memory and sorts it
// ascending with the bitonic network, then stores it: `chunks` sorted runs.
__global__ void __launch_bounds__(kSortThreads)
    pool_kernel(SpanValues v, int64_t n, int64_t m, int64_t len, int64_t chunks, PhiloxKey key, uint32_t* pool,
                uint32_t* block_max, EncodeStatus* status, uint8_t* header_out, WireHeaderFields h,
                unsigned int* arrived) {
  __shared__ uint32_t s[kSortChunk];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    store_header(header_out, h);
    *arrived = 0u;
  }
  uint32_t mx = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t x = abs_bits(v(i));
    mx = x > mx ? x : mx;
  }
  mx = block_max_u32<kSortThreads>(mx);
  if (threadIdx.x == 0) {
    block_max[blockIdx.x] = mx;
    if (mx >= kNonFinite) atomicOr(&status->non_finite, 1u);
  }
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const int64_t base = chunk * len;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s[i] = pool_key(v, n, m, key, base + i);
    __syncthreads();
    for (int64_t k = 2; k <= len; k *= 2)
      for (int64_t j = k / 2; j >= 1; j /= 2) {
        for (int64_t q = threadIdx.x; q < len / 2; q += blockDim.x) compare_exchange(s, 0, k, j, q);
        __syncthreads();
      }
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) pool[base + i] = s[i];
    __syncthreads();  // s is reused by the block's next chunk
  }
}

// How many keys of the sorted run r[0..len) are below x (Inclusive: at or below x).
template <bool Inclusive>
__device__ __forceinline__ int64_t count_below(const uint32_t* r, int64_t len, uint32_t x) {
  int64_t lo = 0, hi = len;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (Inclusive ? r[mid] <= x : r[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// Second launch: the boundaries and the plan. Each key's place in the merged order of the runs (its
// index in its run, plus the keys of earlier runs at or below it and of later runs below it: a
// permutation, the stable merge), so the key at sorted position floor(j m / B) becomes boundary j
// without sorting the whole pool: every pool gives the one sorted order, as the CPU's sort. The last
// block to arrive then completes the plan (the runs of equal boundaries, M from the blocks' maxima,
// the shift) and zeroes the bins' sums and counts and bin_kernel's arrival counter.
__global__ void bounds_kernel(const uint32_t* pool, int64_t p, int64_t len, int64_t m, int bins, int64_t n,
                              const uint32_t* block_max, int max_blocks, Plan* plan, unsigned long long* sums,
                              unsigned int* counts, unsigned int* arrived) {
  const int64_t runs = p / len;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < p;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = q / len;
    const uint32_t x = pool[q];
    int64_t pos = q - r * len;
    for (int64_t o = 0; o < runs; ++o)
      if (o != r) pos += o < r ? count_below<true>(pool + o * len, len, x) : count_below<false>(pool + o * len, len, x);
    if (pos >= m) continue;
    // The boundaries j with floor(j m / B) == pos (several when m < B).
    int64_t j = (pos * bins + m - 1) / m;
    for (j = j < 1 ? 1 : j; j < bins && codebook_boundary_index(j, m, bins) == pos; ++j) plan->t[j - 1] = x;
  }
  if (!last_block_to_arrive(arrived + 0)) return;
  __shared__ uint32_t t[kMaxBins];
  const volatile uint32_t* written = plan->t;
  for (int b = threadIdx.x; b < bins - 1; b += blockDim.x) t[b] = written[b];
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    plan->run[b] = codebook_run_start(t, b);
    sums[b] = 0;
    counts[b] = 0;
  }
  if (threadIdx.x == 0) {
    uint32_t mx = 0;
    for (int i = 0; i < max_blocks; ++i) mx = block_max[i] > mx ? block_max[i] : mx;
    plan->max_bits = mx;
    plan->shift = codebook_shift(mx, n);
    arrived[1] = 0u;
  }
}

// Codes (byte j: value j, or with 4 bits values j and j + half) and the bins' sums and counts.
template <int Bits>
__global__ void __launch_bounds__(kThreads)
    bin_kernel(SpanValues v, int64_t n, int64_t half, const Plan* plan, uint8_t* __restrict__ codes,
               unsigned long long* sums, unsigned int* counts, unsigned int* arrived, float* table) {
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
  // The table, from every block's sums (integers: their order does not matter), by the last block.
  if (!last_block_to_arrive(arrived)) return;
  const volatile unsigned long long* total = sums;
  const volatile unsigned int* count = counts;
  for (int b = threadIdx.x; b < kBins; b += blockDim.x)
    table[b] = codebook_entry(static_cast<int64_t>(total[b]), count[b], codebook_lo_key(plan->t, b, plan->max_bits),
                              codebook_hi_key(plan->t, b, kBins, plan->max_bits), plan->shift);
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

// The decode's checks: finite, non-decreasing entries; with 4 bits and an odd n, the last byte's
// unused high nibble (last_byte, else null) zero. Thread b of a block tests entry b.
__device__ __forceinline__ bool bad_table_entry(const float* table, int bins, const uint8_t* last_byte) {
  const int b = static_cast<int>(threadIdx.x);
  bool bad = false;
  if (b < bins) bad = abs_bits(table[b]) >= kNonFinite || (b > 0 && !(table[b - 1] <= table[b]));
  if (b == 0 && last_byte != nullptr) bad |= (*last_byte >> 4) != 0;
  return bad;
}

// The checks as a kernel of their own (one block of kMaxBins threads), read back before the decode
// (decoder_checks without DeferredChecks, and an empty span, which launches no decode).
__global__ void check_kernel(const float* table, int bins, const uint8_t* last_byte, EncodeStatus* status) {
  if (bad_table_entry(table, bins, last_byte)) atomicOr(&status->bad, 1u);
}

// With a status (decoder_checks under DeferredChecks), block 0 makes the checks as it loads the table.
template <int Bits, bool Add>
__global__ void decode_kernel(const float* table, const uint8_t* __restrict__ codes, int64_t n, int64_t half,
                              float* __restrict__ out, const uint8_t* last_byte, EncodeStatus* status,
                              HeaderCheck header) {
  check_header_in_kernel(header);
  __shared__ float d[1 << Bits];
  if (status != nullptr && blockIdx.x == 0 && bad_table_entry(table, 1 << Bits, last_byte)) atomicOr(&status->bad, 1u);
  for (int b = threadIdx.x; b < (1 << Bits); b += blockDim.x) d[b] = table[b];
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float y = d[code_at<Bits>(codes, half, i)];
    out[i] = Add ? out[i] + y : y;
  }
}

}  // namespace

void codebook_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::CodebookLayout& l, int64_t pool,
                          const WireHeader& h) {
  cudaStream_t s = stream_of(ctx);
  auto* table = reinterpret_cast<float*>(a.out + l.table_offset);
  if (a.n == 0) {
    cuda_write_header(ctx, a.out, h);
    cuda_zero_bytes(ctx, a.out + l.table_offset, 4 * static_cast<size_t>(l.bins));
    return;
  }
  // Chunks of len keys (the pool padded to whole chunks of a power of two).
  const int64_t len = pool < kSortChunk ? std::bit_ceil(static_cast<uint64_t>(pool)) : kSortChunk;
  const int64_t chunks = (pool + len - 1) / len, p = chunks * len;
  const int max_blocks = std::max(static_cast<int>(chunks), std::min(grid_for(a.n, kSortThreads), kMaxBlocks));
  const size_t need = Carver::bytes<EncodeStatus>(1) + Carver::bytes<unsigned int>(2) + Carver::bytes<Plan>(1) +
                      Carver::bytes<unsigned long long>(kMaxBins) + Carver::bytes<unsigned int>(kMaxBins) +
                      Carver::bytes<uint32_t>(static_cast<size_t>(max_blocks)) +
                      Carver::bytes<uint32_t>(static_cast<size_t>(p));
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* arrived = carver.take<unsigned int>(2);
  auto* plan = carver.take<Plan>(1);
  auto* sums = carver.take<unsigned long long>(kMaxBins);
  auto* counts = carver.take<unsigned int>(kMaxBins);
  auto* block_max = carver.take<uint32_t>(static_cast<size_t>(max_blocks));
  auto* keys = carver.take<uint32_t>(static_cast<size_t>(p));
  const SpanValues v{a.in, a.residual};
  // Three launches, each needing the whole result of the one before: the sorted chunks and M; the
  // boundaries (the merge of every chunk) and the plan; the codes and bin sums, then the table.
  pool_kernel<<<max_blocks, kSortThreads, 0, s>>>(v, a.n, pool, len, chunks, a.key, keys, block_max, status, a.out,
                                                  fields_of(h), arrived);
  bounds_kernel<<<grid_for(p, kThreads), kThreads, 0, s>>>(keys, p, len, pool, l.bins, a.n, block_max, max_blocks, plan,
                                                           sums, counts, arrived);
  const int64_t bytes = l.bits == 8 ? a.n : l.half;
  const int grid = grid_for(bytes, kThreads) < kBinBlocks ? grid_for(bytes, kThreads) : kBinBlocks;
  uint8_t* codes = a.out + l.codes_offset;
  if (l.bits == 8)
    bin_kernel<8><<<grid, kThreads, 0, s>>>(v, a.n, l.half, plan, codes, sums, counts, arrived + 1, table);
  else
    bin_kernel<4><<<grid, kThreads, 0, s>>>(v, a.n, l.half, plan, codes, sums, counts, arrived + 1, table);
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
  const uint8_t* last_byte = l.bits == 4 && l.n % 2 == 1 ? codes + l.half - 1 : nullptr;
  DecodeStatus status(ctx);
  const auto check = [](const EncodeStatus& done) {
    if (done.bad)
      wire::bad_payload(QuantMethod::codebook,
                        "the table is not finite and non-decreasing, or the last code byte's unused nibble is set");
  };
  if (l.n == 0) {  // no decode kernel to make the checks: the table is still checked
    check_kernel<<<1, kMaxBins, 0, s>>>(table, l.bins, last_byte, status.get());
    CUDA_CHECK(cudaGetLastError());
    check_status(ctx, status.get(), check);
    return;
  }
  EncodeStatus* in_decoder = decoder_checks(
      ctx, status, [&](EncodeStatus* st) { check_kernel<<<1, kMaxBins, 0, s>>>(table, l.bins, last_byte, st); }, check);
  const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
  const int grid = grid_for(l.n, kThreads);
  if (l.bits == 8 && add)
    decode_kernel<8, true><<<grid, kThreads, 0, s>>>(table, codes, l.n, l.half, out, last_byte, in_decoder, header);
  else if (l.bits == 8)
    decode_kernel<8, false><<<grid, kThreads, 0, s>>>(table, codes, l.n, l.half, out, last_byte, in_decoder, header);
  else if (add)
    decode_kernel<4, true><<<grid, kThreads, 0, s>>>(table, codes, l.n, l.half, out, last_byte, in_decoder, header);
  else
    decode_kernel<4, false><<<grid, kThreads, 0, s>>>(table, codes, l.n, l.half, out, last_byte, in_decoder, header);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
