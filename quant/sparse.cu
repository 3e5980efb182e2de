// Kernels of the sparse methods, topk and adaptive: the exact radix selection of the k-th largest
// |v| (quant/select.h: histograms of 11, 11 and 9 bits; counts do not depend on the order of the
// atomics, so the threshold is the CPU's), and an order-preserving compaction (tile counts, one scan,
// then each tile writes its entries in index order), which gives the CPU loops' exact layouts. topk's
// quantized values: each range's lo and hi are an integer min and max of float bits (order-free), and
// each code byte is written whole by one thread.
#include "quant/adaptive_wire.h"
#include "quant/cuda_common.cuh"
#include "quant/adaptive_cuda.h"
#include "quant/topk_cuda.h"
#include "quant/topk_values.h"

namespace qtrain::quant_detail {
namespace {

constexpr int kBins = 2048;
constexpr int64_t kTile = 4096;
constexpr int kTileThreads = 256;
constexpr int kScanThreads = 1024;

struct SpanValues {
  const float* g;
  const float* e;
  __device__ float operator()(int64_t i) const { return e ? g[i] + e[i] : g[i]; }
};

struct ArrayValues {
  const float* x;
  __device__ float operator()(int64_t i) const { return x[i]; }
};

// ---- radix selection ---------------------------------------------------------------------------

struct SelectState {
  unsigned long long rank;  // the rank still sought inside the current bucket
  uint32_t b1, b2;
  uint32_t threshold;       // the k-th largest |v| as float bits
  unsigned long long ties;  // values equal to the threshold that complete the top k
};

template <int Level, typename V>
__global__ void select_hist_kernel(V v, int64_t n, const SelectState* state, unsigned int* hist) {
  __shared__ unsigned int h[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const uint32_t b1 = Level > 1 ? state->b1 : 0u, b2 = Level > 2 ? state->b2 : 0u;
  const uint32_t prefix = (b1 << 20) | (b2 << 9);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t bits = abs_bits(v(i));
    if (Level == 1)
      atomicAdd(&h[bits >> 20], 1u);
    else if (Level == 2 && (bits >> 20) == b1)
      atomicAdd(&h[(bits >> 9) & 0x7ffu], 1u);
    else if (Level == 3 && (bits & ~0x1ffu) == prefix)
      atomicAdd(&h[bits & 0x1ffu], 1u);
  }
  __syncthreads();
  const int bins = Level == 3 ? 512 : kBins;
  for (int b = threadIdx.x; b < bins; b += blockDim.x)
    if (h[b]) atomicAdd(&hist[b], h[b]);
}

// One block of kScanThreads: suffix sums of the histogram, then the one bin where the sought rank
// falls records itself (select_detail::find_bucket of quant/select.h).
template <int Level>
__global__ void select_find_kernel(const unsigned int* hist, SelectState* state, unsigned long long k,
                                   EncodeStatus* status) {
  constexpr int kBinsHere = Level == 3 ? 512 : kBins;
  __shared__ unsigned long long suffix[kBins];
  const unsigned long long rank = Level == 1 ? k : state->rank;
  for (int b = threadIdx.x; b < kBinsHere; b += blockDim.x) suffix[b] = hist[b];
  __syncthreads();
  for (int off = 1; off < kBinsHere; off *= 2) {
    unsigned long long add[kBins / kScanThreads];
    for (int j = 0; j < kBins / kScanThreads; ++j) {
      const int b = threadIdx.x + j * kScanThreads;
      add[j] = b < kBinsHere && b + off < kBinsHere ? suffix[b + off] : 0ull;
    }
    __syncthreads();
    for (int j = 0; j < kBins / kScanThreads; ++j) {
      const int b = threadIdx.x + j * kScanThreads;
      if (b < kBinsHere) suffix[b] += add[j];
    }
    __syncthreads();
  }
  for (int b = threadIdx.x; b < kBinsHere; b += blockDim.x) {
    const unsigned long long above = b + 1 < kBinsHere ? suffix[b + 1] : 0ull;
    const unsigned long long count = hist[b];
    if (count > 0 && above < rank && rank <= above + count) {
      if (Level == 1) state->b1 = static_cast<uint32_t>(b);
      if (Level == 2) state->b2 = static_cast<uint32_t>(b);
      if (Level == 3) {
        state->threshold = (state->b1 << 20) | (state->b2 << 9) | static_cast<uint32_t>(b);
        state->ties = rank - above;
      }
      state->rank = rank - above;
    }
    if (Level == 1 && b >= static_cast<int>(kNonFinite >> 20) && count > 0) atomicOr(&status->non_finite, 1u);
  }
}

size_t select_bytes() { return Carver::bytes<SelectState>(1) + 3 * Carver::bytes<unsigned int>(kBins); }

// The k-th largest |v(i)| over [0, n) into state (k >= 1, asynchronous).
template <typename V>
SelectState* select_kth(Context& ctx, Carver& carver, V v, int64_t n, int64_t k, EncodeStatus* status) {
  auto* state = carver.take<SelectState>(1);
  auto* hist = carver.take<unsigned int>(3 * kBins);
  cudaStream_t s = stream_of(ctx);
  CUDA_CHECK(cudaMemsetAsync(state, 0, sizeof(SelectState), s));
  CUDA_CHECK(cudaMemsetAsync(hist, 0, 3 * kBins * sizeof(unsigned int), s));
  constexpr int kThreads = 256;
  const int grid = grid_for(n, kThreads) < 1024 ? grid_for(n, kThreads) : 1024;  // shared histograms: few blocks
  const auto rank = static_cast<unsigned long long>(k);
  select_hist_kernel<1><<<grid, kThreads, 0, s>>>(v, n, state, hist);
  select_find_kernel<1><<<1, kScanThreads, 0, s>>>(hist, state, rank, status);
  select_hist_kernel<2><<<grid, kThreads, 0, s>>>(v, n, state, hist + kBins);
  select_find_kernel<2><<<1, kScanThreads, 0, s>>>(hist + kBins, state, rank, status);
  select_hist_kernel<3><<<grid, kThreads, 0, s>>>(v, n, state, hist + 2 * kBins);
  select_find_kernel<3><<<1, kScanThreads, 0, s>>>(hist + 2 * kBins, state, rank, status);
  CUDA_CHECK(cudaGetLastError());
  return state;
}

// ---- order-preserving compaction -----------------------------------------------------------------
// Each value is "primary" (always selected) or "secondary" (selected while fewer than `secondary_quota`
// secondaries precede it: topk's ties at the threshold), or neither. Selected values get consecutive
// ranks in index order.

struct Tiles {
  int64_t count;
  unsigned long long* primary;    // per tile
  unsigned long long* secondary;  // per tile
  unsigned long long* secondary_before;
  unsigned long long* selected_before;
};

size_t tiles_bytes(int64_t n) {
  const auto tiles = static_cast<size_t>((n + kTile - 1) / kTile);
  return 4 * Carver::bytes<unsigned long long>(tiles);
}

Tiles make_tiles(Carver& carver, int64_t n) {
  Tiles t{};
  t.count = (n + kTile - 1) / kTile;
  const auto c = static_cast<size_t>(t.count);
  t.primary = carver.take<unsigned long long>(c);
  t.secondary = carver.take<unsigned long long>(c);
  t.secondary_before = carver.take<unsigned long long>(c);
  t.selected_before = carver.take<unsigned long long>(c);
  return t;
}

// Exclusive scan of one flag over a block of Threads threads (all threads must call it).
template <int Threads = kTileThreads>
__device__ __forceinline__ int block_exclusive_count(bool flag, int* warp_totals, int& total) {
  const unsigned ballot = __ballot_sync(kFullMask, flag);
  const int lane = static_cast<int>(threadIdx.x % kWarp), warp = static_cast<int>(threadIdx.x / kWarp);
  if (lane == 0) warp_totals[warp] = __popc(ballot);
  __syncthreads();
  int before = 0;
  total = 0;
  for (int w = 0; w < Threads / kWarp; ++w) {
    const int t = warp_totals[w];
    if (w < warp) before += t;
    total += t;
  }
  __syncthreads();  // warp_totals is reused by the next call
  return before + __popc(ballot & ((1u << lane) - 1u));
}

template <typename Flags>
__global__ void tile_count_kernel(Flags flags, int64_t n, Tiles tiles) {
  __shared__ unsigned long long sums[2];
  for (int64_t tile = blockIdx.x; tile < tiles.count; tile += gridDim.x) {
    if (threadIdx.x < 2) sums[threadIdx.x] = 0;
    __syncthreads();
    unsigned long long p = 0, q = 0;
    const int64_t end = (tile + 1) * kTile < n ? (tile + 1) * kTile : n;
    for (int64_t i = tile * kTile + threadIdx.x; i < end; i += blockDim.x) {
      const uint32_t f = flags.of(i);
      p += f & 1u;
      q += (f >> 1) & 1u;
    }
    atomicAdd(&sums[0], p);
    atomicAdd(&sums[1], q);
    __syncthreads();
    if (threadIdx.x == 0) {
      tiles.primary[tile] = sums[0];
      tiles.secondary[tile] = sums[1];
    }
    __syncthreads();
  }
}

// Inclusive scan of one value per thread over a block of kScanThreads.
__device__ __forceinline__ unsigned long long block_inclusive_scan(unsigned long long x, unsigned long long* warp_sums,
                                                                   unsigned long long& total) {
  const int lane = static_cast<int>(threadIdx.x % kWarp), warp = static_cast<int>(threadIdx.x / kWarp);
  for (int off = 1; off < kWarp; off *= 2) {
    const unsigned long long y = __shfl_up_sync(kFullMask, x, off);
    if (lane >= off) x += y;
  }
  if (lane == kWarp - 1) warp_sums[warp] = x;
  __syncthreads();
  unsigned long long before = 0;
  total = 0;
  for (int w = 0; w < kScanThreads / kWarp; ++w) {
    if (w < warp) before += warp_sums[w];
    total += warp_sums[w];
  }
  __syncthreads();
  return before + x;
}

// One block: secondary_before, the secondaries each tile may take, selected_before; the totals go to
// status->count (selected values).
__global__ void tile_scan_kernel(Tiles tiles, unsigned long long secondary_quota, EncodeStatus* status) {
  __shared__ unsigned long long warp_sums[kScanThreads / kWarp];
  unsigned long long carry_secondary = 0, carry_selected = 0;
  for (int64_t base = 0; base < tiles.count; base += kScanThreads) {
    const int64_t t = base + threadIdx.x;
    const unsigned long long p = t < tiles.count ? tiles.primary[t] : 0ull;
    const unsigned long long q = t < tiles.count ? tiles.secondary[t] : 0ull;
    unsigned long long total = 0;
    const unsigned long long q_before = carry_secondary + block_inclusive_scan(q, warp_sums, total) - q;
    carry_secondary += total;
    const unsigned long long quota_left = secondary_quota > q_before ? secondary_quota - q_before : 0ull;
    const unsigned long long taken = quota_left < q ? quota_left : q;
    const unsigned long long selected = p + taken;
    const unsigned long long s_before = carry_selected + block_inclusive_scan(selected, warp_sums, total) - selected;
    carry_selected += total;
    if (t < tiles.count) {
      tiles.secondary_before[t] = q_before;
      tiles.selected_before[t] = s_before;
    }
  }
  if (threadIdx.x == 0) status->count = carry_selected;
}

// One block per tile, values in index order 256 at a time; emit(i, selected, rank) with rank = the
// number of selected values before i (also for values not selected).
template <typename Flags, typename Emit>
__global__ void tile_write_kernel(Flags flags, int64_t n, Tiles tiles, unsigned long long secondary_quota, Emit emit) {
  __shared__ int warp_totals[kTileThreads / kWarp];
  for (int64_t tile = blockIdx.x; tile < tiles.count; tile += gridDim.x) {
    unsigned long long secondary_seen = tiles.secondary_before[tile];
    unsigned long long selected_seen = tiles.selected_before[tile];
    for (int64_t round = tile * kTile; round < (tile + 1) * kTile && round < n; round += kTileThreads) {
      const int64_t i = round + threadIdx.x;
      const uint32_t f = i < n ? flags.of(i) : 0u;
      int total = 0;
      const int q_rank = block_exclusive_count((f >> 1) & 1u, warp_totals, total);
      const bool take = ((f >> 1) & 1u) && secondary_seen + static_cast<unsigned long long>(q_rank) < secondary_quota;
      secondary_seen += static_cast<unsigned long long>(total);
      const bool selected = (f & 1u) || take;
      const int s_rank = block_exclusive_count(selected, warp_totals, total);
      if (i < n) emit(i, selected, selected_seen + static_cast<unsigned long long>(s_rank));
      selected_seen += static_cast<unsigned long long>(total);
    }
  }
}

template <typename Flags, typename Emit>
void compact(Context& ctx, const Tiles& tiles, Flags flags, int64_t n, unsigned long long quota, Emit emit,
             EncodeStatus* status) {
  cudaStream_t s = stream_of(ctx);
  const int grid = tiles.count < 65535 * 4 ? static_cast<int>(tiles.count) : 65535 * 4;
  tile_count_kernel<<<grid, kTileThreads, 0, s>>>(flags, n, tiles);
  tile_scan_kernel<<<1, kScanThreads, 0, s>>>(tiles, quota, status);
  tile_write_kernel<<<grid, kTileThreads, 0, s>>>(flags, n, tiles, quota, emit);
  CUDA_CHECK(cudaGetLastError());
}

// ---- topk ----------------------------------------------------------------------------------------

struct TopkFlags {
  SpanValues v;
  const SelectState* state;
  __device__ uint32_t of(int64_t i) const {
    const uint32_t b = abs_bits(v(i));
    const uint32_t t = state->threshold;
    return (b > t ? 1u : 0u) | (b == t ? 2u : 0u);
  }
};

// values: the payload's f32 values, or (quantized) the workspace the codes kernel reads them from.
struct TopkEmit {
  SpanValues v;
  float* residual;
  uint32_t* indices;
  float* values;
  bool exact;  // f32 values: e = 0 where sent; codes: topk_codes_kernel writes e there
  __device__ void operator()(int64_t i, bool selected, unsigned long long rank) const {
    const float x = v(i);
    if (selected) {
      indices[rank] = static_cast<uint32_t>(i);
      values[rank] = x;
    }
    if (residual && (exact || !selected)) residual[i] = selected ? 0.0f : x;
  }
};

// Each range's (lo, hi) as float bits, before the min and max.
__global__ void topk_range_init_kernel(uint32_t* ranges, int64_t groups) {
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    ranges[2 * g] = ~0u;
    ranges[2 * g + 1] = 0u;
  }
}

__device__ __forceinline__ uint32_t warp_min_u32(uint32_t x) {
  for (int off = kWarp / 2; off >= 1; off /= 2) {
    const uint32_t y = __shfl_xor_sync(kFullMask, x, off);
    x = y < x ? y : x;
  }
  return x;
}

// The smallest and largest |value| of each range of `group` entries: a warp whose 32 entries lie in
// one range folds them first (one atomic pair instead of 32; a range of the whole payload would
// otherwise put every entry's atomics on one address). The warp's loop bounds are the same for its
// lanes, so the shuffles see all 32.
__global__ void topk_range_kernel(const float* values, int64_t k, int64_t group, uint32_t* ranges) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (int64_t first = warp * kWarp; first < k; first += warps * kWarp) {
    const int64_t j = first + lane;
    const uint32_t b = j < k ? abs_bits(values[j]) : 0u;
    const int64_t last = first + kWarp - 1 < k ? first + kWarp - 1 : k - 1;
    if (first / group == last / group) {
      const uint32_t lo = warp_min_u32(j < k ? b : ~0u), hi = warp_max_u32(b);
      if (lane == 0) {
        atomicMin(&ranges[2 * (first / group)], lo);
        atomicMax(&ranges[2 * (first / group) + 1], hi);
      }
    } else if (j < k) {
      atomicMin(&ranges[2 * (j / group)], b);
      atomicMax(&ranges[2 * (j / group) + 1], b);
    }
  }
}

