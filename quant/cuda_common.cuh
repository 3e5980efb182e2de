// Device-side building blocks of the quantizer kernels: the deterministic warp sums of
// quant/numerics.h, the status word encoders report through, workspace carving, and the launcher
// conventions (ctx's stream, CUDA_CHECK(cudaGetLastError())). Internal to quant/; CUDA sources only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "framework/core/check.h"
#include "framework/core/context.h"
#include "framework/core/cuda_context.h"
#include "quant/deferred_checks.h"
#include "quant/encode_status.h"
#include "quant/header_check.h"
#include "quant/numerics.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {

constexpr unsigned kFullMask = 0xffffffffu;

// The header as kernel arguments (plain integers).
struct WireHeaderFields {
  uint8_t method, version;
  uint32_t a, b, c;
  unsigned long long n, total;
};
constexpr int kWarp = 32;

// EncodeStatus (quant/encode_status.h): what the kernels report; check_status below reads it.

// Carves 256-byte aligned pieces out of one workspace allocation.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* take(size_t count) {
    T* p = reinterpret_cast<T*>(base_ + used_);
    used_ += (count * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  size_t used() const { return used_; }
  // The bytes a sequence of take<T>(counts) needs, for sizing the workspace first.
  template <typename T>
  static size_t bytes(size_t count) {
    return (count * sizeof(T) + 255) / 256 * 256;
  }

 private:
  char* base_;
  size_t used_ = 0;
};

inline cudaStream_t stream_of(Context& ctx) { return ctx.cuda().stream; }

inline WireHeaderFields fields_of(const WireHeader& h) {
  return {static_cast<uint8_t>(h.method), h.version, h.a, h.b, h.c, h.n, h.total};
}

// Grid for a grid-stride loop over `work` items with `threads` per block.
inline int grid_for(int64_t work, int threads) { return blocks_for(work, threads); }

// The lane fold of quant/numerics.h: after the loop lane 0 holds lanes[0] of fold_lanes().
__device__ __forceinline__ float warp_fold(float x) {
  for (int off = kWarp / 2; off >= 1; off /= 2) x = x + __shfl_xor_sync(kFullMask, x, off);
  return x;
}

__device__ __forceinline__ uint32_t warp_max_u32(uint32_t x) {
  for (int off = kWarp / 2; off >= 1; off /= 2) {
    const uint32_t y = __shfl_xor_sync(kFullMask, x, off);
    x = y > x ? y : x;
  }
  return x;
}

__device__ __forceinline__ uint32_t warp_or_u32(uint32_t x) {
  for (int off = kWarp / 2; off >= 1; off /= 2) x |= __shfl_xor_sync(kFullMask, x, off);
  return x;
}

__device__ __forceinline__ long long warp_sum_ll(long long x) {
  for (int off = kWarp / 2; off >= 1; off /= 2) x += __shfl_xor_sync(kFullMask, x, off);
  return x;
}

// ---- Streaming kernels: 16-byte vectors ----------------------------------------------------------
// The codecs that touch each value once stream it as float4 (LDG.E.128 / STG.E.128): a block takes a
// tile of kTileVecs float4s and thread t the vectors t, t + kStreamThreads, ... of it, so that every
// load instruction of a warp reads 512 contiguous bytes (whole sectors, no reliance on L1 to catch
// the rest) and each thread has kStreamUnroll loads in flight. The grid is one block per tile (the
// loops stride by the grid in case blocks_for's cap bites): 4096 blocks at 16M values, about four
// waves of an H100's 132 SMs at 8 blocks each, so no device query is needed and the last wave's
// imbalance is small. tools/check_vector_loads.py (ctest quant_vector_loads) holds them to it.
// Full unrolling of a tile's loops, so that x[kStreamUnroll] and the per-value arrays stay in
// registers (left to nvcc, a heavy body such as mx's with Philox rounding kept them in local memory).
// g++ (the emulator) has no such pragma.
#if defined(__CUDACC__)
#define QT_UNROLL _Pragma("unroll")
#else
#define QT_UNROLL
#endif
constexpr int kStreamThreads = 256;
constexpr int kStreamUnroll = 4;
constexpr int64_t kTileVecs = int64_t{kStreamThreads} * kStreamUnroll;

