// IDX reading: whole-file reads through zlib (which passes uncompressed files through unchanged),
// then header and size validation with messages that say what was found and what was expected.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "framework/core/check.h"

namespace qtrain {
namespace {

uint32_t read_be32(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | static_cast<uint32_t>(p[3]);
}

// Checks the magic number and that the file holds exactly header + payload bytes.
// `what` is "image" or "label", `layout` the element type and dimensions the magic stands for.
void check_layout(const std::string& path, const std::vector<uint8_t>& bytes, uint32_t magic, const char* what,
                  const char* layout, size_t header_bytes) {
  if (bytes.size() < 4) input_error("{}: truncated: {} bytes, too short for an IDX header", path, bytes.size());
  const uint32_t found = read_be32(bytes.data());
  if (found != magic)
    input_error("{}: not an IDX {} file ({}): magic number 0x{:08x}, expected 0x{:08x}", path, what, layout, found,
                magic);
  if (bytes.size() < header_bytes)
    input_error("{}: truncated: {} bytes, the IDX {} header alone needs {}", path, bytes.size(), what, header_bytes);
}

// A longer file is refused while reading (read_file_bytes with the announced size as its limit).
void check_size(const std::string& path, size_t found, uint64_t expected, const std::string& announced) {
  if (found < expected)
    input_error("{}: truncated: the header announces {}, so {} bytes are expected, found {}", path, announced, expected,
                found);
}

// The first `n` bytes of a file (fewer when it is shorter), decompressed when gzip.
std::vector<uint8_t> read_file_head(const std::string& path, size_t n) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) input_error("{}: file not found", path);
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) input_error("{}: cannot open: {}", path, std::strerror(errno));
  std::vector<uint8_t> out(n);
  const int got = gzread(f, out.data(), static_cast<unsigned>(n));
  if (got < 0) {
    int code = 0;
    const std::string message = gzerror(f, &code);
    gzclose(f);
    input_error("{}: cannot read: {}", path, code == Z_ERRNO ? std::strerror(errno) : message);
  }
  gzclose(f);
  out.resize(static_cast<size_t>(got));
  return out;
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes, const std::string& expected) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) input_error("{}: file not found", path);
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) input_error("{}: cannot open: {}", path, std::strerror(errno));
  gzbuffer(f, 1 << 20);
  std::vector<uint8_t> out;
  // Room for the file's bytes on disk (a plain file's whole content, a gzip file's least) up to the
  // limit, so that the chunks below do not reallocate and copy what they read: reading MNIST's 47 MB of
  // training images took 0.6 s of a shortened run with the vector's doublings, page faults included.
  const uint64_t on_disk = std::filesystem::file_size(path, ec);
  if (!ec) out.reserve(static_cast<size_t>(std::min(on_disk, max_bytes)));
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    const int n = gzread(f, out.data() + old, static_cast<unsigned>(kChunk));
    if (n < 0) {
      int code = 0;
      const std::string message = gzerror(f, &code);
      gzclose(f);
      input_error("{}: cannot read: {}", path, code == Z_ERRNO ? std::strerror(errno) : message);
    }
    out.resize(old + static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      gzclose(f);
      input_error("{}: longer than the {} bytes {} (trailing data, or a gzip stream that expands further)", path,
                  max_bytes, expected);
    }
    if (static_cast<size_t>(n) < kChunk) break;
  }
  // A gzip stream cut short reads as a shorter file; zlib reports it here.
  int code = 0;
  const std::string message = gzerror(f, &code);
  gzclose(f);
  if (code != Z_OK && code != Z_STREAM_END) input_error("{}: damaged or truncated gzip data: {}", path, message);
  return out;
}

IdxImages read_idx_images(const std::string& path, int64_t max_images) {
  // The header first, then no more than it announces (a gzip file may expand much further).
  const std::vector<uint8_t> head = read_file_head(path, 16);
  check_layout(path, head, kIdxImagesMagic, "image", "unsigned bytes, 3 dimensions", 16);
  IdxImages out;
  out.announced = read_be32(head.data() + 4);
  out.rows = read_be32(head.data() + 8);
  out.cols = read_be32(head.data() + 12);
  out.count = max_images >= 0 ? std::min(max_images, out.announced) : out.announced;
  const std::string announced = fmt::format("{} images of {}x{}", out.announced, out.rows, out.cols);
  // Three 32-bit counts can overflow 64 bits; the wrapped product would be a meaningless "expected" size.
  uint64_t pixels = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(out.announced) * out.rows, static_cast<uint64_t>(out.cols), &pixels))
    input_error("{}: the header announces {}, more bytes than any file holds (a damaged header)", path, announced);
  if (out.count < out.announced) {
    // Only the images asked for: a prefix of at most `pixels` bytes, which the header's check bounds.
    const uint64_t wanted = static_cast<uint64_t>(out.count) * out.rows * out.cols;
    if (16 + wanted > UINT32_MAX)
      input_error("{}: {} images of {}x{} are more than one read of 4 GiB; read them all (no limit)", path, out.count,
                  out.rows, out.cols);
    std::vector<uint8_t> bytes = read_file_head(path, 16 + wanted);
    if (bytes.size() < 16 + wanted)
      input_error("{}: truncated: the header announces {}, and the first {} of them need {} bytes, found {}", path,
                  announced, out.count, 16 + wanted, bytes.size());
    out.pixels.assign(bytes.begin() + 16, bytes.end());
    return out;
  }
  std::vector<uint8_t> bytes =
      read_file_bytes(path, 16 + pixels, fmt::format("that its header announces ({})", announced));
  check_size(path, bytes.size(), 16 + pixels, announced);
  bytes.erase(bytes.begin(), bytes.begin() + 16);
  out.pixels = std::move(bytes);
  return out;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  const std::vector<uint8_t> head = read_file_head(path, 8);
  check_layout(path, head, kIdxLabelsMagic, "label", "unsigned bytes, 1 dimension", 8);
  const uint64_t count = read_be32(head.data() + 4);
  std::vector<uint8_t> bytes =
      read_file_bytes(path, 8 + count, fmt::format("that its header announces ({} labels)", count));
  check_size(path, bytes.size(), 8 + count, fmt::format("{} labels", count));
  bytes.erase(bytes.begin(), bytes.begin() + 8);
  return bytes;
}

}  // namespace qtrain
