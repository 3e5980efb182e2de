// qsgd kernels: per-bucket max (integer max of float bits, order-free) and, for l2, the deterministic
// sum of squares; then the codes, each value rounded with the Philox stream of quant/numerics.h
// exactly as qsgd.cpp's chunk loop and tie fix-up do. Encode and decode stream (cuda_common.cuh):
// float4 loads of input and residual, codes stored as 32-bit words (lanes joined by shuffles at 2 and
// 4 bits), float4 stores of the decoded values; spans not 16-byte aligned, and buckets that split a
// word's float4s (encode) or a float4 (decode), take one thread per word (encode) or value (decode).
// Per value encode reads 4 bytes (8 with a residual) and writes bits/8 (+ 4); decode reads bits/8
// (+ 4 with add) and writes 4. With the max norm and buckets that divide a tile (the defaults of 2, 4
// and 8 bits), the encode is one kernel that reads the input once (encode_fused_kernel); else the
// maxima (and l2 sums) are a pass of their own before the codes.
#include "quant/cuda_common.cuh"
#include "quant/qsgd_cuda.h"
#include "quant/qsgd_wire.h"

namespace qtrain::quant_detail {
namespace {

// ||v||_2 = max * sqrt(sum((v / max)^2)) per bucket, as qsgd.cpp's Bucket::l2().
struct SquaresOverMax {
  const float* in;
  const float* residual;
  const uint32_t* max_bits;
  __device__ Contribution operator()(int64_t b, int64_t i) const {
    const uint32_t m = max_bits[b];
    if (m < 0x00800000u) return {0.0f, 0.0f, 0, 0, 0u};
    const float r = l2_inverse(m);
    const float x = (residual ? in[i] + residual[i] : in[i]) * r;
    return {x * x, 0.0f, 0, 0, 0u};
  }
};

struct L2Scale {
  const uint32_t* max_bits;
  float* scales;
  EncodeStatus* status;
  __device__ void operator()(int64_t b, float sum, float, long long, long long) const {
    const uint32_t m = max_bits[b];
    scales[b] = m < 0x00800000u ? bits_float(m) : l2_norm(m, sqrtf(sum));
    if (float_bits(scales[b]) >= kNonFinite) atomicOr(&status->overflow, 1u);  // as qsgd.cpp's check
  }
};

// Word `word` of bucket b (its values' codes, LSB first, and residuals), one value at a time.
template <int Bits>
__device__ __forceinline__ void encode_word(const float* __restrict__ in, float* __restrict__ residual,
                                            const wire::QsgdLayout& l, PhiloxKey key, uint8_t* __restrict__ out,
                                            int64_t b, int64_t word) {
  constexpr int kPer = 32 / Bits;
  constexpr int32_t kLevels = (1 << (Bits - 1)) - 1;
  constexpr uint32_t kSign = 1u << (Bits - 1);
  const float* scales = reinterpret_cast<const float*>(out + wire::kHeaderBytes);
  const int64_t len = l.len(b);
  const float scale = scales[b];
  const float inv = inverse_scale(float_bits(scale), static_cast<float>(kLevels));
  const float step = scale / static_cast<float>(kLevels);
  uint32_t packed = 0;
  uint64_t block_index = ~uint64_t{0};
  PhiloxBlock block{};
  for (int j = 0; j < kPer; ++j) {
    const int64_t o = word * kPer + j;
    if (o >= len) break;
    const int64_t i = b * l.bucket + o;
    const float v = residual ? in[i] + residual[i] : in[i];
    const QsgdLevel lv = qsgd_level(v, inv);
    const uint64_t bi = static_cast<uint64_t>(i) / kValuesPerBlock;
    if (bi != block_index) {
      block = stage1_block(key, bi, kTagQsgd);
      block_index = bi;
    }
    const auto r = static_cast<int32_t>(stage1_u16(block, static_cast<uint64_t>(i)));
    bool up = r < lv.cut;
    if (r == lv.cut) up = stage2_up(key, static_cast<uint64_t>(i), kTagQsgd, lv.rest);
    int32_t k = lv.floor + (up ? 1 : 0);
    k = k > kLevels ? kLevels : k;
    const bool neg = v < 0.0f;
    packed |= (static_cast<uint32_t>(k) | (neg ? kSign : 0u)) << (j * Bits);
    if (residual) {
      const float mag = static_cast<float>(k) * step;
      residual[i] = v - (neg ? -mag : mag);
    }
  }
  reinterpret_cast<uint32_t*>(out + l.words_offset(b))[word] = packed;
}

// One thread per word of codes: spans not 16-byte aligned, and buckets the vector kernel cannot tile.
template <int Bits>
__global__ void encode_words_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::QsgdLayout l,
                                    PhiloxKey key, uint8_t* __restrict__ out) {
  const int64_t words = l.buckets * l.words_full;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = w / l.words_full, word = w % l.words_full;
    if (word * (32 / Bits) >= l.len(b)) continue;  // the last bucket has fewer words
    encode_word<Bits>(in, residual, l, key, out, b, word);
  }
}