// One thread per code byte: the codes of its 8 / bits entries (quant/topk_values.h, as topk.cpp's
// quantize()), and e = v - decoded at their positions.
__global__ void topk_codes_kernel(const float* values, const uint32_t* indices, wire::TopkLayout l, uint8_t* out,
                                  float* residual) {
  const auto* ranges = reinterpret_cast<const float*>(out + l.ranges);
  const int per_byte = 8 / l.bits;
  const uint32_t top = topk_top_level(l.bits);
  const auto bytes = static_cast<int64_t>(wire::packed_bytes(l.k, l.bits));
  for (int64_t byte = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; byte < bytes;
       byte += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t packed = 0;
    for (int t = 0; t < per_byte; ++t) {
      const int64_t j = byte * per_byte + t;
      if (j >= l.k) break;
      const int64_t g = j / l.group;
      const float lo = ranges[2 * g], hi = ranges[2 * g + 1], step = topk_step(lo, hi, top);
      const float x = values[j];
      const uint32_t code = topk_code(x, lo, step, top, l.bits);
      packed |= code << (t * l.bits);
      if (residual) residual[indices[j]] = x - topk_decoded(code, lo, hi, step, top, l.bits);
    }
    out[l.codes + static_cast<size_t>(byte)] = static_cast<uint8_t>(packed);
  }
}

