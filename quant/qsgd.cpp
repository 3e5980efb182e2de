// qsgd: stochastic uniform quantization (Alistarh et al. 2017) with sign and magnitude codes: s =
// 2^(bits-1) - 1 levels per bucket of d values, scale S = max|v| (or ||v||_2) per bucket; level
// k = floor(a) + [round up with probability frac(a)], a = |v| * s / S, so E[decode] = v. The random
// decisions come from Philox under the state's key (quant/numerics.h), 8 values per Philox block.
// Buckets are encoded in chunks of 1024 values whose randomness, codes and bits stay in L1.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "framework/core/philox_batch.h"
#include "quant/cpu_loops.h"
#include "quant/cpu_memory.h"
#include "quant/det_sum.h"
#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/qsgd_cuda.h"
#include "quant/qsgd_wire.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

template <typename F>
void with_bits(int bits, F&& f) {
  switch (bits) {
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: f(std::integral_constant<int, 16>{}); break;
  }
}

constexpr int64_t kChunk = 1024;
// Codes of a chunk are staged as 32 bits each; bit 31 marks a stage-1 tie for the fix-up.
constexpr uint32_t kTieMark = 0x80000000u;

// The stage-1 code of v: sign bit, level k = floor(a) + [r < h] capped at the top level, where
// a = |v| * inv and h = the first 16 bits of frac(a); kTieMark when r == h (stage 2 decides). This is
// qsgd_level() written out so that GCC vectorizes the loops that inline it.
template <int Bits>
inline uint32_t stage1_code(float v, float inv, int32_t r) {
  constexpr int32_t kLevels = (1 << (Bits - 1)) - 1;
  const float a = __builtin_fabsf(v) * inv;
  const auto l = static_cast<int32_t>(a);
  const auto h = static_cast<int32_t>((a - static_cast<float>(l)) * 65536.0f);
  int32_t k = l + (r < h ? 1 : 0);
  k = k > kLevels ? kLevels : k;
  return static_cast<uint32_t>(k) | (v < 0.0f ? 1u << (Bits - 1) : 0u) | (r == h ? kTieMark : 0u);
}

template <int Bits, bool Ef>
struct Bucket {
  static constexpr int32_t kLevels = (1 << (Bits - 1)) - 1;
  static constexpr uint32_t kSignBit = 1u << (Bits - 1);

  const float* g;
  float* e;  // residual (Ef) of this bucket
  int64_t len;
  int64_t first;  // index of the bucket's first value in the span (the random counter)
  PhiloxKey key;

  float value(int64_t i) const { return Ef ? g[i] + e[i] : g[i]; }

  uint32_t max_abs() const {
    uint32_t m = 0;
    for (int64_t i = 0; i < len; ++i) {
      const uint32_t b = abs_bits(Ef ? g[i] + e[i] : g[i]);
      m = b > m ? b : m;
    }
    return m;
  }

  // ||v||_2 as max * sqrt(sum((v / max)^2)), the sum in the deterministic order, so large values cannot
  // overflow the squares.
  float l2(uint32_t max_bits) const {
    if (max_bits < 0x00800000u) return bits_float(max_bits);
    const float r = l2_inverse(max_bits);
    const float sum = det_sum_of(
        [this, r](int64_t i) {
          const float x = value(i) * r;
          return x * x;
        },
        len);
    return l2_norm(max_bits, std::sqrt(sum));
  }

  // Codes of [c, c + clen) into codes[0..clen); returns whether a stage-1 tie needs stage 2.
  bool codes_chunk(int64_t c, int64_t clen, float inv, float step, const uint16_t* __restrict u,
                   uint32_t* __restrict codes) const {
    const float* __restrict gc = g + c;
    float* __restrict ec = Ef ? e + c : nullptr;
    uint32_t any = 0;
    for (int64_t t = 0; t < clen; ++t) {
      const float v = Ef ? gc[t] + ec[t] : gc[t];
      const uint32_t code = stage1_code<Bits>(v, inv, static_cast<int32_t>(u[t]));
      any |= code & kTieMark;
      codes[t] = code;
      if (Ef) {
        // A tie parks v itself in the residual; fix_ties finishes it.
        const float mag = static_cast<float>(code & (kSignBit - 1)) * step;
        ec[t] = code & kTieMark ? v : v - (code & kSignBit ? -mag : mag);
      }
    }
    return any != 0;
  }