inline int stream_grid(int64_t vecs) { return blocks_for(vecs, static_cast<int>(kTileVecs)); }

// Whether p is a multiple of `bytes` (a null pointer, such as an absent residual, is): the host's
// cheap choice between a kernel's vector path and its scalar one. Tensors from the allocator and
// Carver pieces are 256-byte aligned; a span of a tensor, or a payload (8-byte aligned, its body at
// offset 32), need not be.
inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

__device__ __forceinline__ float4 load4(const float* __restrict__ p, int64_t v) {
  return reinterpret_cast<const float4*>(p)[v];
}
__device__ __forceinline__ void store4(float* __restrict__ p, int64_t v, float4 x) {
  reinterpret_cast<float4*>(p)[v] = x;
}
// in + residual (each lane one float add, as the scalar paths compute it).
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
// A thread's float4s of a tile: x[k] = float4 v0 + k * kStreamThreads (plus the residual's with Ef),
// zero past `vecs`. Every load is issued before any is used: kStreamUnroll loads in flight per thread.
template <bool Ef>
__device__ __forceinline__ void load_tile(const float* __restrict__ in, const float* __restrict__ residual, int64_t v0,
                                          int64_t vecs, float4 (&x)[kStreamUnroll]) {
  QT_UNROLL
  for (int k = 0; k < kStreamUnroll; ++k) {
    const int64_t v = v0 + k * kStreamThreads;
    x[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (v < vecs) x[k] = Ef ? add4(load4(in, v), load4(residual, v)) : load4(in, v);
  }
}
// Writes float4 v of a decode's output: the decoded values y, or (decode_add) acc + y, acc being the
// output's values before.
template <bool Add>
__device__ __forceinline__ void store_decoded(float* __restrict__ out, int64_t v, float4 acc, const float (&y)[4]) {
  store4(
      out, v,
      Add ? make_float4(acc.x + y[0], acc.y + y[1], acc.z + y[2], acc.w + y[3]) : make_float4(y[0], y[1], y[2], y[3]));
}
__device__ __forceinline__ uint32_t max4_abs_bits(float4 a) {
  const uint32_t x = abs_bits(a.x) > abs_bits(a.y) ? abs_bits(a.x) : abs_bits(a.y);
  const uint32_t y = abs_bits(a.z) > abs_bits(a.w) ? abs_bits(a.z) : abs_bits(a.w);
  return x > y ? x : y;
}

// The max of x over the block's Threads threads, valid in thread 0 (every thread must call it; it
// ends with a barrier, so a loop may call it again): one shared-memory step instead of an atomic
// per warp.
template <int Threads>
__device__ __forceinline__ uint32_t block_max_u32(uint32_t x) {
  static_assert(Threads % kWarp == 0 && Threads / kWarp <= kWarp, "a warp folds the warps' maxima");
  __shared__ uint32_t warp_max[Threads / kWarp];
  const int lane = static_cast<int>(threadIdx.x % kWarp), warp = static_cast<int>(threadIdx.x / kWarp);
  x = warp_max_u32(x);
  if (lane == 0) warp_max[warp] = x;
  __syncthreads();
  if (warp == 0) x = warp_max_u32(lane < Threads / kWarp ? warp_max[lane] : 0u);
  __syncthreads();
  return x;
}

// Whether the calling block is the last of its grid to get here (the threadFenceReduction pattern of
// the CUDA programming guide): every thread of every block calls it once, after the writes that the
// last block is to read, which then reads them through volatile pointers (not a stale L1 line). It
// folds what needs every block's part into the same launch instead of a kernel of its own; the
// last block folds the parts in a fixed order, so the result does not depend on which block that is.
// `arrived` must be 0 when the kernel starts (an earlier kernel of the launcher zeroes it), and the
// last block sets it back to 0.
// (A template, as block_max_u32: the emulator's static __shared__ in a plain inline function
// conflicts with the others' section.)
template <int = 0>
__device__ __forceinline__ bool last_block_to_arrive(unsigned int* arrived) {
  __shared__ uint32_t last;
  __threadfence();  // this thread's writes are visible device-wide before its block counts itself
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(arrived, 1u) == gridDim.x - 1 ? 1u : 0u;
    if (last != 0u) *arrived = 0u;
  }
  __syncthreads();
  return last != 0u;
}