// ---- topk, chunk-local selection (chunk: C) --------------------------------------------------------
// One block per chunk (64 threads for chunks of up to 256 values, else 256): the radix selection of
// quant/select.h in shared histograms (the chunk's k-th largest |v|, a value, so the order of the
// atomics does not matter), then the chunk's compaction in index order, a block of values at a time,
// as tile_write_kernel does for a tile. Chunks of up to 32 values: one thread each.

// Inclusive scan of one int per thread over the block (whole warps).
__device__ __forceinline__ int tile_inclusive_scan(int x, int* warp_sums) {
  const int lane = static_cast<int>(threadIdx.x % kWarp), warp = static_cast<int>(threadIdx.x / kWarp);
  for (int off = 1; off < kWarp; off *= 2) {
    const int y = __shfl_up_sync(kFullMask, x, off);
    if (lane >= off) x += y;
  }
  if (lane == kWarp - 1) warp_sums[warp] = x;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += warp_sums[w];
  __syncthreads();  // warp_sums is reused by the next call
  return before + x;
}

struct ChunkBucket {
  uint32_t bucket;
  int rank;
};

// select_detail::find_bucket over a shared histogram of Bins bins, by the block of Threads: thread t
// sums the t-th group of Bins / Threads bins counted from the top, a scan gives the counts above each
// group, and the thread whose group holds the sought rank walks it down.
template <int Bins, int Threads>
__device__ void chunk_find_bucket(const unsigned int* h, int rank, ChunkBucket* found, int* warp_sums) {
  constexpr int kPer = Bins / Threads;
  const int top = Bins - 1 - static_cast<int>(threadIdx.x) * kPer;
  int sum = 0;
  for (int q = 0; q < kPer; ++q) sum += static_cast<int>(h[top - q]);
  int above = tile_inclusive_scan(sum, warp_sums) - sum;
  if (above < rank && rank <= above + sum) {
    for (int q = 0; q < kPer; ++q) {
      const int count = static_cast<int>(h[top - q]);
      if (above + count >= rank) {
        found->bucket = static_cast<uint32_t>(top - q);
        found->rank = rank - above;
        break;
      }
      above += count;
    }
  }
  __syncthreads();
}