  // Stage 2 for the values whose stage-1 uniform tied (probability 2^-16 each).
  void fix_ties(int64_t c, int64_t clen, float inv, float step, uint32_t* codes) const {
    for (int64_t t = 0; t < clen; ++t) {
      if (!(codes[t] & kTieMark)) continue;
      const float v = Ef ? e[c + t] : g[c + t];  // codes_chunk parked v in the residual
      const QsgdLevel lv = qsgd_level(v, inv);
      const bool up = stage2_up(key, static_cast<uint64_t>(first + c + t), kTagQsgd, lv.rest);
      int32_t k = lv.floor + (up ? 1 : 0);
      k = k > kLevels ? kLevels : k;
      const bool neg = v < 0.0f;
      codes[t] = static_cast<uint32_t>(k) | (neg ? kSignBit : 0u);
      if (Ef) {
        const float mag = static_cast<float>(k) * step;
        e[c + t] = v - (neg ? -mag : mag);
      }
    }
  }
};

// Packs `count` staged codes (a multiple of 8 / Bits, zero-padded by the caller) into bytes, LSB
// first; the tie mark (bit 31) is dropped.
template <int Bits>
void pack_codes(const uint32_t* __restrict codes, int64_t count, uint8_t* __restrict out) {
  if constexpr (Bits == 16) {
    auto* o = reinterpret_cast<uint16_t*>(out);
    for (int64_t t = 0; t < count; ++t) o[t] = static_cast<uint16_t>(codes[t]);
  } else if constexpr (Bits == 8) {
    for (int64_t t = 0; t < count; ++t) out[t] = static_cast<uint8_t>(codes[t]);
  } else {
    constexpr int kPer = 8 / Bits;
    constexpr uint32_t kMask = (1u << Bits) - 1;
    for (int64_t t = 0; t < count / kPer; ++t) {
      uint32_t byte = 0;
      for (int j = 0; j < kPer; ++j) byte |= (codes[kPer * t + j] & kMask) << (j * Bits);
      out[t] = static_cast<uint8_t>(byte);
    }
  }
}

#if defined(__AVX2__)
// 32 codes (each below 256), given as two vectors of 16-bit codes from _mm256_packus_epi32 of
// consecutive groups of eight, narrowed to 32 bytes in order: packus narrows within 128-bit halves,
// the permute restores the order of the four groups of eight.
inline __m256i narrow_words(__m256i w0, __m256i w1) {
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w0, w1), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// 64 4-bit codes, given as two vectors of 32 bytes, merged into 32 bytes: byte pairs become
// b0 | b1 << 4 within 16-bit lanes, then narrowed.
inline __m256i merge_nibbles(__m256i first32, __m256i next32) {
  const __m256i low = _mm256_set1_epi16(0xff);
  auto pairs = [&](__m256i b) { return _mm256_and_si256(_mm256_or_si256(b, _mm256_srli_epi16(b, 4)), low); };
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs(first32), pairs(next32)), 0xd8);
}

// 32 staged codes, masked to `Bits` (which drops the tie mark), narrowed to 32 bytes.
template <int Bits>
inline __m256i codes_to_bytes(const uint32_t* __restrict codes) {
  const __m256i mask = _mm256_set1_epi32((1 << Bits) - 1);
  auto load = [&](int k) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 8 * k)), mask);
  };
  const __m256i w0 = _mm256_packus_epi32(load(0), load(1));
  const __m256i w1 = _mm256_packus_epi32(load(2), load(3));
  return narrow_words(w0, w1);
}

// pack_codes for 8 and 4 bits, 64 codes per step; other widths and the rest go to the reference loop.
template <int Bits>
void pack_codes_avx2(const uint32_t* __restrict codes, int64_t count, uint8_t* __restrict out) {
  int64_t t = 0;
  if constexpr (Bits == 8) {
    for (; t + 32 <= count; t += 32)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t), codes_to_bytes<8>(codes + t));
  } else if constexpr (Bits == 4) {
    for (; t + 64 <= count; t += 64)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t / 2),
                          merge_nibbles(codes_to_bytes<4>(codes + t), codes_to_bytes<4>(codes + t + 32)));
  }
  pack_codes<Bits>(codes + t, count - t, out + t * Bits / 8);
}