// Values per unit of the vector kernel: a float4, or the 8 (4 bits) or 16 (2 bits) values of a word.
template <int Bits>
constexpr int64_t vec_unit() {
  return 32 / Bits > 4 ? 32 / Bits : 4;
}

// The vector kernel's values: whole units, which must not straddle a bucket.
template <int Bits>
bool encode_vec_fits(const wire::QsgdLayout& l) {
  return l.bucket % vec_unit<Bits>() == 0 || l.buckets == 1;
}

// Encodes one tile's float4s x (v0 = the thread's first; vecs = the span's float4s) with the scale
// scale_of(b) of bucket b: float4 v = values 4v .. 4v + 3 (one Philox block per pair of float4s, the
// block of value i being i / 8 as in the scalar path); kPer / 4 consecutive lanes join their codes
// into a word by shuffles (bits 2 and 4), a lane's codes are one word (8 bits) or two (16 bits).
template <int Bits, bool Ef, typename ScaleOf>
__device__ __forceinline__ void encode_tile(const float4 (&x)[kStreamUnroll], int64_t v0, int64_t vecs,
                                            float* __restrict__ residual, const wire::QsgdLayout& l, PhiloxKey key,
                                            uint8_t* __restrict__ out, ScaleOf scale_of) {
  constexpr int kPer = 32 / Bits;
  constexpr int kLanes = kPer > 4 ? kPer / 4 : 1;  // lanes per word
  constexpr int32_t kLevels = (1 << (Bits - 1)) - 1;
  constexpr uint32_t kSign = 1u << (Bits - 1);
  static_assert(kStreamThreads % kLanes == 0 && kWarp % kLanes == 0, "a word's lanes stay in one warp");
  const int sub = static_cast<int>(threadIdx.x % kLanes);
  // The stage-1 words of float4 v are words 0-1 (v even) or 2-3 (v odd) of Philox block v / 2, the
  // block of its values i / 8. Lanes 2p and 2p + 1 hold float4s 2q and 2q + 1 of one block at every
  // k: the even lane computes the block of k, the odd one that of k + 1, and they trade halves.
  static_assert(kValuesPerBlock == 8 && kStreamUnroll % 2 == 0, "pairs of float4s share a block");
  uint32_t lo[kStreamUnroll], hi[kStreamUnroll];
  const bool odd = threadIdx.x % 2 != 0;
  QT_UNROLL
  for (int k = 0; k < kStreamUnroll; k += 2) {
    const int64_t v = v0 + (odd ? k + 1 : k) * kStreamThreads;
    const PhiloxBlock r = stage1_block(key, static_cast<uint64_t>(v) / 2, kTagQsgd);
    const uint32_t give0 = odd ? r.v[0] : r.v[2], give1 = odd ? r.v[1] : r.v[3];
    const uint32_t got0 = __shfl_xor_sync(kFullMask, give0, 1), got1 = __shfl_xor_sync(kFullMask, give1, 1);
    lo[k] = odd ? got0 : r.v[0];
    hi[k] = odd ? got1 : r.v[1];
    lo[k + 1] = odd ? r.v[2] : got0;
    hi[k + 1] = odd ? r.v[3] : got1;
  }
  QT_UNROLL
  for (int k = 0; k < kStreamUnroll; ++k) {  // every lane runs the shuffles
    const int64_t v = v0 + k * kStreamThreads;
    const bool valid = v < vecs;
    const int64_t i0 = valid ? 4 * v : 0;
    const int64_t b = i0 / l.bucket, o = i0 - b * l.bucket;
    const float scale = valid ? scale_of(b) : 0.0f;  // a lane past the end only joins the shuffles
    const float inv = inverse_scale(float_bits(scale), static_cast<float>(kLevels));
    const float step = scale / static_cast<float>(kLevels);
    const uint32_t u16[4] = {lo[k] & 0xffffu, lo[k] >> 16, hi[k] & 0xffffu, hi[k] >> 16};
    const float a[4] = {x[k].x, x[k].y, x[k].z, x[k].w};
    uint64_t codes = 0;  // the four codes, Bits apart
    float res[4];
    QT_UNROLL
    for (int j = 0; j < 4; ++j) {
      const auto i = static_cast<uint64_t>(i0 + j);
      const QsgdLevel lv = qsgd_level(a[j], inv);
      const auto r = static_cast<int32_t>(u16[j]);
      bool up = r < lv.cut;
      if (r == lv.cut) up = stage2_up(key, i, kTagQsgd, lv.rest);
      int32_t level = lv.floor + (up ? 1 : 0);
      level = level > kLevels ? kLevels : level;
      const bool neg = a[j] < 0.0f;
      codes |= static_cast<uint64_t>(static_cast<uint32_t>(level) | (neg ? kSign : 0u)) << (j * Bits);
      const float mag = static_cast<float>(level) * step;
      res[j] = a[j] - (neg ? -mag : mag);
    }
    auto* words = reinterpret_cast<uint32_t*>(out + l.words_offset(b)) + o / kPer;
    if (Bits == 16) {
      if (valid) {
        words[0] = static_cast<uint32_t>(codes);
        words[1] = static_cast<uint32_t>(codes >> 32);
      }
    } else {
      uint32_t word = static_cast<uint32_t>(codes) << (4 * Bits * sub);
      for (int off = kLanes / 2; off >= 1; off /= 2) word |= __shfl_xor_sync(kFullMask, word, off);
      if (valid && sub == 0) words[0] = word;
    }
    if (Ef && valid) store4(residual, v, make_float4(res[0], res[1], res[2], res[3]));
  }
}