// Per chunk: its entries' global indices into indices[c K ..] and values into values[c K ..] (the
// payload's f32 values, or the workspace the codes kernel reads); e = v where dropped, and (Exact)
// e = 0 where sent. The selected counts add up in status->count.
template <bool Exact, int Threads>
__global__ void topk_chunk_kernel(SpanValues v, wire::TopkChunks ch, uint32_t* indices, float* values, float* residual,
                                  EncodeStatus* status) {
  static_assert(kBins % Threads == 0 && 512 % Threads == 0, "bins per thread");
  __shared__ unsigned int h[kBins];
  __shared__ int warp_ints[Threads / kWarp];
  __shared__ ChunkBucket found;
  for (int64_t c = blockIdx.x; c < ch.count; c += gridDim.x) {
    const int64_t start = c * ch.size;
    const auto len = static_cast<int>(ch.size_of(c));
    int rank = static_cast<int>(ch.keep_of(c));
    uint32_t prefix = 0;
    bool non_finite = false;
    for (int level = 1; level <= 3; ++level) {
      for (int b = threadIdx.x; b < kBins; b += blockDim.x) h[b] = 0;
      if (threadIdx.x == 0) found = ChunkBucket{0u, rank};
      __syncthreads();
      for (int i = threadIdx.x; i < len; i += blockDim.x) {
        const uint32_t bits = abs_bits(v(start + i));
        if (level == 1) {
          non_finite = non_finite || bits >= kNonFinite;
          atomicAdd(&h[bits >> 20], 1u);
        } else if (level == 2 && (bits >> 20) == (prefix >> 20)) {
          atomicAdd(&h[(bits >> 9) & 0x7ffu], 1u);
        } else if (level == 3 && (bits & ~0x1ffu) == prefix) {
          atomicAdd(&h[bits & 0x1ffu], 1u);
        }
      }
      __syncthreads();
      if (level == 3)
        chunk_find_bucket<512, Threads>(h, rank, &found, warp_ints);
      else
        chunk_find_bucket<kBins, Threads>(h, rank, &found, warp_ints);
      prefix |= level == 1 ? found.bucket << 20 : (level == 2 ? found.bucket << 9 : found.bucket);
      rank = found.rank;
      __syncthreads();  // found and h are rewritten by the next level
    }
    if (non_finite) atomicOr(&status->non_finite, 1u);
    const uint32_t threshold = prefix;
    const int ties = rank;
    int secondary_seen = 0, selected_seen = 0;
    for (int round = 0; round < len; round += Threads) {
      const int i = round + static_cast<int>(threadIdx.x);
      const float x = i < len ? v(start + i) : 0.0f;
      const uint32_t b = abs_bits(x);
      int total = 0;
      const bool secondary = i < len && b == threshold;
      const int q_rank = block_exclusive_count<Threads>(secondary, warp_ints, total);
      const bool take = secondary && secondary_seen + q_rank < ties;
      secondary_seen += total;
      const bool selected = (i < len && b > threshold) || take;
      const int s_rank = block_exclusive_count<Threads>(selected, warp_ints, total);
      if (selected) {
        const int64_t j = c * ch.keep + selected_seen + s_rank;
        indices[j] = static_cast<uint32_t>(start + i);
        values[j] = x;
      }
      if (residual && i < len && (Exact || !selected)) residual[start + i] = selected ? 0.0f : x;
      selected_seen += total;
    }
    if (threadIdx.x == 0)
      atomicAdd(reinterpret_cast<unsigned long long*>(&status->count), static_cast<unsigned long long>(selected_seen));
    __syncthreads();
  }
}

// Chunks of up to kSmallChunk values, one thread each: the k-th largest |v| is the magnitude with
// fewer than k larger ones and at least k at least as large; then the chunk in index order, ties
// while they last (topk.cpp's compact).
constexpr int kSmallChunk = 32;

template <bool Exact>
__global__ void topk_small_chunk_kernel(SpanValues v, wire::TopkChunks ch, uint32_t* indices, float* values,
                                        float* residual, EncodeStatus* status) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < ch.count;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t start = c * ch.size;
    const auto len = static_cast<int>(ch.size_of(c));
    const auto keep = static_cast<int>(ch.keep_of(c));
    float x[kSmallChunk];
    uint32_t bits[kSmallChunk];
    bool non_finite = false;
    for (int i = 0; i < len; ++i) {
      x[i] = v(start + i);
      bits[i] = abs_bits(x[i]);
      non_finite = non_finite || bits[i] >= kNonFinite;
    }
    uint32_t threshold = 0;
    int above_threshold = 0;
    for (int i = 0; i < len; ++i) {
      int above = 0, same = 0;
      for (int m = 0; m < len; ++m) {
        above += bits[m] > bits[i] ? 1 : 0;
        same += bits[m] == bits[i] ? 1 : 0;
      }
      if (above < keep && keep <= above + same) {
        threshold = bits[i];
        above_threshold = above;
      }
    }
    if (non_finite) atomicOr(&status->non_finite, 1u);
    int ties = keep - above_threshold;
    int64_t j = c * ch.keep;
    for (int i = 0; i < len; ++i) {
      const bool tie = bits[i] == threshold && ties > 0;
      ties -= tie ? 1 : 0;
      const bool selected = bits[i] > threshold || tie;
      if (selected) {
        indices[j] = static_cast<uint32_t>(start + i);
        values[j] = x[i];
        ++j;
      }
      if (residual && (Exact || !selected)) residual[start + i] = selected ? 0.0f : x[i];
    }
    atomicAdd(reinterpret_cast<unsigned long long*>(&status->count), static_cast<unsigned long long>(j - c * ch.keep));
  }
}