// A 32-value sign word from 8 consecutive lanes of a warp, lane sub holding the bits of values
// 4 sub .. 4 sub + 3 in `nibble`: every lane of the group gets the word (bit j = value j, LSB first,
// as a ballot over 32 lanes writes it). Every lane of the warp must call it.
__device__ __forceinline__ uint32_t sign_word_of_group(uint32_t nibble) {
  uint32_t x = nibble << (4 * (threadIdx.x % 8));
  for (int off = 4; off >= 1; off /= 2) x |= __shfl_xor_sync(kFullMask, x, off);
  return x;
}

// The bits of a float4's values that are not negative (!(v < 0): +0, -0 and NaN count as positive,
// as the CPU's loops decide), value j at bit j.
__device__ __forceinline__ uint32_t nonnegative_bits4(float4 a) {
  return (a.x < 0.0f ? 0u : 1u) | (a.y < 0.0f ? 0u : 2u) | (a.z < 0.0f ? 0u : 4u) | (a.w < 0.0f ? 0u : 8u);
}

// The max |v| bits of each bucket a tile's float4s x (thread's first v0, the span's vecs float4s)
// touch, into shared slots (slot s holds bucket first_b + s; zeroed before, complete after a
// __syncthreads()): a warp whose valid float4s share a bucket folds them by shuffles and one lane
// takes the slot, otherwise each lane takes its own bucket's (atomicMax in shared memory). Buckets
// of a multiple of 4 values (a float4 lies in one). bucket_max_vec_kernel and qsgd's fused encode.
__device__ __forceinline__ void tile_bucket_maxima(const float4 (&x)[kStreamUnroll], int64_t v0, int64_t vecs,
                                                   int64_t bucket, int64_t first_b, uint32_t* slot) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  QT_UNROLL
  for (int k = 0; k < kStreamUnroll; ++k) {
    const int64_t v = v0 + k * kStreamThreads;
    const bool valid = v < vecs;
    const int s = valid ? static_cast<int>(4 * v / bucket - first_b) : 0;
    uint32_t m = valid ? max4_abs_bits(x[k]) : 0u;
    const int s0 = __shfl_sync(kFullMask, s, 0);
    if (__all_sync(kFullMask, valid && s == s0)) {  // warp-uniform
      m = warp_max_u32(m);
      if (lane == 0 && m > 0) atomicMax(&slot[s0], m);
    } else if (m > 0) {
      atomicMax(&slot[s], m);
    }
  }
}

// A warp's chunk sum of value(i) over i in [0, len) (len <= kSumChunk), the lane rule of
// quant/numerics.h: every lane returns the folded sum.
template <typename F>
__device__ __forceinline__ float warp_chunk_sum(F value, int64_t len) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  float s = 0.0f;
  for (int64_t t = lane; t < len; t += kWarp) s += value(t);
  return warp_fold(s);
}

// The final value of det_sums (quant/det_sum.h) from `chunks` level-1 sums p[0..chunks): a warp sums
// groups of kSumChunk of them, then (if there are several groups) the group sums.
template <typename Partials>
__device__ __forceinline__ float warp_fold_partials(Partials p, int64_t chunks) {
  if (chunks == 1) return p[0];
  float level2 = 0.0f;  // lane j keeps level-2 sum j (at most 128 of them, 4 per lane)
  float l2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t n2 = 0;
  for (int64_t first = 0; first < chunks; first += kSumChunk, ++n2) {
    const int64_t count = chunks - first < kSumChunk ? chunks - first : kSumChunk;
    const float s = warp_chunk_sum([p, first](int64_t i) { return p[first + i]; }, count);
    const int lane = static_cast<int>(threadIdx.x % kWarp);
    if (lane == static_cast<int>(n2 % kWarp)) l2[n2 / kWarp] = s;
  }
  if (n2 == 1) return __shfl_sync(kFullMask, l2[0], 0);
  // chunk_sum over the n2 level-2 sums: lane j adds sums j, j + 32, ... in order.
  for (int r = 0; r < 4; ++r)
    if (r * kWarp + static_cast<int>(threadIdx.x % kWarp) < n2) level2 += l2[r];
  return warp_fold(level2);
}