// The codes, streamed, after the scales are in the payload (bucket_max_vec_kernel, max_scales_kernel
// or the l2 sums): encode_tile per tile; the values past the last whole unit (within the last
// bucket) take encode_word in block 0.
template <int Bits, bool Ef>
__global__ void __launch_bounds__(kStreamThreads)
    encode_vec_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::QsgdLayout l, PhiloxKey key,
                      uint8_t* __restrict__ out) {
  constexpr int kPer = 32 / Bits;
  const float* scales = reinterpret_cast<const float*>(out + wire::kHeaderBytes);
  const int64_t vec_end = l.n / vec_unit<Bits>() * vec_unit<Bits>(), vecs = vec_end / 4;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 x[kStreamUnroll];
    load_tile<Ef>(in, residual, v0, vecs, x);
    encode_tile<Bits, Ef>(x, v0, vecs, residual, l, key, out, [scales](int64_t b) { return scales[b]; });
  }
  if (blockIdx.x == 0 && l.n > vec_end) {
    const int64_t b = l.buckets - 1, first = (vec_end - b * l.bucket) / kPer;
    const int64_t last = (l.len(b) + kPer - 1) / kPer;
    for (int64_t word = first + threadIdx.x; word < last; word += blockDim.x)
      encode_word<Bits>(in, Ef ? residual : nullptr, l, key, out, b, word);
  }
}

// Values of one tile of the fused kernel: the buckets divide it (fused_fits), so a tile holds whole
// buckets and one block finds their maxima alone.
constexpr int64_t kFusedTileValues = 4 * kTileVecs;

// Whether the max-norm encode can run as one kernel: whole units in every bucket (encode_vec_fits),
// whole buckets in every tile.
template <int Bits>
bool fused_fits(const wire::QsgdLayout& l) {
  return l.bucket % vec_unit<Bits>() == 0 && kFusedTileValues % l.bucket == 0;
}