// One thread per index word: the local indices (index & (C - 1)) of the entries whose bits fall in
// it, packed in l.index_bits bits LSB first (topk.cpp's pack_indices); bits after the last are zero.
__global__ void topk_pack_indices_kernel(const uint32_t* indices, wire::TopkLayout l, uint32_t* words, int64_t count) {
  const int s = l.index_bits;
  const auto mask = static_cast<uint32_t>(l.chunks.size) - 1u;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; w < count;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bit0 = 32 * w;
    const int64_t last = (bit0 + 32 + s - 1) / s < l.k ? (bit0 + 32 + s - 1) / s : l.k;
    uint32_t word = 0;
    for (int64_t j = bit0 / s; j < last; ++j) {
      const uint32_t field = indices[j] & mask;
      const int64_t at = j * s - bit0;  // in (-s, 32)
      word |= at >= 0 ? field << at : field >> -at;
    }
    words[w] = word;
  }
}

// ---- adaptive ------------------------------------------------------------------------------------

struct Thresholds {
  float pos, neg;
  uint32_t pos_min_bits, neg_min_abs_bits;  // sampled refinement
};

__global__ void exact_thresholds_kernel(const SelectState* state, Thresholds* th) {
  th->pos = bits_float(state->threshold);
  th->neg = -th->pos;
}

__global__ void sample_kernel(SpanValues v, int64_t n, int64_t sample, PhiloxKey key, float* pool) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < sample;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t block = static_cast<uint64_t>(j) / 4;
    const PhiloxBlock b =
        philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), kStage1, kTagSample, key);
    const uint32_t word = b.v[j % 4];
    pool[j] = v(static_cast<int64_t>((static_cast<uint64_t>(word) * static_cast<uint64_t>(n)) >> 32));
  }
}

__global__ void refine_kernel(const float* pool, int64_t sample, const SelectState* state, Thresholds* th) {
  const uint32_t t = state->threshold;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < sample;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = pool[j];
    if (abs_bits(x) < t) continue;
    if (x > 0.0f) atomicMin(&th->pos_min_bits, float_bits(x));
    if (x < 0.0f) atomicMin(&th->neg_min_abs_bits, abs_bits(x));
  }
}

__global__ void sampled_thresholds_kernel(const SelectState* state, Thresholds* th) {
  const float t = bits_float(state->threshold);
  th->pos = th->pos_min_bits != ~0u ? bits_float(th->pos_min_bits) : t;
  th->neg = th->neg_min_abs_bits != ~0u ? -bits_float(th->neg_min_abs_bits) : -t;
}

struct AdaptiveSums {
  SpanValues v;
  const Thresholds* th;
  __device__ Contribution operator()(int64_t, int64_t i) const {
    const float x = v(i);
    const bool p = adaptive_positive(float_bits(x), float_bits(th->pos));
    const bool q = adaptive_negative(float_bits(x), float_bits(th->neg));
    return {masked(x, p), masked(x, q), p ? 1 : 0, q ? 1 : 0, abs_bits(x) >= kNonFinite ? 1u : 0u};
  }
};

struct AdaptiveMeans {
  uint8_t* out;
  const Thresholds* th;
  EncodeStatus* status;
  __device__ void operator()(int64_t c, float pos, float neg, long long count_pos, long long count_neg) const {
    float* head = reinterpret_cast<float*>(out + wire::kHeaderBytes + 12 * static_cast<size_t>(c));
    head[1] = count_pos > 0 ? pos / static_cast<float>(count_pos) : th->pos;
    head[2] = count_neg > 0 ? neg / static_cast<float>(count_neg) : th->neg;
    if (abs_bits(head[1]) >= kNonFinite || abs_bits(head[2]) >= kNonFinite)  // as adaptive.cpp's check
      atomicOr(&status->overflow, 1u);
  }
};

struct AdaptiveFlags {
  SpanValues v;
  const Thresholds* th;
  __device__ uint32_t of(int64_t i) const {
    const uint32_t x = float_bits(v(i));
    return adaptive_positive(x, float_bits(th->pos)) || adaptive_negative(x, float_bits(th->neg)) ? 1u : 0u;
  }
};

template <typename Entry>
struct AdaptiveEmit {
  SpanValues v;
  const Thresholds* th;
  float* residual;
  uint8_t* out;
  Entry* entries;
  int64_t column;
  unsigned long long cap;
  __device__ void operator()(int64_t i, bool candidate, unsigned long long rank) const {
    const int64_t c = i / column, row = i - c * column;
    uint8_t* head = out + wire::kHeaderBytes + 12 * static_cast<size_t>(c);
    // The first entry of each column: the candidates before its first row, up to the cap.
    if (row == 0) *reinterpret_cast<uint32_t*>(head) = static_cast<uint32_t>(rank < cap ? rank : cap);
    const float x = v(i);
    const bool p = adaptive_positive(float_bits(x), float_bits(th->pos));
    if (candidate && rank < cap) {
      entries[rank] = static_cast<Entry>((static_cast<uint32_t>(row) << 1) | (p ? 1u : 0u));
      const float mu = reinterpret_cast<const float*>(head)[p ? 1 : 2];
      if (residual) residual[i] = x - mu;
    } else if (residual) {
      residual[i] = x;
    }
  }
};

// The entry count, the header and the padding, from the compaction's total: the payload is complete
// on the device, whether or not the host reads the count back.
__global__ void adaptive_finish_kernel(uint8_t* out, WireHeaderFields h, size_t count_offset, int entry_bytes,
                                       unsigned long long cap, EncodeStatus* status) {
  const unsigned long long sent = status->count < cap ? status->count : cap;
  status->count = sent;
  *reinterpret_cast<uint32_t*>(out + count_offset) = static_cast<uint32_t>(sent);
  const size_t end = count_offset + 4 + static_cast<size_t>(entry_bytes) * sent;
  h.c = static_cast<uint32_t>(sent);
  h.total = wire::pad8(end);
  store_header(out, h);
  for (size_t i = end; i < h.total; ++i) out[i] = 0;
}

// ---- decode checks ------------------------------------------------------------------------------

__global__ void topk_check_kernel(const uint32_t* indices, int64_t k, int64_t n, EncodeStatus* status) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (indices[j] >= n || (j > 0 && indices[j] <= indices[j - 1])) atomicOr(&status->bad, 1u);
}

