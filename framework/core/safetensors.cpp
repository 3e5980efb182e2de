// safetensors reading and atomic writing, with CRC-32s over the data and over the header to catch
// corrupted files.
#include "framework/core/safetensors.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>

#include "framework/core/file_io.h"

namespace qtrain {
namespace {

const char* st_dtype(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  static const std::map<std::string, DType> table{{"F32", DType::f32},   {"F64", DType::f64}, {"F16", DType::f16},
                                                  {"BF16", DType::bf16}, {"U8", DType::u8},   {"I32", DType::i32}};
  auto it = table.find(s);
  if (it == table.end()) return false;
  out = it->second;
  return true;
}

uint32_t crc32_of(const uint8_t* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, data, chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

// The header's own CRC-32 sits inside the header it covers, so it is the CRC of the header bytes with
// its own eight hex digits read as "00000000" (the value save_safetensors writes there first).
constexpr const char* kHeaderCrcKey = "qtrain.header_crc32";
constexpr size_t kHeaderCrcDigits = 8;

// Where the eight digits of `"qtrain.header_crc32":"<digits>"` start in `header` (the compact JSON of
// save_safetensors; inside a JSON string every quote is escaped, so these bytes can only be the
// metadata entry itself); npos unless the entry occurs exactly once.
size_t header_crc_digits_at(const std::string& header, const std::string& digits) {
  const std::string field = fmt::format("\"{}\":\"{}\"", kHeaderCrcKey, digits);
  const size_t at = header.find(field);
  if (at == std::string::npos || header.find(field, at + 1) != std::string::npos) return std::string::npos;
  return at + field.size() - 1 - kHeaderCrcDigits;
}

// CRC-32 of the header bytes (length prefix, JSON and padding) with the digits at `at` read as zeros.
uint32_t header_crc(std::string header, size_t at) {
  header.replace(at, kHeaderCrcDigits, kHeaderCrcDigits, '0');
  return crc32_of(reinterpret_cast<const uint8_t*>(header.data()), header.size());
}

std::vector<uint8_t> read_checkpoint(const std::string& path) {
  // A folder opens as a stream and throws from the first read.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) input_error("{}: checkpoint not found (or not a file)", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) input_error("{}: checkpoint not found or unreadable", path);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::string data;
  for (const auto& nt : tensors) {
    QT_CHECK(nt.name != "__metadata__" && !nt.name.empty(), "invalid tensor name '{}'", nt.name);
    const Tensor host = nt.tensor.device().is_cpu() ? nt.tensor : nt.tensor.to(Device::cpu());
    const size_t begin = data.size();
    data.append(static_cast<const char*>(host.raw()), host.nbytes());
    header[nt.name] = {
        {"dtype", st_dtype(host.dtype())}, {"shape", host.shape()}, {"data_offsets", {begin, data.size()}}};
  }
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  meta["qtrain.crc32"] = std::to_string(crc32_of(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  meta[kHeaderCrcKey] = std::string(kHeaderCrcDigits, '0');  // also replaces the value of a file written again
  header["__metadata__"] = meta;
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes with spaces
  std::string bytes(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  bytes += json;
  // The data CRC leaves the header (step, epoch, config, names, shapes, offsets) unguarded: a flipped
  // digit of the step would resume at another point of the schedule without a word.
  const size_t at = header_crc_digits_at(bytes, std::string(kHeaderCrcDigits, '0'));
  QT_CHECK(at != std::string::npos, "the header CRC entry must occur once in the written header");
  bytes.replace(at, kHeaderCrcDigits, fmt::format("{:08x}", header_crc(bytes, at)));
  bytes += data;
  write_file_atomically(path, bytes);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : SafetensorsFile(read_checkpoint(path), path) {}

SafetensorsFile::SafetensorsFile(const std::vector<uint8_t>& bytes, const std::string& path) : path_(path) {
  if (bytes.size() < 8)
    input_error("{}: corrupt checkpoint: {} bytes, shorter than the 8-byte header length", path, bytes.size());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[static_cast<size_t>(i)]) << (8 * i);
  if (n > bytes.size() - 8)
    input_error("{}: corrupt checkpoint: header length {} exceeds the file size {}", path, n, bytes.size());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const nlohmann::json::exception& e) {
    input_error("{}: corrupt checkpoint: the JSON header does not parse ({})", path, e.what());
  }
  if (!header.is_object()) input_error("{}: corrupt checkpoint: the header is not a JSON object", path);
  data_.assign(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end());
  size_t covered = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) input_error("{}: corrupt checkpoint: __metadata__ is not an object", path);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) input_error("{}: corrupt checkpoint: metadata '{}' is not a string", path, m.key());
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const auto& v = it.value();
    Entry e{};
    try {
      if (!parse_st_dtype(v.at("dtype").get<std::string>(), e.dtype))
        input_error("{}: tensor '{}' has unsupported dtype {}", path, it.key(), v.at("dtype").dump());
      // Checked element by element: nlohmann would turn 10.7 into 10 and a huge unsigned into a negative.
      const auto& shape = v.at("shape");
      bool integers = shape.is_array();
      if (integers)
        for (const auto& d : shape) integers = integers && d.is_number_integer() && d.get<int64_t>() >= 0;
      if (!integers)
        input_error("{}: corrupt checkpoint: tensor '{}' has shape {}, expected a list of non-negative integers", path,
                    it.key(), shape.dump());
      e.shape = shape.get<Shape>();
      // Checked like the shape: a conversion to uint64_t would turn 8.5 into 8, -8 into 2^64 - 8, and
      // 1e26 into an undefined value.
      const auto& offsets = v.at("data_offsets");
      bool offsets_ok = offsets.is_array() && offsets.size() == 2;
      if (offsets_ok)
        for (const auto& o : offsets) offsets_ok = offsets_ok && o.is_number_unsigned();
      if (!offsets_ok)
        input_error(
            "{}: corrupt checkpoint: tensor '{}' has data_offsets {}, expected [begin, end]: two "
            "non-negative integers",
            path, it.key(), offsets.dump());
      e.begin = offsets[0].get<uint64_t>();
      e.end = offsets[1].get<uint64_t>();
    } catch (const nlohmann::json::exception& ex) {
      input_error("{}: corrupt checkpoint: tensor '{}' has a malformed entry ({})", path, it.key(), ex.what());
    }
    // The byte count without overflow: a shape whose product wraps around could claim a few bytes.
    size_t expected = dtype_size(e.dtype);
    const bool empty = std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end();
    for (int64_t d : e.shape) {
      if (!empty && expected > std::numeric_limits<size_t>::max() / static_cast<size_t>(d))
        input_error("{}: corrupt checkpoint: tensor '{}' has shape {}, more bytes than any file holds", path, it.key(),
                    shape_str(e.shape));
      expected *= static_cast<size_t>(d);
    }
    if (e.begin > e.end || e.end > data_.size() || e.end - e.begin != expected)
      input_error("{}: corrupt checkpoint: tensor '{}' spans bytes [{}, {}) but needs {} bytes within {} bytes of data",
                  path, it.key(), e.begin, e.end, expected, data_.size());
    covered += expected;
    entries_.emplace(it.key(), e);
  }
  // Every data byte belongs to exactly one tensor: the spans may not overlap (two tensors reading the
  // same bytes) and together cover the data.
  std::vector<std::tuple<size_t, size_t, std::string>> spans;
  for (const auto& [name, e] : entries_)
    if (e.end > e.begin) spans.emplace_back(e.begin, e.end, name);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    const auto& [begin_a, end_a, a] = spans[i - 1];
    const auto& [begin_b, end_b, b] = spans[i];
    if (begin_b < end_a)
      input_error("{}: corrupt checkpoint: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data", path, a,
                  begin_a, end_a, b, begin_b, end_b);
  }
  if (covered != data_.size())
    input_error("{}: corrupt checkpoint: tensors cover {} of {} data bytes (truncated or padded file)", path, covered,
                data_.size());
  // Files written before the header CRC existed have none; any single flipped bit of one that has it
  // is caught (a flip in the key's own name leaves every other byte intact).
  auto header_crc_entry = metadata_.find(kHeaderCrcKey);
  if (header_crc_entry != metadata_.end()) {
    const std::string& value = header_crc_entry->second;
    const std::string header(bytes.begin(), bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    const size_t at = value.size() == kHeaderCrcDigits ? header_crc_digits_at(header, value) : std::string::npos;
    if (at == std::string::npos || fmt::format("{:08x}", header_crc(header, at)) != value)
      input_error("{}: corrupt checkpoint: the CRC-32 of the header (names, shapes, metadata) does not match", path);
  }
  auto crc = metadata_.find("qtrain.crc32");
  if (crc != metadata_.end() && crc->second != std::to_string(crc32_of(data_.data(), data_.size())))
    input_error("{}: corrupt checkpoint: the CRC-32 of the tensor data does not match the header", path);
}

std::string SafetensorsFile::metadata_value(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) input_error("{}: checkpoint metadata lacks '{}'", path_, key);
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) input_error("{}: checkpoint has no tensor '{}'", path_, name);
  return it->second;
}

void SafetensorsFile::read_into(const std::string& name, Tensor& dst) const {
  const Entry& e = entry(name);
  if (e.dtype != dst.dtype() || e.shape != dst.shape())
    input_error("{}: tensor '{}' is {} {} in the checkpoint but {} {} in this model", path_, name, dtype_name(e.dtype),
                shape_str(e.shape), dtype_name(dst.dtype()), shape_str(dst.shape()));
  device_copy(dst.device(), dst.raw(), Device::cpu(), data_.data() + e.begin, e.end - e.begin);
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const Entry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  read_into(name, t);
  return t;
}

}  // namespace qtrain