// stage1_code of n values (a multiple of 64) packed straight into bytes, for 4 and 8 bits: eight
// values per vector, the codes narrowed in registers instead of staged in memory and packed in a
// second loop. Returns false when a value tied; `out` then holds codes without stage 2 and the
// caller redoes the values on the staged path.
template <int Bits>
bool stage1_packed(const float* __restrict g, int64_t n, float inv, const uint16_t* __restrict u,
                   uint8_t* __restrict out);

template <int Bits>
bool stage1_packed_avx2(const float* __restrict g, int64_t n, float inv, const uint16_t* __restrict u,
                        uint8_t* __restrict out) {
  // stage1_code takes l = trunc(a) and h = trunc(frac(a) * 2^16) for a = |v| * inv. Both are in
  // q = trunc(|v| * (inv * 2^16)): q = l * 2^16 + h, because a * 2^16 only moves the exponent (exact,
  // and below 2^31 since a <= levels for values within the scale), a - l is exact, and multiplying by
  // inv * 2^16 rounds like multiplying by inv then scaling (a subnormal a, where it would not, gives
  // q = 0 = l = h either way). Hence l + [r < h] = (q - r + 0xffff) >> 16, and r == h exactly when q - r is 0 modulo
  // 2^16: three integer operations instead of five conversions and float operations. inv * 2^16 must be finite (a
  // bucket scale above about 2e-32): other buckets take the reference loop. (A value far above the scale, which the
  // encoder never passes, converts to 0x80000000 and still gets the top level; it may report a tie that is not one,
  // which only sends its chunk to the staged path.)
  if (!(inv <= FLT_MAX / 65536.0f)) return stage1_packed<Bits>(g, n, inv, u, out);
  const __m256 inv16 = _mm256_set1_ps(inv * 65536.0f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i round_up = _mm256_set1_epi32(0xffff);
  const __m256i top = _mm256_set1_epi32((1 << (Bits - 1)) - 1);
  const __m256i sign = _mm256_set1_epi32(1 << (Bits - 1));
  // Ties are marked in the low 16-bit half of each lane; the high halves collect noise, ignored below.
  __m256i ties = _mm256_setzero_si256();
  auto code8 = [&](int64_t t) {
    const __m256 v = _mm256_loadu_ps(g + t);
    const __m256i q = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_and_ps(v, abs_mask), inv16));
    const __m256i r = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u + t)));
    const __m256i d = _mm256_sub_epi32(q, r);
    ties = _mm256_or_si256(ties, _mm256_cmpeq_epi16(d, _mm256_setzero_si256()));
    const __m256i k = _mm256_min_epi32(_mm256_srli_epi32(_mm256_add_epi32(d, round_up), 16), top);  // l + [r < h]
    const __m256i neg = _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_or_si256(k, _mm256_and_si256(neg, sign));
  };
  // Narrowed pairwise as soon as they exist, so that few vectors are live at once (sixteen
  // registers; spilling them cost a third of the loop's time).
  auto words16 = [&](int64_t t) {
    const __m256i c0 = code8(t);
    const __m256i c1 = code8(t + 8);
    return _mm256_packus_epi32(c0, c1);
  };
  auto bytes32 = [&](int64_t t) {
    const __m256i w0 = words16(t);
    const __m256i w1 = words16(t + 16);
    return narrow_words(w0, w1);
  };
  for (int64_t t = 0; t < n; t += 64) {
    if constexpr (Bits == 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t), bytes32(t));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t + 32), bytes32(t + 32));
    } else {
      const __m256i first = bytes32(t);
      const __m256i next = bytes32(t + 32);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t / 2), merge_nibbles(first, next));
    }
  }
  return _mm256_testz_si256(ties, _mm256_set1_epi32(0xffff)) != 0;
}
#endif

// The reference of stage1_packed_avx2: stage1_code and pack_codes, 64 values at a time.
template <int Bits>
bool stage1_packed(const float* __restrict g, int64_t n, float inv, const uint16_t* __restrict u,
                   uint8_t* __restrict out) {
  uint32_t codes[64];
  uint32_t any = 0;
  for (int64_t t = 0; t < n; t += 64) {
    for (int j = 0; j < 64; ++j) {
      codes[j] = stage1_code<Bits>(g[t + j], inv, static_cast<int32_t>(u[t + j]));
      any |= codes[j] & kTieMark;
    }
    pack_codes<Bits>(codes, 64, out + t * Bits / 8);
  }
  return any == 0;
}