// The whole max-norm encode in one pass over the input (what the CPU computes in two): a block loads
// its tile of whole buckets into registers, finds each bucket's max |v| bits in shared memory (a
// warp whose float4s share a bucket folds them by shuffles first), writes the scales (the max as a
// float, as max_scales_kernel) and, block 0, the header; then encodes from the registers with the
// scales from shared memory. The values past the last whole unit lie in the last bucket, so in the
// last tile, whose block includes them in that bucket's max and then encodes their words; the grid
// covers every tile of values, that one too when it holds no whole float4.
// Minimum 2 blocks per SM: up to 128 registers a thread (the tile's float4s stay live across the
// maxima; left to itself ptxas capped this kernel at 64 and spilled).
template <int Bits, bool Ef>
__global__ void __launch_bounds__(kStreamThreads, 2)
    encode_fused_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::QsgdLayout l, PhiloxKey key,
                        uint8_t* __restrict__ out, WireHeaderFields h, EncodeStatus* status) {
  constexpr int kPer = 32 / Bits;
  constexpr int64_t kSlots = kFusedTileValues / 4;  // buckets of >= 4 values
  __shared__ uint32_t slot[kSlots];
  float* scales = reinterpret_cast<float*>(out + wire::kHeaderBytes);
  const int64_t vec_end = l.n / vec_unit<Bits>() * vec_unit<Bits>(), vecs = vec_end / 4;
  const int64_t tiles = (l.n + kFusedTileValues - 1) / kFusedTileValues;
  if (blockIdx.x == 0 && threadIdx.x == 0) store_header(out, h);
  bool bad = false;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t first_b = tile * kFusedTileValues / l.bucket;
    const int64_t end = (tile + 1) * kFusedTileValues < l.n ? (tile + 1) * kFusedTileValues : l.n;
    const int64_t slots = (end - 1) / l.bucket - first_b + 1;
    const bool holds_tail = end == l.n && l.n > vec_end;
    for (int64_t t = threadIdx.x; t < slots; t += kStreamThreads) slot[t] = 0;
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 x[kStreamUnroll];
    load_tile<Ef>(in, residual, v0, vecs, x);
    __syncthreads();  // the slots are zero
    tile_bucket_maxima(x, v0, vecs, l.bucket, first_b, slot);
    if (holds_tail)
      for (int64_t i = vec_end + threadIdx.x; i < l.n; i += kStreamThreads) {
        const uint32_t m = abs_bits(Ef ? in[i] + residual[i] : in[i]);
        if (m > 0) atomicMax(&slot[i / l.bucket - first_b], m);
      }
    __syncthreads();  // the slots are complete
    for (int64_t t = threadIdx.x; t < slots; t += kStreamThreads) {
      scales[first_b + t] = bits_float(slot[t]);
      bad |= slot[t] >= kNonFinite;
    }
    encode_tile<Bits, Ef>(x, v0, vecs, residual, l, key, out,
                          [tile_slots = &slot[0], first_b](int64_t b) { return bits_float(tile_slots[b - first_b]); });
    __syncthreads();  // the slots are read before the next tile clears them, the scales are written
  }
  // The tail's words, after the loop (encode_word's Philox block is indexed at run time: local
  // memory, which the main loop must not touch), by the block that took the last tile and wrote the
  // last bucket's scale.
  if (blockIdx.x == (tiles - 1) % gridDim.x && l.n > vec_end) {
    const int64_t b = l.buckets - 1, first = (vec_end - b * l.bucket) / kPer;
    const int64_t last = (l.len(b) + kPer - 1) / kPer;
    for (int64_t word = first + threadIdx.x; word < last; word += blockDim.x)
      encode_word<Bits>(in, Ef ? residual : nullptr, l, key, out, b, word);
  }
  if (bad) atomicOr(&status->non_finite, 1u);
}

// A bucket's scale must be a finite value >= 0 (qsgd.cpp's check on the host): check_scales_kernel,
// or, with a status (decoder_checks), the decoders on each scale they read (every bucket's is read by
// a thread that decodes one of its values).
__device__ __forceinline__ bool bad_scale(float scale) { return float_bits(scale) >= kNonFinite; }

__global__ void check_scales_kernel(const float* __restrict__ scales, int64_t buckets, EncodeStatus* status) {
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < buckets;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (bad_scale(scales[b])) atomicOr(&status->bad, 1u);
}

