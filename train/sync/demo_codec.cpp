// DeMo's codec: the plan, the bases, the payload checks and the CPU loops (demo_codec.h has the
// arithmetic both devices follow).
#include "train/sync/demo_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>

#include "framework/core/check.h"
#include "framework/core/pinned_buffer.h"

namespace qtrain::demo {
namespace {

uint32_t abs_bits(float x) { return std::bit_cast<uint32_t>(x) & 0x7fffffffu; }

// Reads the index of kept coefficient i of a payload's index section.
int64_t read_index(const uint8_t* indices, size_t index_bytes, int64_t i) {
  if (index_bytes == 1) return indices[i];
  return reinterpret_cast<const uint16_t*>(indices)[i];
}

void write_index(uint8_t* indices, size_t index_bytes, int64_t i, int64_t k) {
  if (index_bytes == 1)
    indices[i] = static_cast<uint8_t>(k);
  else
    reinterpret_cast<uint16_t*>(indices)[i] = static_cast<uint16_t>(k);
}

// The value that kept coefficient j of chunk c (table row `row`) of a checked payload stands for.
float sent_value(const uint8_t* payload, const BodyLayout& layout, bool sign, int64_t c, const int64_t* row,
                 int64_t j) {
  const auto* values = reinterpret_cast<const float*>(payload + layout.values);
  if (!sign) return values[row[kFirstKept] + j];
  const float scale = values[c];
  const uint8_t bits = payload[layout.signs + static_cast<size_t>(row[kFirstSign] + j / 8)];
  return (bits >> (j % 8)) & 1 ? -scale : scale;
}

// out[i] = sum over t ascending of rows[t][i] * w[t], for i < len, each sum in double from 0: the
// three products of the codec (forward transform, what the momentum gives up, the decoded update) in
// the order the kernels sum. Sixteen sums at a time stay in four 4-wide registers while the terms
// stream by (written with vector types: left to itself, GCC vectorizes across the terms with gathers).
// Each lane multiplies and then adds, as the scalar loop does (no fused multiply-add).
using Double4 = double __attribute__((vector_size(32)));

void weighted_rows(const double* const* rows, const double* w, int64_t terms, int64_t len, double* out) {
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    Double4 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int64_t t = 0; t < terms; ++t) {
      const double* r = rows[t] + i;
      const Double4 x = {w[t], w[t], w[t], w[t]};
      Double4 r0, r1, r2, r3;
      std::memcpy(&r0, r, 32);
      std::memcpy(&r1, r + 4, 32);
      std::memcpy(&r2, r + 8, 32);
      std::memcpy(&r3, r + 12, 32);
      a0 += r0 * x;
      a1 += r1 * x;
      a2 += r2 * x;
      a3 += r3 * x;
    }
    std::memcpy(out + i, &a0, 32);
    std::memcpy(out + i + 4, &a1, 32);
    std::memcpy(out + i + 8, &a2, 32);
    std::memcpy(out + i + 12, &a3, 32);
  }
  for (; i < len; ++i) {
    double a = 0.0;
    for (int64_t t = 0; t < terms; ++t) a += rows[t][i] * w[t];
    out[i] = a;
  }
}

// Scratch of one CPU lane, as long as the longest chunk.
struct Scratch {
  std::vector<double> acc, weight;
  std::vector<const double*> rows;
  std::vector<float> coef;
  std::vector<uint64_t> rank;
  std::vector<int64_t> kept;
  explicit Scratch(int64_t chunk)
      : acc(static_cast<size_t>(chunk)),
        weight(static_cast<size_t>(chunk)),
        rows(static_cast<size_t>(chunk)),
        coef(static_cast<size_t>(chunk)),
        rank(static_cast<size_t>(chunk)),
        kept(static_cast<size_t>(chunk)) {}
};

}  // namespace