template <int Bits, bool Ef>
void encode_all(const EncodeArgs& a, const wire::QsgdLayout& l, QsgdNorm norm) {
  using B = Bucket<Bits, Ef>;
  auto* scales = reinterpret_cast<float*>(a.out + wire::kHeaderBytes);
  alignas(64) uint32_t codes[kChunk + 8];
  // Stage-1 uniforms for a window of the span, generated in long batches (several small buckets per
  // call, which keeps the vectorized Philox busy); values [window_lo, window_hi).
  constexpr int64_t kWindow = 4096;
  alignas(64) uint32_t rnd[4 * (kWindow / kValuesPerBlock)];
  int64_t window_lo = 0, window_hi = 0;
  auto uniforms = [&](int64_t i0, int64_t len) {
    if (i0 < window_lo || i0 + len > window_hi) {
      const int64_t block0 = i0 / kValuesPerBlock;
      const int64_t values = std::min(kWindow, a.n - block0 * kValuesPerBlock);
      const int64_t blocks = (values + kValuesPerBlock - 1) / kValuesPerBlock;
      philox_blocks(a.key, static_cast<uint64_t>(block0), kStage1, kTagQsgd, blocks, rnd);
      window_lo = block0 * kValuesPerBlock;
      window_hi = window_lo + blocks * kValuesPerBlock;
    }
    // Little-endian words: 16-bit half h of a block is uint16 number h of its 16 bytes.
    return reinterpret_cast<const uint16_t*>(rnd) + (i0 - window_lo);
  };
  // The hardware prefetcher alone leaves the max pass of each bucket waiting for DRAM while the
  // previous bucket computes; asking for the data kPrefetchBytes ahead overlaps the two.
  constexpr int64_t kPrefetchBytes = 8192;
  const auto* in_bytes = reinterpret_cast<const char*>(a.in);
  const auto* res_bytes = reinterpret_cast<const char*>(a.residual);
  const int64_t in_end = 4 * a.n;
  int64_t prefetched = 0;
  for (int64_t b = 0; b < l.buckets; ++b) {
    const B bucket{a.in + b * l.bucket, Ef ? a.residual + b * l.bucket : nullptr, l.len(b), b * l.bucket, a.key};
    const int64_t want = std::min(in_end, 4 * (b * l.bucket + bucket.len) + kPrefetchBytes);
    for (; prefetched < want; prefetched += 64) {
      __builtin_prefetch(in_bytes + prefetched);
      if (Ef) __builtin_prefetch(res_bytes + prefetched, 1);
    }
    const uint32_t max_bits = bucket.max_abs();
    if (max_bits >= kNonFinite)
      throw NonFiniteInputError(fmt::format("qsgd encode: the input of {} values holds NaN or Inf", a.n));
    const float scale = norm == QsgdNorm::l2 ? bucket.l2(max_bits) : bits_float(max_bits);
    // Finite values near the float maximum can have an l2 norm beyond it: an Inf scale would make a
    // payload that decode rejects (and NaN residuals).
    if (float_bits(scale) >= kNonFinite)
      throw NonFiniteInputError(
          fmt::format("qsgd encode: bucket {} has an l2 norm beyond the float range (its largest |value| is {:g})", b,
                      bits_float(max_bits)));
    scales[b] = scale;
    // A bucket of zeros (or of values below FLT_MIN, or too small to invert) encodes as level 0 everywhere.
    const float inv = inverse_scale(float_bits(scale), static_cast<float>(B::kLevels));
    const float step = scale / static_cast<float>(B::kLevels);
    uint8_t* words = a.out + l.words_offset(b);
    for (int64_t c = 0; c < bucket.len; c += kChunk) {
      const int64_t clen = bucket.len - c < kChunk ? bucket.len - c : kChunk;
      const uint16_t* u = uniforms(bucket.first + c, clen);
      // Values [c + from, c + clen) through staged codes, ties settled by stage 2, then packed.
      auto staged = [&](int64_t from) {
        if (bucket.codes_chunk(c + from, clen - from, inv, step, u + from, codes))
          bucket.fix_ties(c + from, clen - from, inv, step, codes);
        constexpr int64_t kPer = Bits >= 8 ? 1 : 8 / Bits;
        const int64_t padded = (clen - from + kPer - 1) / kPer * kPer;
        for (int64_t t = clen - from; t < padded; ++t) codes[t] = 0;
        qsgd_pack_codes(CpuPath::fast, Bits, codes, padded, words + (c + from) * Bits / 8);
      };
      // Without a residual, 4 and 8 bits go straight to packed bytes in whole groups of 64; a tie
      // (about one chunk in 64) sends the chunk through the staged path instead.
      const int64_t whole = (!Ef && (Bits == 4 || Bits == 8) && cpu_fast_path_is_simd()) ? clen / 64 * 64 : 0;
      if (whole == 0 || !qsgd_stage1_packed(CpuPath::fast, Bits, bucket.g + c, whole, inv, u, words + c * Bits / 8))
        staged(0);
      else if (whole < clen)
        staged(whole);
    }
    // Zero the rest of the bucket's last word.
    const size_t used = static_cast<size_t>((bucket.len * Bits + 7) / 8);
    const size_t word_bytes = 4 * static_cast<size_t>((bucket.len * Bits + 31) / 32);
    std::memset(words + used, 0, word_bytes - used);
  }
}