// A status word for a decode (which has no QuantState): a slot of the active DeferredChecks, or a
// stream-ordered allocation, so steady-state decodes reuse the pool instead of calling cudaMalloc.
class DecodeStatus {
 public:
  explicit DecodeStatus(Context& ctx) : stream_(stream_of(ctx)) {
    if (DeferredChecks* deferred = DeferredChecks::active(ctx)) {
      status_ = deferred->take_slot();
      return;
    }
    owned_ = true;
    CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&status_), sizeof(EncodeStatus), stream_));
    CUDA_CHECK(cudaMemsetAsync(status_, 0, sizeof(EncodeStatus), stream_));
  }
  ~DecodeStatus() {
    if (owned_) cudaFreeAsync(status_, stream_);  // teardown errors are not actionable
  }
  DecodeStatus(const DecodeStatus&) = delete;
  DecodeStatus& operator=(const DecodeStatus&) = delete;
  EncodeStatus* get() { return status_; }

 private:
  cudaStream_t stream_;
  EncodeStatus* status_ = nullptr;
  bool owned_ = false;
};

// Field b of a payload's header (bytes 24-27; the payload is 4-byte aligned): the scale of the
// methods whose shape_header() leaves it to the data (Quantizer::header_b_from_data()), which their
// decoders read here instead of from a header copied back to the host.
constexpr unsigned kHeaderFieldB = 24;
__device__ __forceinline__ uint32_t header_field_b(const uint8_t* payload) {
  return *reinterpret_cast<const uint32_t*>(payload + kHeaderFieldB);
}
// The length field (bytes 16-23): adaptive's decoder checks it against the count it reads.
constexpr unsigned kHeaderTotal = 16;
__device__ __forceinline__ unsigned long long header_total(const uint8_t* payload) {
  return *reinterpret_cast<const unsigned long long*>(payload + kHeaderTotal);
}
// Field c (bytes 28-31): randomk's key's high word, adaptive's entry count.
constexpr unsigned kHeaderFieldC = 28;
__device__ __forceinline__ uint32_t header_field_c(const uint8_t* payload) {
  return *reinterpret_cast<const uint32_t*>(payload + kHeaderFieldC);
}

// Makes a header check (quant/header_check.h) in thread 0 of block 0: a decode kernel calls it first,
// so that the check needs no launch of its own (32 byte compares: nothing next to the decode).
__device__ __forceinline__ void check_header_in_kernel(const HeaderCheck& check) {
  if (check.slot == nullptr || blockIdx.x != 0 || threadIdx.x != 0) return;
  bool differs = false;
  for (unsigned i = 0; i < wire::kHeaderBytes; ++i) {
    const bool compared = ((check.from_data >> i) & 1u) == 0;
    differs = differs || (compared && check.payload[i] != check.expected[i]);
  }
  if (differs) atomicOr(&check.slot->bad, 1u);
}

// The header check Quantizer's decode offered for the decode being launched (DeferredChecks), for its
// decode kernel to make (check_header_in_kernel); empty (nothing to check) without one.
inline HeaderCheck take_header_check(Context& ctx) {
  DeferredChecks* deferred = DeferredChecks::active(ctx);
  return deferred != nullptr ? deferred->take_header_check() : HeaderCheck{};
}

// A scale in header field b that must be a finite float >= 0 (dettmers8's, efsign's), read by the
// decode kernel; with a status (field_b_scale_status), block 0 reports a field that is not.
__device__ __forceinline__ float checked_field_b_scale(const uint8_t* payload, EncodeStatus* status) {
  const uint32_t bits = header_field_b(payload);
  if (status != nullptr && blockIdx.x == 0 && threadIdx.x == 0 && bits >= kNonFinite) atomicOr(&status->bad, 1u);
  return bits_float(bits);
}