// Chunked indices: each entry's local index below its chunk's length and above the one before it in
// the chunk; no bits after the last index.
__global__ void topk_chunk_check_kernel(const uint32_t* words, wire::TopkLayout l, EncodeStatus* status) {
  const wire::TopkChunks& ch = l.chunks;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < l.k;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = ch.chunk_of_entry(j);
    const uint32_t at = wire::topk_index_field(words, j, l.index_bits);
    if (at >= ch.size_of(c) || (j > c * ch.keep && at <= wire::topk_index_field(words, j - 1, l.index_bits)))
      atomicOr(&status->bad, 1u);
  }
  const auto used = static_cast<uint32_t>(static_cast<uint64_t>(l.k) * static_cast<uint64_t>(l.index_bits) % 32);
  if (blockIdx.x == 0 && threadIdx.x == 0 && used != 0 && (words[l.k * l.index_bits / 32] >> used) != 0)
    atomicOr(&status->bad, 1u);
}

// Quantized values: every range finite with 0 <= lo <= hi (float bits: a set sign bit is above
// kNonFinite too), no bits after the last code.
__global__ void topk_ranges_check_kernel(const uint8_t* payload, wire::TopkLayout l, EncodeStatus* status) {
  const auto* ranges = reinterpret_cast<const uint32_t*>(payload + l.ranges);
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < l.groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t lo = ranges[2 * g], hi = ranges[2 * g + 1];
    if (lo >= kNonFinite || hi >= kNonFinite || lo > hi) atomicOr(&status->bad, 1u);
  }
  const auto used = static_cast<uint32_t>(static_cast<size_t>(l.k) * static_cast<size_t>(l.bits) % 8);
  if (blockIdx.x == 0 && threadIdx.x == 0 && used != 0 && (payload[l.end - 1] >> used) != 0) atomicOr(&status->bad, 1u);
}

template <bool Add>
__global__ void topk_scatter_kernel(const uint32_t* words, const float* values, wire::TopkLayout l, float* out) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < l.k;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t i = wire::topk_index(words, l, j);
    out[i] = Add ? out[i] + values[j] : values[j];
  }
}

template <bool Add>
__global__ void topk_quantized_scatter_kernel(const uint8_t* payload, wire::TopkLayout l, float* out) {
  const auto* words = reinterpret_cast<const uint32_t*>(payload + wire::kHeaderBytes);
  const auto* ranges = reinterpret_cast<const float*>(payload + l.ranges);
  const uint32_t top = topk_top_level(l.bits), mask = (1u << l.bits) - 1u;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < l.k;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = j / l.group;
    const float lo = ranges[2 * g], hi = ranges[2 * g + 1], step = topk_step(lo, hi, top);
    const auto bit = static_cast<size_t>(j) * static_cast<size_t>(l.bits);
    const float y = topk_decoded((payload[l.codes + bit / 8] >> (bit % 8)) & mask, lo, hi, step, top, l.bits);
    const uint32_t i = wire::topk_index(words, l, j);
    out[i] = Add ? out[i] + y : y;
  }
}

__device__ __forceinline__ uint32_t column_first(const uint8_t* payload, int64_t c) {
  return *reinterpret_cast<const uint32_t*>(payload + wire::kHeaderBytes + 12 * static_cast<size_t>(c));
}

// The payload's entry count (header field c) where the layout `l` can hold it (l.entries, the most),
// else l.entries: what the kernels may read either way (the check kernel reports the difference).
__device__ __forceinline__ uint32_t adaptive_count(const uint8_t* payload, const wire::AdaptiveLayout& l) {
  const uint32_t c = header_field_c(payload);
  return c <= static_cast<uint64_t>(l.entries) ? c : static_cast<uint32_t>(l.entries);
}

// The count (header field c, at most l.entries) the same in the body, with the length field its
// layout's; every column's offset and means, and its entries' rows. Thread 0 of block 0 makes the
// deferred header check first (the other fields; quant/header_check.h).
template <typename Entry>
__global__ void adaptive_check_kernel(const uint8_t* payload, wire::AdaptiveLayout l, EncodeStatus* status,
                                      HeaderCheck header) {
  check_header_in_kernel(header);
  const auto* entries = reinterpret_cast<const Entry*>(payload + l.entries_offset);
  const uint32_t count = adaptive_count(payload, l);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const size_t total = wire::pad8(l.entries_offset + static_cast<size_t>(l.entry_bytes) * count);
    if (count != header_field_c(payload) || *reinterpret_cast<const uint32_t*>(payload + l.count_offset) != count ||
        header_total(payload) != total)
      atomicOr(&status->bad, 1u);
  }
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < l.columns;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint8_t* head = payload + wire::kHeaderBytes + 12 * static_cast<size_t>(c);
    const uint32_t first = column_first(payload, c);
    const uint32_t previous = c > 0 ? column_first(payload, c - 1) : 0u;
    const uint32_t next = c + 1 < l.columns ? column_first(payload, c + 1) : count;
    const uint32_t mu_pos = *reinterpret_cast<const uint32_t*>(head + 4);
    const uint32_t mu_neg = *reinterpret_cast<const uint32_t*>(head + 8);
    bool bad = (c == 0 && first != 0) || first < previous || first > count || next < first || next > count ||
               (mu_pos & kAbsMask) >= kNonFinite || (mu_neg & kAbsMask) >= kNonFinite;
    if (!bad) {
      int64_t last_row = -1;
      for (uint32_t j = first; j < next && !bad; ++j) {
        const int64_t row = static_cast<int64_t>(entries[j]) >> 1;
        bad = row >= l.column || row <= last_row;
        last_row = row;
      }
    }
    if (bad) atomicOr(&status->bad, 1u);
  }
}

// One thread per entry of the count the payload states (at most l.entries: the grid's). Under
// DeferredChecks this runs before the check is read: a row outside its column is skipped, so that a
// malformed payload writes nothing outside `out`.
template <typename Entry, bool Add>
__global__ void adaptive_scatter_kernel(const uint8_t* payload, wire::AdaptiveLayout l, float* out) {
  const auto* entries = reinterpret_cast<const Entry*>(payload + l.entries_offset);
  const int64_t count = adaptive_count(payload, l);
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < count;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // The column: the last one whose first entry is <= j.
    int64_t lo = 0, hi = l.columns - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (column_first(payload, mid) <= static_cast<uint32_t>(j))
        lo = mid;
      else
        hi = mid - 1;
    }
    const uint32_t e = entries[j];
    if ((e >> 1) >= l.column) continue;
    const float* head = reinterpret_cast<const float*>(payload + wire::kHeaderBytes + 12 * static_cast<size_t>(lo));
    const float mu = e & 1u ? head[1] : head[2];
    float* o = out + lo * l.column + (e >> 1);
    *o = Add ? *o + mu : mu;
  }
}

}  // namespace