// Values [first, first + count) of one bucket (bytes = the bucket's first word) into out[0..count).
template <int Bits, bool Add>
void decode_bucket(const uint8_t* __restrict bytes, int64_t first, int64_t count, float step, float* __restrict out) {
  constexpr uint32_t kSign = 1u << (Bits - 1);
  constexpr uint32_t kMag = kSign - 1;
  auto value = [step](uint32_t code) {
    const float mag = static_cast<float>(static_cast<int32_t>(code & kMag)) * step;
    return code & kSign ? -mag : mag;
  };
  if constexpr (Bits == 16) {
    const auto* c = reinterpret_cast<const uint16_t*>(bytes) + first;
    for (int64_t i = 0; i < count; ++i) out[i] = Add ? out[i] + value(c[i]) : value(c[i]);
  } else if constexpr (Bits == 8) {
    const uint8_t* c = bytes + first;
    for (int64_t i = 0; i < count; ++i) out[i] = Add ? out[i] + value(c[i]) : value(c[i]);
  } else {
    constexpr int kPer = 8 / Bits;
    constexpr uint32_t kMask = (1u << Bits) - 1;
    auto code_at = [bytes](int64_t j) {
      return (static_cast<uint32_t>(bytes[j / kPer]) >> ((j % kPer) * Bits)) & kMask;
    };
    int64_t i = 0;
    for (; i < count && (first + i) % kPer != 0; ++i)
      out[i] = Add ? out[i] + value(code_at(first + i)) : value(code_at(first + i));
    const uint8_t* b = bytes + (first + i) / kPer;
    float* o = out + i;
    const int64_t full = (count - i) / kPer;
    for (int64_t t = 0; t < full; ++t) {
      const uint32_t byte = b[t];
      for (int j = 0; j < kPer; ++j) {
        const float v = value((byte >> (j * Bits)) & kMask);
        o[kPer * t + j] = Add ? o[kPer * t + j] + v : v;
      }
    }
    for (i += full * kPer; i < count; ++i)
      out[i] = Add ? out[i] + value(code_at(first + i)) : value(code_at(first + i));
  }
}

#if defined(__AVX2__)
// decode_bucket for 8 and 4 bits, eight values per vector: the level converted and scaled as in the
// reference, the sign applied by flipping the sign bit (what -mag does).
template <int Bits, bool Add>
void decode_bucket_avx2(const uint8_t* __restrict bytes, int64_t first, int64_t count, float step,
                        float* __restrict out) {
  constexpr int kSignShift = 32 - Bits;  // the code's sign bit to bit 31
  const __m256 stepv = _mm256_set1_ps(step);
  const __m256i mag_mask = _mm256_set1_epi32((1 << (Bits - 1)) - 1);
  const __m256i sign_mask = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  auto emit = [&](__m256i code, float* o) {
    const __m256 mag = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(code, mag_mask)), stepv);
    __m256 v =
        _mm256_xor_ps(mag, _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(code, kSignShift), sign_mask)));
    if (Add) v = _mm256_add_ps(_mm256_loadu_ps(o), v);
    _mm256_storeu_ps(o, v);
  };
  // Scalar head up to a multiple of 8 codes (a whole byte or word), vectors, scalar tail.
  int64_t head = (8 - first % 8) % 8;
  head = head < count ? head : count;
  decode_bucket<Bits, Add>(bytes, first, head, step, out);
  int64_t i = head;
  if constexpr (Bits == 8) {
    for (; i + 8 <= count; i += 8)
      emit(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + first + i))), out + i);
  } else {
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i nibble = _mm256_set1_epi32(0xf);
    for (; i + 8 <= count; i += 8) {
      uint32_t word;
      std::memcpy(&word, bytes + (first + i) / 2, 4);
      emit(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts), nibble), out + i);
    }
  }
  decode_bucket<Bits, Add>(bytes, first + i, count - i, step, out + i);
}
#endif

}  // namespace