Codec::Codec(const std::vector<ArenaSpan>& tensors, const CodecOptions& options, Device device)
    : options_(options), index_bytes_(wire::index_bytes(options.chunk)) {
  QT_CHECK(options.chunk >= 1 && options.chunk <= kMaxChunk && options.topk >= 1 && options.topk <= options.chunk,
           "demo codec: chunk {} topk {}", options.chunk, options.topk);
  std::map<int64_t, int64_t> basis_of;  // chunk length -> where its basis starts
  auto basis = [&](int64_t L) {
    auto [it, added] = basis_of.try_emplace(L, static_cast<int64_t>(forward_.size()));
    if (!added) return it->second;
    lengths_.push_back(L);
    const size_t at = forward_.size();
    forward_.resize(at + static_cast<size_t>(L * L));
    inverse_.resize(at + static_cast<size_t>(L * L));
    for (int64_t k = 0; k < L; ++k) {
      const double s = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(L));
      for (int64_t n = 0; n < L; ++n) {
        const double c =
            s * std::cos(std::numbers::pi * static_cast<double>((2 * n + 1) * k) / static_cast<double>(2 * L));
        forward_[at + static_cast<size_t>(n * L + k)] = c;
        inverse_[at + static_cast<size_t>(k * L + n)] = c;
      }
    }
    return it->second;
  };
  std::vector<int64_t> tensor_of_chunk;
  for (const ArenaSpan& t : tensors) {
    values_ += t.numel;
    for (int64_t at = 0; at < t.numel; at += options.chunk) {
      const int64_t L = std::min(options.chunk, t.numel - at), K = std::min(options.topk, L);
      table_.insert(table_.end(), {t.offset + at, L, K, kept_, basis(L), sign_bytes_});
      kept_ += K;
      sign_bytes_ += options.sign ? (K + 7) / 8 : 0;
      tensor_of_chunk.push_back(static_cast<int64_t>(tensor_bytes_.size()));
    }
    tensor_bytes_.push_back(0);
  }
  // The sections, and each tensor's share of them.
  const size_t value_count = static_cast<size_t>(options.sign ? chunks() : kept_);
  layout_.indices = layout_.values + 4 * value_count;
  layout_.signs = layout_.indices + index_bytes_ * static_cast<size_t>(kept_);
  layout_.end = layout_.signs + static_cast<size_t>(sign_bytes_);
  payload_bytes_ = wire::pad8(layout_.end);
  for (int64_t c = 0; c < chunks(); ++c) {
    const int64_t K = table_[static_cast<size_t>(c * kChunkFields + kKept)];
    tensor_bytes_[static_cast<size_t>(tensor_of_chunk[static_cast<size_t>(c)])] +=
        options.sign ? 4 + static_cast<size_t>(K) * index_bytes_ + static_cast<size_t>((K + 7) / 8)
                     : static_cast<size_t>(K) * (4 + index_bytes_);
  }
  if (device.is_cuda()) {
    auto upload = [&](const void* data, size_t bytes, DType dtype, size_t size) {
      Tensor host = Tensor::empty({static_cast<int64_t>(size)}, dtype);
      if (bytes > 0) std::memcpy(host.raw(), data, bytes);
      return host.to(device);
    };
    table_dev_ = upload(table_.data(), table_.size() * 8, DType::u8, table_.size() * 8);
    forward_dev_ = upload(forward_.data(), forward_.size() * 8, DType::f64, forward_.size());
    inverse_dev_ = upload(inverse_.data(), inverse_.size() * 8, DType::f64, inverse_.size());
    body_dev_ = Tensor::empty({static_cast<int64_t>(payload_bytes_)}, DType::u8, device);
  }
}

std::string Codec::describe_bases() const {
  std::string lengths;
  for (int64_t L : lengths_) lengths += fmt::format("{}{}", lengths.empty() ? "" : ", ", L);
  return fmt::format("DCT bases of length {} ({:.1f} KiB, both directions)", lengths,
                     16.0 * static_cast<double>(forward_.size()) / 1024.0);
}

wire::Header Codec::header() const {
  wire::Header h;
  h.flags = options_.sign ? wire::kSignFlag : 0;
  h.chunk = static_cast<uint32_t>(options_.chunk);
  h.topk = static_cast<uint32_t>(options_.topk);
  h.n = static_cast<uint64_t>(values_);
  h.total = payload_bytes_;
  return h;
}

demo_cuda::Args Codec::device_args() const {
  return {reinterpret_cast<const int64_t*>(table_dev_.raw()),
          chunks(),
          forward_dev_.data<double>(),
          inverse_dev_.data<double>(),
          layout_,
          static_cast<int>(index_bytes_),
          options_.sign,
          options_.beta};
}