namespace {

// The ranges and codes of the k values in index order (indices: their positions in the span).
void topk_quantize_cuda(Context& ctx, const EncodeArgs& a, const wire::TopkLayout& l, const float* values,
                        const uint32_t* indices) {
  constexpr int kThreads = 256;
  cudaStream_t s = stream_of(ctx);
  auto* ranges = reinterpret_cast<uint32_t*>(a.out + l.ranges);
  topk_range_init_kernel<<<grid_for(l.groups, kThreads), kThreads, 0, s>>>(ranges, l.groups);
  topk_range_kernel<<<grid_for(l.k, kThreads), kThreads, 0, s>>>(values, l.k, l.group, ranges);
  const auto code_bytes = static_cast<int64_t>(wire::packed_bytes(l.k, l.bits));
  topk_codes_kernel<<<grid_for(code_bytes, kThreads), kThreads, 0, s>>>(values, indices, l, a.out, a.residual);
  CUDA_CHECK(cudaGetLastError());
}

// chunk: C. One block per chunk selects and compacts (no host round trip: the ties are the block's);
// then the indices are packed and the values coded.
void topk_encode_chunked_cuda(Context& ctx, const EncodeArgs& a, const wire::TopkLayout& l) {
  const bool exact = l.bits == 32;
  const auto k = static_cast<size_t>(l.k);
  const size_t need = 256 + Carver::bytes<uint32_t>(k) + (exact ? 0 : Carver::bytes<float>(k));
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* indices = carver.take<uint32_t>(k);
  auto* values = exact ? reinterpret_cast<float*>(a.out + l.values) : carver.take<float>(k);
  cudaStream_t s = stream_of(ctx);
  const SpanValues v{a.in, a.residual};
  constexpr int kThreads = 256, kNarrow = 64;
  const int grid = l.chunks.count < 65535 ? static_cast<int>(l.chunks.count) : 65535;
  const int threads_grid = grid_for(l.chunks.count, kThreads);
  if (l.chunks.size <= kSmallChunk && exact)
    topk_small_chunk_kernel<true><<<threads_grid, kThreads, 0, s>>>(v, l.chunks, indices, values, a.residual, status);
  else if (l.chunks.size <= kSmallChunk)
    topk_small_chunk_kernel<false><<<threads_grid, kThreads, 0, s>>>(v, l.chunks, indices, values, a.residual, status);
  else if (l.chunks.size <= 256 && exact)
    topk_chunk_kernel<true, kNarrow><<<grid, kNarrow, 0, s>>>(v, l.chunks, indices, values, a.residual, status);
  else if (l.chunks.size <= 256)
    topk_chunk_kernel<false, kNarrow><<<grid, kNarrow, 0, s>>>(v, l.chunks, indices, values, a.residual, status);
  else if (exact)
    topk_chunk_kernel<true, kTileThreads>
        <<<grid, kTileThreads, 0, s>>>(v, l.chunks, indices, values, a.residual, status);
  else
    topk_chunk_kernel<false, kTileThreads>
        <<<grid, kTileThreads, 0, s>>>(v, l.chunks, indices, values, a.residual, status);
  const auto words = static_cast<int64_t>(wire::topk_index_bytes(l.k, l.index_bits) / 4);
  topk_pack_indices_kernel<<<grid_for(words, kThreads), kThreads, 0, s>>>(
      indices, l, reinterpret_cast<uint32_t*>(a.out + wire::kHeaderBytes), words);
  CUDA_CHECK(cudaGetLastError());
  if (!exact) topk_quantize_cuda(ctx, a, l, values, indices);
  check_status(ctx, status, [n = a.n, k = l.k](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("topk encode: the input of {} values holds NaN or Inf", n));
    QT_CHECK_EQ(static_cast<int64_t>(done.count), k, "topk (CUDA): selected values");
  });
}

}  // namespace

void topk_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::TopkLayout& l, const WireHeader& h) {
  cuda_write_header(ctx, a.out, h);
  const int64_t k = l.k;
  if (k == 0) return;
  if (l.index_bits != 32) {
    topk_encode_chunked_cuda(ctx, a, l);
    return;
  }
  const bool exact = l.bits == 32;
  const size_t need =
      256 + select_bytes() + tiles_bytes(a.n) + (exact ? 0 : Carver::bytes<float>(static_cast<size_t>(k)));
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  const SpanValues v{a.in, a.residual};
  const SelectState* state = select_kth(ctx, carver, v, a.n, k, status);
  // The tie quota is on the device: read it back once (the selection is done by then anyway).
  SelectState host{};
  CUDA_CHECK(cudaMemcpyAsync(&host, state, sizeof host, cudaMemcpyDeviceToHost, stream_of(ctx)));
  CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("topk encode: the input of {} values holds NaN or Inf", n));
  });
  const Tiles tiles = make_tiles(carver, a.n);
  auto* indices = reinterpret_cast<uint32_t*>(a.out + wire::kHeaderBytes);
  auto* values = exact ? reinterpret_cast<float*>(a.out + l.values) : carver.take<float>(static_cast<size_t>(k));
  compact(ctx, tiles, TopkFlags{v, state}, a.n, host.ties, TopkEmit{v, a.residual, indices, values, exact}, status);
  if (!exact) topk_quantize_cuda(ctx, a, l, values, indices);
  check_status(ctx, status, [k](const EncodeStatus& done) {
    QT_CHECK_EQ(static_cast<int64_t>(done.count), k, "topk (CUDA): selected values");
  });
}

