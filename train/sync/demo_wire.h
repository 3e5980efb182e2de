// The payload one rank sends per step under sync.type demo (docs/config-reference.md, `sync`), version
// 1, little-endian. Its layout follows from the model's tensors and the `sync` keys alone, so every rank
// knows every other's size and where each chunk's entries lie (demo_codec.h builds the plan).
//
//   header, bytes 0..31:
//     0 u8 'D'   1 u8 'M'   2 u8 version (1)   3 u8 flags (bit 0: values as signs)
//     4 u32 chunk   8 u32 topk   12 u32 0   16 u64 n (values covered)   24 u64 total bytes
//   body:
//     values   f32 per kept coefficient (flags bit 0 clear), or one f32 scale per chunk (set)
//     indices  per kept coefficient its frequency in the chunk: u8 when chunk <= 256, else u16; each
//              chunk's strictly increasing
//     signs    (flags bit 0 set) per chunk ceil(kept / 8) bytes, bit j (LSB first) set where its j-th
//              kept coefficient is -scale; unused bits zero
//   zero padding to a multiple of 8 bytes.
//
// Chunk c of length L keeps min(topk, L) coefficients; they follow those of chunks 0 .. c-1 in each
// section. The sections start on 4-byte boundaries (values are 4 bytes, indices come after them), so
// typed reads are aligned wherever a payload starts on an 8-byte boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace qtrain::demo::wire {

constexpr uint8_t kMagic0 = 'D', kMagic1 = 'M';
constexpr uint8_t kVersion = 1;
constexpr uint8_t kSignFlag = 1;
constexpr size_t kHeaderBytes = 32;
constexpr size_t kAlign = 8;

struct Header {
  uint8_t version = kVersion;
  uint8_t flags = 0;
  uint32_t chunk = 0;
  uint32_t topk = 0;
  uint32_t reserved = 0;
  uint64_t n = 0;
  uint64_t total = 0;
};

constexpr size_t pad8(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
// Bytes of one coefficient's index in the chunk.
constexpr size_t index_bytes(int64_t chunk) { return chunk <= 256 ? 1 : 2; }

inline void write_header(uint8_t* out, const Header& h) {
  out[0] = kMagic0;
  out[1] = kMagic1;
  out[2] = h.version;
  out[3] = h.flags;
  std::memcpy(out + 4, &h.chunk, 4);
  std::memcpy(out + 8, &h.topk, 4);
  std::memcpy(out + 12, &h.reserved, 4);
  std::memcpy(out + 16, &h.n, 8);
  std::memcpy(out + 24, &h.total, 8);
}

// The 32 bytes at p, unchecked (the magic is not part of Header).
inline Header read_header(const uint8_t* p) {
  Header h;
  h.version = p[2];
  h.flags = p[3];
  std::memcpy(&h.chunk, p + 4, 4);
  std::memcpy(&h.topk, p + 8, 4);
  std::memcpy(&h.reserved, p + 12, 4);
  std::memcpy(&h.n, p + 16, 8);
  std::memcpy(&h.total, p + 24, 8);
  return h;
}

}  // namespace qtrain::demo::wire