void Codec::encode(Context& ctx, float* momentum, const float* grads, uint8_t* payload) {
  wire::write_header(payload, header());
  std::fill(payload + layout_.end, payload + payload_bytes_, uint8_t{0});
  if (ctx.device().is_cuda()) {
    const demo_cuda::Args a = device_args();
    auto* body = static_cast<uint8_t*>(body_dev_.raw());
    demo_cuda::encode(ctx, a, momentum, grads, body);
    copy_async(ctx, payload + layout_.values, body + layout_.values, layout_.end - layout_.values);
    ctx.synchronize();
    return;
  }
  const int64_t* table = table_.data();
  const double* forward = forward_.data();
  const double* inverse = inverse_.data();
  const float beta = options_.beta;
  const bool sign = options_.sign;
  auto* values = reinterpret_cast<float*>(payload + layout_.values);
  uint8_t* indices = payload + layout_.indices;
  uint8_t* signs = payload + layout_.signs;
  ctx.cpu_pool().parallel_for(chunks(), 64, [&](int64_t begin, int64_t end) {
    Scratch s(options_.chunk);
    double* acc = s.acc.data();
    double* weight = s.weight.data();
    const double** rows = s.rows.data();
    float* coef = s.coef.data();
    uint64_t* rank = s.rank.data();
    int64_t* kept = s.kept.data();
    for (int64_t c = begin; c < end; ++c) {
      const int64_t* row = table + c * kChunkFields;
      const int64_t L = row[kLength], K = row[kKept], first = row[kFirstKept];
      const double* T = forward + row[kBasis];
      const double* B = inverse + row[kBasis];
      float* m = momentum + row[kOffset];
      const float* g = grads + row[kOffset];
      for (int64_t n = 0; n < L; ++n) {
        m[n] = beta * m[n] + g[n];
        weight[n] = m[n];
        rows[n] = T + n * L;
      }
      weighted_rows(rows, weight, L, L, acc);  // X[k], summed over n ascending
      for (int64_t k = 0; k < L; ++k) coef[k] = static_cast<float>(acc[k]);
      // The K best under (|X| descending, k ascending), a total order: the same set as the kernel's
      // count. One key orders both, distinct for every k: |X|'s bits above, the complement of k below.
      // K passes, each taking the largest key below the last one taken (K <= L: at most the
      // transform's cost, and branch-free, unlike a partition of random data).
      for (int64_t k = 0; k < L; ++k)
        rank[k] = uint64_t{abs_bits(coef[k])} << 32 | (0xffffffffu - static_cast<uint32_t>(k));
      uint64_t below = ~uint64_t{0};
      for (int64_t j = 0; j < K; ++j) {
        uint64_t best = 0;
        for (int64_t k = 0; k < L; ++k) best = rank[k] < below && rank[k] > best ? rank[k] : best;
        kept[j] = 0xffffffffu - static_cast<uint32_t>(best);
        below = best;
      }
      std::sort(kept, kept + K);
      if (sign) {
        double total = 0.0;
        for (int64_t j = 0; j < K; ++j) total += std::fabs(static_cast<double>(coef[kept[j]]));
        const float scale = static_cast<float>(total / static_cast<double>(K));
        values[c] = scale;
        uint8_t* bits = signs + row[kFirstSign];
        std::fill(bits, bits + (K + 7) / 8, uint8_t{0});
        for (int64_t j = 0; j < K; ++j) {
          const bool negative = coef[kept[j]] < 0.0f;
          weight[j] = negative ? -scale : scale;
          bits[j / 8] = static_cast<uint8_t>(bits[j / 8] | (negative ? 1u << (j % 8) : 0u));
        }
      } else {
        for (int64_t j = 0; j < K; ++j) {
          values[first + j] = coef[kept[j]];
          weight[j] = coef[kept[j]];
        }
      }
      for (int64_t j = 0; j < K; ++j) {
        write_index(indices, index_bytes_, first + j, kept[j]);
        rows[j] = B + kept[j] * L;
      }
      // The momentum keeps what was not sent (its error feedback).
      weighted_rows(rows, weight, K, L, acc);
      for (int64_t n = 0; n < L; ++n) m[n] = static_cast<float>(static_cast<double>(m[n]) - acc[n]);
    }
  });
}