// Writes a header whose fields the host knows (thread 0 of block 0 of any kernel may call it).
__device__ __forceinline__ void store_header(uint8_t* out, const WireHeaderFields& h) {
  out[0] = 'Q';
  out[1] = 'T';
  out[2] = h.method;
  out[3] = h.version;
  *reinterpret_cast<uint32_t*>(out + 4) = h.a;
  *reinterpret_cast<unsigned long long*>(out + 8) = h.n;
  *reinterpret_cast<unsigned long long*>(out + 16) = h.total;
  *reinterpret_cast<uint32_t*>(out + 24) = h.b;
  *reinterpret_cast<uint32_t*>(out + 28) = h.c;
}

// ---- per-group sums in the deterministic order ------------------------------------------------------
// Groups are consecutive runs of `group` values of a span of n (the last one may be shorter): onebit's
// columns or buckets, adaptive's columns, qsgd's buckets. Each value contributes to two masked sums
// and two counts; finish(g, sum0, sum1, count0, count1) gets each group's totals (on lane 0 of a
// warp), exactly det_sums<2> of quant/det_sum.h.
struct Contribution {
  float s0, s1;
  int c0, c1;
  uint32_t bad;  // NaN/Inf seen
};

struct GroupSumsPlan {
  int64_t n, group, groups;
  int64_t chunks_per_group;  // of the longest group
  float* p0;                 // level-1 partial sums [groups * chunks_per_group] (unused when 1 chunk)
  float* p1;
  long long* q0;
  long long* q1;
  EncodeStatus* status;
  // With a counter (zero when the sums' kernel starts: with_arrival_counter), the level-1 kernel's
  // last block folds the chunk sums itself: one launch instead of two.
  unsigned int* arrived;
};

// One warp folds group g's chunk sums (level 2) and finishes it; P reads the partials (plain, or
// volatile in a last block).
template <typename P, typename Q, typename Finish>
__device__ __forceinline__ void fold_group(const GroupSumsPlan& plan, P p0, P p1, Q q0, Q q1, int64_t g,
                                           Finish& finish) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t start = g * plan.group;
  const int64_t glen = plan.n - start < plan.group ? plan.n - start : plan.group;
  const int64_t chunks = (glen + kSumChunk - 1) / kSumChunk;
  const int64_t first = g * plan.chunks_per_group;
  const float s0 = warp_fold_partials(p0 + first, chunks);
  const float s1 = warp_fold_partials(p1 + first, chunks);
  long long c0 = 0, c1 = 0;
  for (int64_t c = lane; c < chunks; c += kWarp) {
    c0 += q0[first + c];
    c1 += q1[first + c];
  }
  c0 = warp_sum_ll(c0);
  c1 = warp_sum_ll(c1);
  if (lane == 0) finish(g, s0, s1, c0, c1);
}