void qsgd_pack_codes(CpuPath path, int bits, const uint32_t* codes, int64_t count, uint8_t* out) {
  with_bits(bits, [&](auto b) {
#if defined(__AVX2__)
    if (path == CpuPath::fast && (b() == 4 || b() == 8)) {
      pack_codes_avx2<b()>(codes, count, out);
      return;
    }
#endif
    (void)path;
    pack_codes<b()>(codes, count, out);
  });
}

bool qsgd_stage1_packed(CpuPath path, int bits, const float* in, int64_t n, float inv, const uint16_t* u,
                        uint8_t* out) {
  QT_CHECK(bits == 4 || bits == 8, "qsgd_stage1_packed: {} bits (4 or 8)", bits);
  QT_CHECK(n % 64 == 0, "qsgd_stage1_packed: {} values, not a multiple of 64", n);
#if defined(__AVX2__)
  if (path == CpuPath::fast)
    return bits == 4 ? stage1_packed_avx2<4>(in, n, inv, u, out) : stage1_packed_avx2<8>(in, n, inv, u, out);
#endif
  (void)path;
  return bits == 4 ? stage1_packed<4>(in, n, inv, u, out) : stage1_packed<8>(in, n, inv, u, out);
}

void qsgd_decode_codes(CpuPath path, int bits, const uint8_t* bytes, int64_t first, int64_t count, float step,
                       float* out, bool add) {
  with_bits(bits, [&](auto b) {
#if defined(__AVX2__)
    if (path == CpuPath::fast && (b() == 4 || b() == 8)) {
      if (add)
        decode_bucket_avx2<b(), true>(bytes, first, count, step, out);
      else
        decode_bucket_avx2<b(), false>(bytes, first, count, step, out);
      return;
    }
#endif
    (void)path;
    if (add)
      decode_bucket<b(), true>(bytes, first, count, step, out);
    else
      decode_bucket<b(), false>(bytes, first, count, step, out);
  });
}