void Codec::check(std::span<const uint8_t> payload, int rank) const {
  auto bad = [&](const std::string& what) {
    throw InputError(fmt::format("demo payload from rank {}: {}", rank, what));
  };
  if (payload.size() != payload_bytes_)
    bad(fmt::format("{} bytes, this plan's payload has {} (sync.chunk {}, sync.topk {}, sync.sign {}, {} values)",
                    payload.size(), payload_bytes_, options_.chunk, options_.topk, options_.sign, values_));
  const uint8_t* p = payload.data();
  if (p[0] != wire::kMagic0 || p[1] != wire::kMagic1)
    bad(fmt::format("not a demo payload (magic {:#04x} {:#04x}, expected 'D' 'M')", p[0], p[1]));
  const wire::Header h = wire::read_header(p), want = header();
  if (h.version != wire::kVersion)
    bad(fmt::format("wire format version {} is not supported (this build reads version {})", h.version,
                    wire::kVersion));
  auto field = [&](const char* name, uint64_t got, uint64_t expected) {
    if (got != expected) bad(fmt::format("header field {} is {}, this plan has {}", name, got, expected));
  };
  field("flags", h.flags, want.flags);
  field("chunk", h.chunk, want.chunk);
  field("topk", h.topk, want.topk);
  field("reserved", h.reserved, 0);
  field("n (values)", h.n, want.n);
  field("total (bytes)", h.total, want.total);
  for (size_t i = layout_.end; i < payload_bytes_; ++i)
    if (p[i] != 0) bad(fmt::format("padding byte {} is {:#04x}, not zero", i, p[i]));
  const auto* values = reinterpret_cast<const float*>(p + layout_.values);
  const uint8_t* indices = p + layout_.indices;
  for (int64_t c = 0; c < chunks(); ++c) {
    const int64_t* row = table_.data() + c * kChunkFields;
    const int64_t L = row[kLength], K = row[kKept], first = row[kFirstKept];
    int64_t previous = -1;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t k = read_index(indices, index_bytes_, first + j);
      if (k <= previous || k >= L)
        bad(fmt::format("chunk {}: index {} of its {} is {}, not above {} and below the chunk's length {}", c, j, K, k,
                        previous, L));
      previous = k;
    }
    if (options_.sign) {
      const float scale = values[c];
      if (!std::isfinite(scale) || scale < 0.0f)
        bad(fmt::format("chunk {}: scale {} is not a finite value >= 0", c, scale));
      const uint8_t last = p[layout_.signs + static_cast<size_t>(row[kFirstSign] + (K - 1) / 8)];
      if (K % 8 != 0 && (last >> (K % 8)) != 0)
        bad(fmt::format("chunk {}: unused sign bits set in {:#04x} ({} signs)", c, last, K));
    } else {
      for (int64_t j = 0; j < K; ++j)
        if (!std::isfinite(values[first + j]))
          bad(fmt::format("chunk {}: coefficient {} is {} (the momentum diverged, or the payload is corrupt)", c, j,
                          values[first + j]));
    }
  }
}

void Codec::decode(Context& ctx, const uint8_t* payloads, int ranks, float* grads) {
  for (int r = 0; r < ranks; ++r) check({payloads + static_cast<size_t>(r) * payload_bytes_, payload_bytes_}, r);
  if (ctx.device().is_cuda()) {
    const size_t bytes = static_cast<size_t>(ranks) * payload_bytes_;
    if (!payloads_dev_.defined() || payloads_dev_.nbytes() < bytes)
      payloads_dev_ = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, ctx.device());
    auto* dev = static_cast<uint8_t*>(payloads_dev_.raw());
    copy_async(ctx, dev, payloads, bytes);
    const demo_cuda::Args a = device_args();
    demo_cuda::decode(ctx, a, dev, ranks, payload_bytes_, grads);
    ctx.synchronize();
    return;
  }
  const int64_t* table = table_.data();
  const double* inverse = inverse_.data();
  ctx.cpu_pool().parallel_for(chunks(), 64, [&](int64_t begin, int64_t end) {
    Scratch s(options_.chunk);
    double* acc = s.acc.data();
    double* weight = s.weight.data();
    const double** rows = s.rows.data();
    float* sum = s.coef.data();
    for (int64_t c = begin; c < end; ++c) {
      const int64_t* row = table + c * kChunkFields;
      const int64_t L = row[kLength], K = row[kKept], first = row[kFirstKept];
      std::fill(sum, sum + L, 0.0f);
      for (int r = 0; r < ranks; ++r) {
        const uint8_t* p = payloads + static_cast<size_t>(r) * payload_bytes_;
        for (int64_t j = 0; j < K; ++j)
          sum[read_index(p + layout_.indices, index_bytes_, first + j)] +=
              sent_value(p, layout_, options_.sign, c, row, j);
      }
      const double* B = inverse + row[kBasis];
      int64_t terms = 0;
      for (int64_t k = 0; k < L; ++k) {
        if (sum[k] == 0.0f) continue;
        weight[terms] = sum[k];
        rows[terms++] = B + k * L;
      }
      weighted_rows(rows, weight, terms, L, acc);
      float* out = grads + row[kOffset];
      for (int64_t n = 0; n < L; ++n) out[n] = acc[n] > 0.0 ? 1.0f : (acc[n] < 0.0 ? -1.0f : 0.0f);
    }
  });
}

}  // namespace qtrain::demo