// Level 1: one warp per (group, chunk). With one chunk per group it finishes the group directly.
template <typename F, typename Finish>
__global__ void group_chunk_sums_kernel(GroupSumsPlan plan, F f, Finish finish) {
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = warps_per_block * gridDim.x;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t items = plan.groups * plan.chunks_per_group;
  for (int64_t w = blockIdx.x * warps_per_block + threadIdx.x / kWarp; w < items; w += stride) {
    const int64_t g = w / plan.chunks_per_group, c = w % plan.chunks_per_group;
    const int64_t start = g * plan.group;
    const int64_t glen = plan.n - start < plan.group ? plan.n - start : plan.group;
    const int64_t base = c * kSumChunk;
    if (base >= glen) continue;  // the last group has fewer chunks (warp-uniform)
    const int64_t len = glen - base < kSumChunk ? glen - base : kSumChunk;
    float s0 = 0.0f, s1 = 0.0f;
    long long c0 = 0, c1 = 0;
    uint32_t bad = 0;
    for (int64_t t = lane; t < len; t += kWarp) {
      const Contribution k = f(g, start + base + t);
      s0 += k.s0;
      s1 += k.s1;
      c0 += k.c0;
      c1 += k.c1;
      bad |= k.bad;
    }
    s0 = warp_fold(s0);
    s1 = warp_fold(s1);
    c0 = warp_sum_ll(c0);
    c1 = warp_sum_ll(c1);
    bad = warp_or_u32(bad);
    if (lane == 0) {
      if (bad) atomicOr(&plan.status->non_finite, 1u);
      if (plan.chunks_per_group == 1) {
        finish(g, s0, s1, c0, c1);
      } else {
        plan.p0[w] = s0;
        plan.p1[w] = s1;
        plan.q0[w] = c0;
        plan.q1[w] = c1;
      }
    }
  }
  if (plan.arrived != nullptr && plan.chunks_per_group > 1 && last_block_to_arrive(plan.arrived)) {
    const int64_t warps = blockDim.x / kWarp;
    for (int64_t g = threadIdx.x / kWarp; g < plan.groups; g += warps)
      fold_group(plan, static_cast<const volatile float*>(plan.p0), static_cast<const volatile float*>(plan.p1),
                 static_cast<const volatile long long*>(plan.q0), static_cast<const volatile long long*>(plan.q1), g,
                 finish);
  }
}

// Level 2 (only when groups span several chunks): one warp per group folds its chunk sums.
template <typename Finish>
__global__ void group_fold_kernel(GroupSumsPlan plan, Finish finish) {
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = warps_per_block * gridDim.x;
  for (int64_t g = blockIdx.x * warps_per_block + threadIdx.x / kWarp; g < plan.groups; g += stride)
    fold_group(plan, static_cast<const float*>(plan.p0), static_cast<const float*>(plan.p1),
               static_cast<const long long*>(plan.q0), static_cast<const long long*>(plan.q1), g, finish);
}

// Workspace bytes of a plan (partials only when groups are longer than a chunk).
inline size_t group_sums_bytes(int64_t n, int64_t group) {
  const int64_t groups = (n + group - 1) / group;
  const int64_t cpg = (group + kSumChunk - 1) / kSumChunk;
  if (cpg <= 1) return 0;
  const size_t items = static_cast<size_t>(groups * cpg);
  return 2 * Carver::bytes<float>(items) + 2 * Carver::bytes<long long>(items);
}

inline GroupSumsPlan make_group_sums_plan(Carver& carver, int64_t n, int64_t group, EncodeStatus* status) {
  GroupSumsPlan p{};
  p.n = n;
  p.group = group;
  p.groups = (n + group - 1) / group;
  p.chunks_per_group = (group + kSumChunk - 1) / kSumChunk;
  if (p.chunks_per_group > 1) {
    const size_t items = static_cast<size_t>(p.groups * p.chunks_per_group);
    p.p0 = carver.take<float>(items);
    p.p1 = carver.take<float>(items);
    p.q0 = carver.take<long long>(items);
    p.q1 = carver.take<long long>(items);
  }
  p.status = status;
  return p;
}

// The plan with its fold in the level-1 kernel's last block (`arrived`: zero when the kernel starts),
// where the groups are few enough for one block to fold them all (terngrad's default is one bucket).
inline GroupSumsPlan with_arrival_counter(GroupSumsPlan plan, unsigned int* arrived) {
  constexpr int64_t kLastBlockGroups = 64;
  if (plan.groups <= kLastBlockGroups) plan.arrived = arrived;
  return plan;
}

template <typename F, typename Finish>
void launch_group_sums(Context& ctx, const GroupSumsPlan& plan, F f, Finish finish) {
  if (plan.groups == 0) return;
  constexpr int kThreads = 256;
  const int64_t items = plan.groups * plan.chunks_per_group;
  group_chunk_sums_kernel<<<grid_for(items * kWarp, kThreads), kThreads, 0, stream_of(ctx)>>>(plan, f, finish);
  CUDA_CHECK(cudaGetLastError());
  if (plan.chunks_per_group > 1 && plan.arrived == nullptr) {
    group_fold_kernel<<<grid_for(plan.groups * kWarp, kThreads), kThreads, 0, stream_of(ctx)>>>(plan, finish);
    CUDA_CHECK(cudaGetLastError());
  }
}