namespace {

// Values [begin, end) of the span into out[0..end - begin).
template <int Bits, bool Add>
void decode_range(const wire::QsgdLayout& l, const uint8_t* in, int64_t begin, int64_t end, float* out) {
  const auto* scales = reinterpret_cast<const float*>(in + wire::kHeaderBytes);
  constexpr int32_t kLevels = (1 << (Bits - 1)) - 1;
  for (int64_t b = begin / l.bucket; b < l.buckets && b * l.bucket < end; ++b) {
    const int64_t start = b * l.bucket;
    const int64_t lo = begin > start ? begin : start;
    const int64_t hi = end < start + l.len(b) ? end : start + l.len(b);
    qsgd_decode_codes(CpuPath::fast, Bits, in + l.words_offset(b), lo - start, hi - lo,
                      scales[b] / static_cast<float>(kLevels), out + (lo - begin), Add);
  }
}

class QsgdQuantizer final : public Quantizer {
 public:
  explicit QsgdQuantizer(const QuantSpec& spec)
      : Quantizer(spec),
        bits_(static_cast<int>(spec.integer("bits"))),
        bucket_(spec.integer("bucket")),
        norm_(static_cast<QsgdNorm>(spec.integer("norm"))) {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override { return wire::qsgd_layout(n, bucket_, bits_).body_end; }

  WireHeader header(const wire::QsgdLayout& l) const {
    WireHeader h;
    h.method = QuantMethod::qsgd;
    h.a = static_cast<uint32_t>(l.bits);
    h.b = static_cast<uint32_t>(l.bucket);
    h.c = static_cast<uint32_t>(norm_);
    h.n = static_cast<uint64_t>(l.n);
    h.total = wire::pad8(l.body_end);
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const wire::QsgdLayout l = wire::qsgd_layout(a.n, bucket_, bits_);
    wire::write_header(a.out, header(l));
    with_bits(bits_, [&](auto bits) {
      if (a.residual)
        encode_all<bits(), true>(a, l, norm_);
      else
        encode_all<bits(), false>(a, l, norm_);
    });
    return l.body_end;
  }

#if QTRAIN_QUANT_CUDA
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override {
    return header(wire::qsgd_layout(n, bucket_, bits_));
  }

  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const wire::QsgdLayout l = wire::qsgd_layout(a.n, bucket_, bits_);
    qsgd_encode_cuda(ctx, a, l, norm_, header(l));
    return l.body_end;
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const wire::QsgdLayout l = check_body(h);
    const auto* scales = reinterpret_cast<const float*>(in.data() + wire::kHeaderBytes);
    for (int64_t b = 0; b < l.buckets; ++b)
      if (float_bits(scales[b]) >= kNonFinite)
        wire::bad_payload(method(), fmt::format("bucket {} has scale {}, not a finite value >= 0", b, scales[b]));
    with_bits(l.bits, [&](auto bits) {
      decode_tiled(out, l.n, add, [&](int64_t b, int64_t e, float* dst) {
        if (add)
          decode_range<bits(), true>(l, in.data(), b, e, dst);
        else
          decode_range<bits(), false>(l, in.data(), b, e, dst);
      });
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    const wire::QsgdLayout l = check_body(h);
    qsgd_decode_cuda(ctx, l, in.data(), out, add);
  }
#endif

 private:
  wire::QsgdLayout check_body(const WireHeader& h) const {
    if (h.a != 2 && h.a != 4 && h.a != 8 && h.a != 16)
      wire::bad_payload(method(), fmt::format("bits field {} (2, 4, 8 or 16)", h.a));
    if (h.b == 0) wire::bad_payload(method(), "bucket size 0");
    if (h.c > 1) wire::bad_payload(method(), fmt::format("norm field {} (0 max, 1 l2)", h.c));
    const wire::QsgdLayout l = wire::qsgd_layout(static_cast<int64_t>(h.n), h.b, static_cast<int>(h.a));
    if (h.total != wire::pad8(l.body_end))
      wire::bad_payload(method(),
                        fmt::format("length field {} bytes, the layout takes {}", h.total, wire::pad8(l.body_end)));
    return l;
  }

  int bits_;
  int64_t bucket_;
  QsgdNorm norm_;
};

// Bucket 0 (the default) means: 128 values for 2 bits, 512 for 4 and 8, 8192 for 16.
int64_t default_bucket(int64_t bits) { return bits == 2 ? 128 : (bits == 16 ? 8192 : 512); }

}  // namespace

const QuantMethodInfo& qsgd_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::qsgd;
    m.name = "qsgd";
    m.params = {
        {.key = "bits", .fallback = 4, .choices = {"2", "4", "8", "16"}},
        {.key = "bucket", .fallback = 0, .min = 1, .max = static_cast<double>(wire::kMaxValues)},
        {.key = "norm", .kind = QuantParamDef::Kind::name, .choices = {"max", "l2"}},
    };
    m.algorithm = "reduce_scatter_allgather";
    m.resolve = [](QuantSpec& s) {
      if (s.integer("bucket") == 0) s.set("bucket", static_cast<double>(default_bucket(s.integer("bits"))));
    };
    // One level of the value's bucket, plus the float rounding of |v| * levels / scale (relative 2^-24
    // of up to `levels`).
    m.within_bound = [](const QuantSpec& s, const RoundTripValue& v) {
      const int64_t bucket = s.integer("bucket") > 0 ? s.integer("bucket") : default_bucket(s.integer("bits"));
      float scale;
      std::memcpy(&scale, v.payload.data() + wire::kHeaderBytes + 4 * (v.index / static_cast<size_t>(bucket)), 4);
      const double levels = static_cast<double>((1 << (s.integer("bits") - 1)) - 1);
      return std::fabs(v.y - v.x) <= scale / levels * (1 + levels * 0x1p-22);
    };
    m.variants = {"qsgd", "qsgd:bits=2", "qsgd:bits=8", "qsgd:bits=16",
                  // A bucket that is not a multiple of 8: buckets start mid-block in the random stream.
                  "qsgd:norm=l2:bucket=100",
                  // Buckets of 8192: the l2 sums span two chunks of the deterministic order.
                  "qsgd:bits=16:norm=l2"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> { return std::make_unique<QsgdQuantizer>(spec); };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