// Value i: its code times its bucket's step; `bad` is set if the bucket's scale is not valid.
template <int Bits>
__device__ __forceinline__ float decode_value(const uint8_t* __restrict__ payload, const wire::QsgdLayout& l, int64_t i,
                                              bool& bad) {
  constexpr int kPer = 32 / Bits;
  constexpr uint32_t kMask = (1u << Bits) - 1;
  constexpr uint32_t kSign = 1u << (Bits - 1);
  constexpr int32_t kLevels = (1 << (Bits - 1)) - 1;
  const float* scales = reinterpret_cast<const float*>(payload + wire::kHeaderBytes);
  const int64_t b = i / l.bucket, o = i - b * l.bucket;
  const uint32_t word = reinterpret_cast<const uint32_t*>(payload + l.words_offset(b))[o / kPer];
  const uint32_t code = (word >> ((o % kPer) * Bits)) & kMask;
  bad |= bad_scale(scales[b]);
  const float step = scales[b] / static_cast<float>(kLevels);
  const float mag = static_cast<float>(static_cast<int32_t>(code & (kSign - 1))) * step;
  return code & kSign ? -mag : mag;
}

// One thread per value: outputs not 16-byte aligned, buckets no multiple of 4.
template <int Bits, bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, wire::QsgdLayout l, float* __restrict__ out,
                              EncodeStatus* status, HeaderCheck header) {
  check_header_in_kernel(header);
  bool bad = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < l.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = decode_value<Bits>(payload, l, i, bad);
    out[i] = Add ? out[i] + v : v;
  }
  if (status && bad) atomicOr(&status->bad, 1u);
}

// The vector kernel's float4s stay in one bucket.
inline bool decode_vec_fits(const wire::QsgdLayout& l) { return l.bucket % 4 == 0 || l.buckets == 1; }

// The same values, streamed: float4 v of the output from one 32-bit word of codes (two at 16 bits) and
// its bucket's scale; the n % 4 last values one per thread of block 0.
template <int Bits, bool Add>
__global__ void __launch_bounds__(kStreamThreads)
    decode_vec_kernel(const uint8_t* __restrict__ payload, wire::QsgdLayout l, float* __restrict__ out,
                      EncodeStatus* status, HeaderCheck header) {
  check_header_in_kernel(header);
  constexpr int kPer = 32 / Bits;
  constexpr uint32_t kMask = (1u << Bits) - 1;
  constexpr uint32_t kSign = 1u << (Bits - 1);
  constexpr int32_t kLevels = (1 << (Bits - 1)) - 1;
  const float* scales = reinterpret_cast<const float*>(payload + wire::kHeaderBytes);
  const int64_t vecs = l.n / 4;
  bool bad = false;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    uint64_t c[kStreamUnroll];  // the float4's four codes, Bits apart
    float step[kStreamUnroll];
    float4 acc[kStreamUnroll];
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      c[k] = 0;
      step[k] = 0.0f;
      acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (v >= vecs) continue;
      const int64_t b = 4 * v / l.bucket, o = 4 * v - b * l.bucket;
      const uint32_t* words = reinterpret_cast<const uint32_t*>(payload + l.words_offset(b)) + o / kPer;
      if (Bits == 16)
        c[k] = uint64_t{words[0]} | (uint64_t{words[1]} << 32);
      else
        c[k] = words[0] >> ((o % kPer) * Bits);
      bad |= bad_scale(scales[b]);
      step[k] = scales[b] / static_cast<float>(kLevels);
      if (Add) acc[k] = load4(out, v);
    }
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      float y[4];
      QT_UNROLL
      for (int j = 0; j < 4; ++j) {
        const auto code = static_cast<uint32_t>(c[k] >> (j * Bits)) & kMask;
        const float mag = static_cast<float>(static_cast<int32_t>(code & (kSign - 1))) * step[k];
        y[j] = code & kSign ? -mag : mag;
      }
      store_decoded<Add>(out, v, acc[k], y);
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = 4 * vecs + threadIdx.x; i < l.n; i += blockDim.x) {
      const float v = decode_value<Bits>(payload, l, i, bad);
      out[i] = Add ? out[i] + v : v;
    }
  if (status && bad) atomicOr(&status->bad, 1u);
}

template <typename F>
void with_bits(int bits, F&& f) {
  switch (bits) {
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: f(std::integral_constant<int, 16>{}); break;
  }
}

}  // namespace