// What the max pass also does in its first thread, so that these need no launch of their own: the
// payload's header (when `header_out` is set), and zeroing the arrival counters of the launcher's
// later kernels (last_block_to_arrive).
struct MaxPassExtras {
  uint8_t* header_out = nullptr;
  WireHeaderFields header{};
  unsigned int* zero = nullptr;
  int zero_count = 0;
};

// The max |in + residual| of each bucket of `bucket` values (the last one may be shorter) as float
// bits, an integer max and so order-free: max_bits is zeroed first, a non-finite value sets
// status->non_finite (common.cu). qsgd and terngrad.
void cuda_bucket_max_bits(Context& ctx, const float* in, const float* residual, int64_t n, int64_t bucket,
                          int64_t buckets, uint32_t* max_bits, EncodeStatus* status, const MaxPassExtras& extras = {});
// scales[b] = the float of max_bits[b] (common.cu).
void cuda_max_scales(Context& ctx, const uint32_t* max_bits, int64_t buckets, float* scales);

// Reads an EncodeStatus back (synchronizing ctx's stream). For what must come back at once (a count
// the host needs); checks go through check_status.
inline EncodeStatus read_status(Context& ctx, const EncodeStatus* status) {
  EncodeStatus host{};
  CUDA_CHECK(cudaMemcpyAsync(&host, status, sizeof host, cudaMemcpyDeviceToHost, stream_of(ctx)));
  CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  return host;
}

// The status word every launcher starts from: carved first from the workspace and zeroed, or, under
// DeferredChecks, a slot of its area (the workspace's word is still carved: the layout stays the same).
inline EncodeStatus* fresh_status(Context& ctx, Carver& carver) {
  auto* status = carver.take<EncodeStatus>(1);
  if (DeferredChecks* deferred = DeferredChecks::active(ctx)) return deferred->take_slot();
  CUDA_CHECK(cudaMemsetAsync(status, 0, sizeof(EncodeStatus), stream_of(ctx)));
  return status;
}

// Runs `check` (which throws the launcher's error) on the status once the kernels are done: at once,
// reading it back (a wait for the stream), or at the active DeferredChecks' settle().
template <typename Check>
void check_status(Context& ctx, EncodeStatus* status, Check check) {
  if (DeferredChecks* deferred = DeferredChecks::active(ctx)) {
    deferred->defer(status, std::move(check));
    return;
  }
  check(read_status(ctx, status));
}

// Where a decoder's payload checks run. Under DeferredChecks the decode kernels test what they read
// (one launch; a bad payload's values are written before settle() reports it, as the deferred header
// check allows): returns the status word for them. Otherwise `launch_check(status)` launches the
// separate check kernel and its status is read back at once, so that a malformed payload throws
// before anything is written: returns null (the decode kernels test nothing). `check` raises the error.
template <typename LaunchCheck, typename Check>
EncodeStatus* decoder_checks(Context& ctx, DecodeStatus& status, LaunchCheck launch_check, Check check) {
  const bool deferred = DeferredChecks::active(ctx) != nullptr;
  if (!deferred) {
    launch_check(status.get());
    CUDA_CHECK(cudaGetLastError());
  }
  check_status(ctx, status.get(), std::move(check));
  return deferred ? status.get() : nullptr;
}

// The status a decode kernel checks its field b scale into (checked_field_b_scale): under
// DeferredChecks, where the receiver predicted the header and read nothing back, a slot checked at
// settle (held in `owner`); else null, as the host read and checked the whole header before the call.
inline EncodeStatus* field_b_scale_status(Context& ctx, std::optional<DecodeStatus>& owner, QuantMethod method) {
  if (DeferredChecks::active(ctx) == nullptr) return nullptr;
  owner.emplace(ctx);
  check_status(ctx, owner->get(), [method](const EncodeStatus& done) {
    if (done.bad) wire::bad_payload(method, "the scale is not a finite float >= 0");
  });
  return owner->get();
}

}  // namespace qtrain::quant_detail