void topk_decode_cuda(Context& ctx, const uint8_t* payload, int64_t n, const wire::TopkLayout& l, float* out,
                      bool add) {
  constexpr int kThreads = 256;
  const int64_t k = l.k;
  cudaStream_t s = stream_of(ctx);
  const auto* indices = reinterpret_cast<const uint32_t*>(payload + wire::kHeaderBytes);
  if (k > 0) {
    DecodeStatus status(ctx);
    if (l.index_bits == 32)
      topk_check_kernel<<<grid_for(k, kThreads), kThreads, 0, s>>>(indices, k, n, status.get());
    else
      topk_chunk_check_kernel<<<grid_for(k, kThreads), kThreads, 0, s>>>(indices, l, status.get());
    if (l.bits != 32)
      topk_ranges_check_kernel<<<grid_for(l.groups, kThreads), kThreads, 0, s>>>(payload, l, status.get());
    CUDA_CHECK(cudaGetLastError());
    check_status(ctx, status.get(), [](const EncodeStatus& done) {
      if (done.bad)
        wire::bad_payload(QuantMethod::topk,
                          "indices must increase strictly and stay below the value count, ranges be finite with "
                          "0 <= lo <= hi, and the bits after the last code zero");
    });
  }
  if (!add && n > 0) CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * static_cast<size_t>(n), s));
  if (k == 0) return;
  const int grid = grid_for(k, kThreads);
  if (l.bits == 32) {
    const auto* values = reinterpret_cast<const float*>(payload + l.values);
    if (add)
      topk_scatter_kernel<true><<<grid, kThreads, 0, s>>>(indices, values, l, out);
    else
      topk_scatter_kernel<false><<<grid, kThreads, 0, s>>>(indices, values, l, out);
  } else if (add) {
    topk_quantized_scatter_kernel<true><<<grid, kThreads, 0, s>>>(payload, l, out);
  } else {
    topk_quantized_scatter_kernel<false><<<grid, kThreads, 0, s>>>(payload, l, out);
  }
  CUDA_CHECK(cudaGetLastError());
}

std::optional<int64_t> adaptive_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::AdaptiveLayout& bound,
                                            double proportion, int64_t sample, int64_t cap, size_t) {
  WireHeader h;
  h.method = QuantMethod::adaptive;
  h.a = static_cast<uint32_t>(bound.entry_bytes);
  h.b = static_cast<uint32_t>(bound.column);
  h.n = static_cast<uint64_t>(a.n);
  const bool sampled = sample > 0 && a.n > sample;
  const size_t need = 256 + Carver::bytes<Thresholds>(1) + select_bytes() + tiles_bytes(a.n) +
                      group_sums_bytes(a.n, bound.column) +
                      (sampled ? Carver::bytes<float>(static_cast<size_t>(sample)) : 0);
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* th = carver.take<Thresholds>(1);
  cudaStream_t s = stream_of(ctx);
  constexpr int kThreads = 256;
  const SpanValues v{a.in, a.residual};
  if (a.n > 0) {
    if (!sampled) {
      const SelectState* state = select_kth(ctx, carver, v, a.n, wire::count_for_proportion(proportion, a.n), status);
      exact_thresholds_kernel<<<1, 1, 0, s>>>(state, th);
    } else {
      auto* pool = carver.take<float>(static_cast<size_t>(sample));
      sample_kernel<<<grid_for(sample, kThreads), kThreads, 0, s>>>(v, a.n, sample, a.key, pool);
      const SelectState* state =
          select_kth(ctx, carver, ArrayValues{pool}, sample, wire::count_for_proportion(proportion, sample), status);
      CUDA_CHECK(cudaMemsetAsync(&th->pos_min_bits, 0xff, 2 * sizeof(uint32_t), s));
      refine_kernel<<<grid_for(sample, kThreads), kThreads, 0, s>>>(pool, sample, state, th);
      sampled_thresholds_kernel<<<1, 1, 0, s>>>(state, th);
    }
    CUDA_CHECK(cudaGetLastError());
    const GroupSumsPlan plan = make_group_sums_plan(carver, a.n, bound.column, status);
    launch_group_sums(ctx, plan, AdaptiveSums{v, th}, AdaptiveMeans{a.out, th, status});
    const Tiles tiles = make_tiles(carver, a.n);
    uint8_t* entries = a.out + bound.entries_offset;
    if (bound.entry_bytes == 2)
      compact(ctx, tiles, AdaptiveFlags{v, th}, a.n, 0ull,
              AdaptiveEmit<uint16_t>{v, th, a.residual, a.out, reinterpret_cast<uint16_t*>(entries), bound.column,
                                     static_cast<unsigned long long>(cap)},
              status);
    else
      compact(ctx, tiles, AdaptiveFlags{v, th}, a.n, 0ull,
              AdaptiveEmit<uint32_t>{v, th, a.residual, a.out, reinterpret_cast<uint32_t*>(entries), bound.column,
                                     static_cast<unsigned long long>(cap)},
              status);
  }
  adaptive_finish_kernel<<<1, 1, 0, s>>>(a.out, fields_of(h), bound.count_offset, bound.entry_bytes,
                                         static_cast<unsigned long long>(cap), status);
  CUDA_CHECK(cudaGetLastError());
  const auto check = [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("adaptive encode: the input of {} values holds NaN or Inf", n));
    if (done.overflow)
      throw NonFiniteInputError(fmt::format(
          "adaptive encode: the sum of the values sent from a column of the {} values exceeds the float range", n));
  };
  // In a slot the count stays in the payload; else the payload's size is the count: read at once.
  if (a.slot) {
    check_status(ctx, status, check);
    return std::nullopt;
  }
  const EncodeStatus done = read_status(ctx, status);
  check(done);
  return static_cast<int64_t>(done.count);
}

void adaptive_decode_cuda(Context& ctx, const wire::AdaptiveLayout& l, const uint8_t* payload, float* out, bool add) {
  constexpr int kThreads = 256;
  DecodeStatus status(ctx);
  cudaStream_t s = stream_of(ctx);
  const int grid = grid_for(l.columns > 0 ? l.columns : 1, kThreads);
  const HeaderCheck header = take_header_check(ctx);  // made by the check kernel
  if (l.entry_bytes == 2)
    adaptive_check_kernel<uint16_t><<<grid, kThreads, 0, s>>>(payload, l, status.get(), header);
  else
    adaptive_check_kernel<uint32_t><<<grid, kThreads, 0, s>>>(payload, l, status.get(), header);
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status.get(), [](const EncodeStatus& done) {
    if (done.bad)
      wire::bad_payload(QuantMethod::adaptive,
                        "the entry count or length field, column offsets, means or entries are out of range");
  });
  if (!add && l.n > 0) CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * static_cast<size_t>(l.n), s));
  if (l.entries == 0) return;
  const int egrid = grid_for(l.entries, kThreads);
  if (l.entry_bytes == 2 && add)
    adaptive_scatter_kernel<uint16_t, true><<<egrid, kThreads, 0, s>>>(payload, l, out);
  else if (l.entry_bytes == 2)
    adaptive_scatter_kernel<uint16_t, false><<<egrid, kThreads, 0, s>>>(payload, l, out);
  else if (add)
    adaptive_scatter_kernel<uint32_t, true><<<egrid, kThreads, 0, s>>>(payload, l, out);
  else
    adaptive_scatter_kernel<uint32_t, false><<<egrid, kThreads, 0, s>>>(payload, l, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