void qsgd_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::QsgdLayout& l, QsgdNorm norm,
                      const WireHeader& h) {
  const size_t need = 256 + Carver::bytes<uint32_t>(static_cast<size_t>(l.buckets)) + group_sums_bytes(l.n, l.bucket);
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* max_bits = carver.take<uint32_t>(static_cast<size_t>(l.buckets));
  cudaStream_t s = stream_of(ctx);
  const bool aligned = aligned_to(a.in, 16) && aligned_to(a.residual, 16);
  bool fused = false;
  with_bits(l.bits, [&](auto bits) { fused = aligned && norm == QsgdNorm::max && fused_fits<bits()>(l); });
  if (fused && l.buckets > 0) {
    // One launch: the header, the scales and the codes (encode_fused_kernel).
    with_bits(l.bits, [&](auto bits) {
      constexpr int kBits = bits();
      const int grid = blocks_for(l.n, static_cast<int>(kFusedTileValues));
      if (a.residual)
        encode_fused_kernel<kBits, true>
            <<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out, fields_of(h), status);
      else
        encode_fused_kernel<kBits, false>
            <<<grid, kStreamThreads, 0, s>>>(a.in, nullptr, l, a.key, a.out, fields_of(h), status);
    });
    CUDA_CHECK(cudaGetLastError());
  } else {
    cuda_write_header(ctx, a.out, h);
  }
  if (!fused && l.buckets > 0) {
    constexpr int kThreads = 256;
    cuda_bucket_max_bits(ctx, a.in, a.residual, l.n, l.bucket, l.buckets, max_bits, status);
    auto* scales = reinterpret_cast<float*>(a.out + wire::kHeaderBytes);
    if (norm == QsgdNorm::l2) {
      const GroupSumsPlan plan = make_group_sums_plan(carver, l.n, l.bucket, status);
      launch_group_sums(ctx, plan, SquaresOverMax{a.in, a.residual, max_bits}, L2Scale{max_bits, scales, status});
    } else {
      cuda_max_scales(ctx, max_bits, l.buckets, scales);
    }
    const int64_t words = l.buckets * l.words_full;
    with_bits(l.bits, [&](auto bits) {
      constexpr int kBits = bits();
      const int grid = stream_grid(l.n / vec_unit<kBits>() * vec_unit<kBits>() / 4);
      if (aligned && encode_vec_fits<kBits>(l) && a.residual)
        encode_vec_kernel<kBits, true><<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out);
      else if (aligned && encode_vec_fits<kBits>(l))
        encode_vec_kernel<kBits, false><<<grid, kStreamThreads, 0, s>>>(a.in, nullptr, l, a.key, a.out);
      else
        encode_words_kernel<kBits><<<grid_for(words, kThreads), kThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out);
    });
    CUDA_CHECK(cudaGetLastError());
  }
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("qsgd encode: the input of {} values holds NaN or Inf", n));
    if (done.overflow)
      throw NonFiniteInputError(
          fmt::format("qsgd encode: a bucket of the {} values has an l2 norm beyond the float range", n));
  });
}

void qsgd_decode_cuda(Context& ctx, const wire::QsgdLayout& l, const uint8_t* payload, float* out, bool add) {
  if (l.n == 0) return;
  constexpr int kThreads = 256;
  DecodeStatus status(ctx);
  cudaStream_t s = stream_of(ctx);
  EncodeStatus* in_decoder = decoder_checks(
      ctx, status,
      [&](EncodeStatus* st) {
        check_scales_kernel<<<grid_for(l.buckets, kThreads), kThreads, 0, s>>>(
            reinterpret_cast<const float*>(payload + wire::kHeaderBytes), l.buckets, st);
      },
      [](const EncodeStatus& done) {
        if (done.bad) wire::bad_payload(QuantMethod::qsgd, "a bucket scale is not a finite value >= 0");
      });
  const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
  const bool vec = aligned_to(out, 16) && decode_vec_fits(l);
  with_bits(l.bits, [&](auto bits) {
    const int grid = vec ? stream_grid(l.n / 4) : grid_for(l.n, kThreads);
    if (vec && add)
      decode_vec_kernel<bits(), true><<<grid, kStreamThreads, 0, s>>>(payload, l, out, in_decoder, header);
    else if (vec)
      decode_vec_kernel<bits(), false><<<grid, kStreamThreads, 0, s>>>(payload, l, out, in_decoder, header);
    else if (add)
      decode_kernel<bits(), true><<<grid, kThreads, 0, s>>>(payload, l, out, in_decoder, header);
    else
      decode_kernel<bits(), false><<<grid, kThreads, 0, s>>>(payload, l, out, in_decoder, header);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
