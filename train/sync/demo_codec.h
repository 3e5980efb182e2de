// The arithmetic of DeMo (train/sync/demo.h) on one rank's arena: the fast components of the
// momentum out (encode), every rank's back in (decode). CPU loops (demo_codec.cpp) and CUDA kernels
// (demo_codec.cu) write the same bits: every sum below runs in a fixed order in double over products
// of the same double basis, nothing is fused (-ffp-contract=off, --fmad=false), and subnormals flush
// alike on both (docs/design.md, "Arithmetic").
//
// Each tensor is cut into chunks of `chunk` values (its last chunk may be shorter, length L). The
// transform of a chunk is the orthonormal DCT-II as a matrix product: X[k] = sum_n C[k][n] x[n] with
// C[k][n] = s_k cos(pi (2n + 1) k / 2L), s_0 = sqrt(1/L), s_k = sqrt(2/L); its inverse is C^T. The
// basis is computed once on the host in double, for each chunk length, and both devices read it.
//
// encode, per chunk (Algorithm 1, lines 2-4 of Peng et al.):
//   m[n] = beta * m[n] + g[n]                       (float, two roundings)
//   X[k] = float(sum over n ascending of C[k][n] * m[n])      (double)
//   keep the K = min(topk, L) coefficients of largest |X[k]| (ties to the lower k), in increasing k;
//     values: X[k] as sent, or with `sign` a scale s = float(sum of their |X| / K) and X[k] < 0 ? -s : s
//   m[n] = float(m[n] - sum over kept k ascending of C[k][n] * sent[k])      (double)
// decode, per chunk, after checking every payload (lines 5-6, the update rule of the paper's runs):
//   S[k] = sum over ranks in rank order, then over each rank's kept entries, of their values (float)
//   u[n] = sum over k ascending with S[k] != 0 of C[k][n] * S[k]      (double)
//   grads[n] = sign(u[n]): +1, -1 or 0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "framework/core/context.h"
#include "framework/core/tensor.h"
#include "train/sync/demo_wire.h"

namespace qtrain::demo {

// The longest chunk: the transform costs `chunk` multiply-adds per value each way, and the kernels keep
// a chunk's coefficients in shared memory.
inline constexpr int64_t kMaxChunk = 1024;

struct CodecOptions {
  int64_t chunk = 64;
  int64_t topk = 4;     // coefficients kept per chunk, 1 .. chunk
  bool sign = false;    // send each kept coefficient's sign, with one scale per chunk
  float beta = 0.999f;  // the momentum's decay, [0, 1)
};

// A tensor of the arena: where it starts and how many values it holds.
struct ArenaSpan {
  int64_t offset = 0;
  int64_t numel = 0;
};

// The chunk table both paths read: kChunkFields int64 values per chunk, in arena order.
enum ChunkField : int {
  kOffset = 0,     // in the arena
  kLength = 1,     // L
  kKept = 2,       // K = min(topk, L)
  kFirstKept = 3,  // kept coefficients of the chunks before it
  kBasis = 4,      // where its L x L basis starts in the basis arrays (doubles)
  kFirstSign = 5,  // sign bytes of the chunks before it
  kChunkFields = 6
};

// Where the body's sections start, in bytes from a payload's start.
struct BodyLayout {
  size_t values = wire::kHeaderBytes;
  size_t indices = 0;
  size_t signs = 0;
  size_t end = 0;  // before the padding
};

namespace demo_cuda {
struct Args;
}

class Codec {
 public:
  // The plan of `tensors` (arena order); device buffers on `device`.
  Codec(const std::vector<ArenaSpan>& tensors, const CodecOptions& options, Device device);

  const CodecOptions& options() const { return options_; }
  int64_t values() const { return values_; }
  int64_t chunks() const { return static_cast<int64_t>(table_.size()) / kChunkFields; }
  int64_t kept() const { return kept_; }
  size_t payload_bytes() const { return payload_bytes_; }
  // The body bytes of tensor t's chunks (header and padding are in no tensor's share).
  size_t tensor_body_bytes(size_t t) const { return tensor_bytes_[t]; }
  // The distinct chunk lengths, and the bytes of their bases on the device (both directions).
  std::string describe_bases() const;
  wire::Header header() const;

  // Lines 2-4 of Algorithm 1 on the arena's tensors: momentum and grads in ctx's device memory,
  // `payload` (payload_bytes(), host memory) receives this rank's payload. Returns when it is written.
  void encode(Context& ctx, float* momentum, const float* grads, uint8_t* payload);
  // Throws InputError ("demo payload from rank R: ...") unless `payload` is one this plan writes:
  // header fields, length, strictly increasing indices below each chunk's length, finite values (scales
  // finite and not negative), zero unused sign bits and padding.
  void check(std::span<const uint8_t> payload, int rank) const;
  // Checks the `ranks` payloads at `payloads` (host memory, payload_bytes() each, rank order), then
  // writes sign(IDCT(their sum)) into the arena's tensors of `grads` (ctx's device). Returns when done.
  void decode(Context& ctx, const uint8_t* payloads, int ranks, float* grads);

 private:
  // What the kernels read of the plan (the device copies of the tables and bases).
  demo_cuda::Args device_args() const;

  CodecOptions options_;
  size_t index_bytes_;
  int64_t values_ = 0, kept_ = 0, sign_bytes_ = 0;
  std::vector<int64_t> table_;
  std::vector<double> forward_;  // per length L: T[n * L + k] = C[k][n] (the forward pass reads along k)
  std::vector<double> inverse_;  // per length L: B[k * L + n] = C[k][n]
  std::vector<int64_t> lengths_;
  std::vector<size_t> tensor_bytes_;
  BodyLayout layout_;
  size_t payload_bytes_ = 0;
  // CUDA: the plan and bases on the device, the body the encoder writes, the payloads the decoder reads.
  Tensor table_dev_, forward_dev_, inverse_dev_, body_dev_, payloads_dev_;
};

namespace demo_cuda {  // demo_codec.cu (or demo_codec_nocuda.cpp)
struct Args {
  const int64_t* table = nullptr;
  int64_t chunks = 0;
  const double* forward = nullptr;
  const double* inverse = nullptr;
  BodyLayout layout;  // offsets from a payload's start
  int index_bytes = 1;
  bool sign = false;
  float beta = 0;
};
// Writes the body (layout.values .. layout.end of a payload) at `payload` (device memory).
void encode(Context& ctx, const Args& a, float* momentum, const float* grads, uint8_t* payload);
// `payloads`: `ranks` checked payloads of `stride` bytes in device memory.
void decode(Context& ctx, const Args& a, const uint8_t* payloads, int ranks, size_t stride, float* grads);
}  // namespace demo_cuda

}  // namespace qtrain::demo
