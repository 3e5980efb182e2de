// safetensors: round trip, atomic replacement, and every kind of corruption reported clearly.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "framework/core/file_io.h"
#include "framework/core/safetensors.h"

using namespace qtrain;
namespace fs = std::filesystem;

namespace {
std::string temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("qtrain_st_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}
std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void spit(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}
// A file with this JSON header (no CRC entry, which is optional) and `data_bytes` zero bytes of data.
std::string craft(const std::string& name, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  const std::string p = temp_path(name);
  spit(p, bytes + header + std::string(data_bytes, '\0'));
  return p;
}
std::string write_sample(const std::string& name) {
  Tensor a = Tensor::empty({2, 3}, DType::f32);
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = 0.5f * i;
  Tensor b = Tensor::empty({4}, DType::f64);
  b.fill_(-1.25);
  const std::string p = temp_path(name);
  save_safetensors(p, {{"layer.weight", a}, {"opt/state", b}}, {{"step", "7"}});
  return p;
}
}  // namespace

TEST_CASE("safetensors round trip", "[safetensors]") {
  const std::string p = write_sample("ok.safetensors");
  SafetensorsFile f(p);
  REQUIRE(f.metadata_value("step") == "7");
  Tensor a = f.read("layer.weight");
  REQUIRE(a.shape() == Shape{2, 3});
  REQUIRE(a.data<float>()[5] == 2.5f);
  Tensor b = Tensor::empty({4}, DType::f64);
  f.read_into("opt/state", b);
  REQUIRE(b.data<double>()[3] == -1.25);
  Tensor wrong = Tensor::empty({3, 2}, DType::f32);
  REQUIRE_THROWS_WITH(f.read_into("layer.weight", wrong), Catch::Contains("[2, 3] in the checkpoint"));
  REQUIRE_THROWS_WITH(f.read("missing"), Catch::Contains("no tensor 'missing'"));
  // The header length is a multiple of 8 (format rule) and no temporary file is left behind.
  const std::string bytes = slurp(p);
  REQUIRE(static_cast<unsigned char>(bytes[0]) % 8 == 0);
  for (const auto& entry : fs::directory_iterator(fs::path(p).parent_path()))
    REQUIRE(entry.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("corrupt safetensors files are rejected with the file name", "[safetensors]") {
  const std::string p = write_sample("src.safetensors");
  const std::string good = slurp(p);
  const std::string q = temp_path("bad.safetensors");

  spit(q, good.substr(0, 5));
  REQUIRE_THROWS_WITH(SafetensorsFile(q), Catch::Contains(q) && Catch::Contains("shorter than the 8-byte"));

  spit(q, good.substr(0, good.size() - 3));  // truncated data
  REQUIRE_THROWS_WITH(SafetensorsFile(q), Catch::Contains("corrupt checkpoint"));

  std::string flipped = good;
  flipped[flipped.size() - 2] ^= 0x40;  // one bit in the data
  spit(q, flipped);
  REQUIRE_THROWS_WITH(SafetensorsFile(q), Catch::Contains("CRC-32"));

  std::string huge = good;
  huge[6] = 0x7f;  // header length far beyond the file
  spit(q, huge);
  REQUIRE_THROWS_WITH(SafetensorsFile(q), Catch::Contains("exceeds the file size"));

  std::string garbage = good;
  garbage[8] = '#';  // the opening brace: the JSON no longer parses
  spit(q, garbage);
  REQUIRE_THROWS_WITH(SafetensorsFile(q), Catch::Contains("JSON header does not parse"));

  REQUIRE_THROWS_WITH(SafetensorsFile(temp_path("absent.safetensors")), Catch::Contains("not found"));
  // A folder (eval --checkpoint DIR) used to escape as std::ios_base::failure from the first read.
  fs::create_directories(temp_path("folder.safetensors"));
  REQUIRE_THROWS_WITH(SafetensorsFile(temp_path("folder.safetensors")),
                      Catch::Contains(temp_path("folder.safetensors") + ": checkpoint not found (or not a file)"));
}

TEST_CASE("a file's bytes in memory read as the file does", "[safetensors]") {
  const std::string p = write_sample("bytes.safetensors");
  const std::string good = slurp(p);
  const std::vector<uint8_t> bytes(good.begin(), good.end());
  const SafetensorsFile f(bytes, "in-memory.safetensors");
  REQUIRE(f.names() == SafetensorsFile(p).names());
  REQUIRE(f.metadata_value("step") == "7");
  REQUIRE(f.read("layer.weight").data<float>()[5] == 2.5f);
  std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 3);
  REQUIRE_THROWS_WITH(SafetensorsFile(cut, "in-memory.safetensors"),
                      Catch::StartsWith("in-memory.safetensors: corrupt checkpoint"));
}

// Everything a file says: tensor names, dtypes, shapes, values and the metadata, without the CRC
// entries and without the entry holding `header_crc` (under a key renamed by a flipped bit).
std::string contents(const SafetensorsFile& f, const std::string& header_crc) {
  std::string out;
  for (const std::string& name : f.names()) {
    const Tensor t = f.read(name);
    out += name + " " + std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) + " ";
    out.append(static_cast<const char*>(t.raw()), t.nbytes());
    out += "\n";
  }
  for (const auto& [key, value] : f.metadata())
    if (key.rfind("qtrain.", 0) != 0 && value != header_crc) out += key + "=" + value + "\n";
  return out;
}

TEST_CASE("every flipped bit and every truncation of a file is caught", "[safetensors]") {
  const std::string p = write_sample("flip-src.safetensors");
  const std::string good = slurp(p);
  const std::string header_crc = SafetensorsFile(p).metadata_value("qtrain.header_crc32");
  const std::string expected = contents(SafetensorsFile(p), header_crc);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(static_cast<unsigned char>(good[i])) << (8 * i);
  const size_t data_begin = 8 + header_bytes;
  // A flip inside the header CRC's own key name turns the entry into an unknown key and leaves every
  // other byte intact: such a file must load with unchanged contents.
  const std::string key = "\"qtrain.header_crc32\"";
  const size_t key_at = good.find(key);
  REQUIRE(key_at != std::string::npos);
  REQUIRE(key_at < data_begin);

  const std::string q = temp_path("flip.safetensors");
  int rejected = 0, renamed_key = 0;
  for (size_t byte = 0; byte < good.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      spit(q, bad);
      const bool in_key_name = byte > key_at && byte + 1 < key_at + key.size();
      try {
        const std::string got = contents(SafetensorsFile(q), header_crc);
        INFO("byte " << byte << " bit " << bit << " (data from byte " << data_begin << ") loaded");
        REQUIRE(in_key_name);
        REQUIRE(got == expected);
        ++renamed_key;
      } catch (const InputError& e) {
        INFO("byte " << byte << " bit " << bit << ": " << e.what());
        REQUIRE(std::string(e.what()).find(q) != std::string::npos);
        ++rejected;
      }
    }
  }
  REQUIRE(rejected + renamed_key == static_cast<int>(8 * good.size()));
  for (size_t length = 0; length < good.size(); ++length) {
    spit(q, good.substr(0, length));
    INFO("truncated to " << length << " of " << good.size() << " bytes");
    REQUIRE_THROWS_AS(SafetensorsFile(q), InputError);
  }

  // A changed digit keeps the JSON valid and every span consistent: only the header CRC sees it.
  std::string step = good;
  const size_t at = step.find("\"step\":\"7\"");
  REQUIRE(at != std::string::npos);
  step[at + 8] = '9';
  spit(q, step);
  REQUIRE_THROWS_WITH(SafetensorsFile(q), Catch::Contains(q) && Catch::Contains("CRC-32 of the header"));
}

TEST_CASE("crafted headers: overlapping spans, fractional and overflowing shapes", "[safetensors]") {
  const std::string ok = craft("fine.safetensors",
                               R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                  "z": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
                                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                               16);
  REQUIRE(SafetensorsFile(ok).names().size() == 3);
  // Two tensors sharing bytes and a gap after them, so that their sizes still add up to the data:
  // b used to load half of a's values.
  const std::string overlap = craft("overlap.safetensors",
                                    R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                    16);
  REQUIRE_THROWS_WITH(SafetensorsFile(overlap),
                      Catch::Contains(overlap) && Catch::Contains("tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
  // A fractional dimension is refused, not truncated (10.7 read as 10).
  const std::string fraction =
      craft("fraction.safetensors", R"({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8);
  REQUIRE_THROWS_WITH(SafetensorsFile(fraction),
                      Catch::Contains("tensor 'a' has shape [2.5], expected a list of non-negative integers"));
  // Offsets too (fuzz finding: 1.1e26 reached an undefined conversion to uint64_t).
  for (const char* offsets : {"[0, 8.0]", "[0, 1.1e26]", "[-8, 0]", "[0, 8, 16]", "[0]", "\"0-8\""}) {
    CAPTURE(offsets);
    const std::string bad =
        craft("offsets.safetensors",
              fmt::format(R"({{"a": {{"dtype": "F32", "shape": [2], "data_offsets": {}}}}})", offsets), 8);
    REQUIRE_THROWS_WITH(SafetensorsFile(bad), Catch::Contains(std::string("tensor 'a' has data_offsets ")) &&
                                                  Catch::Contains("expected [begin, end]: two non-negative integers"));
  }
  // 2^62 x 4 floats wrap around to 0 bytes: the size check must not accept the empty span for that shape.
  const std::string wrap = craft(
      "wrap.safetensors", R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 0);
  REQUIRE_THROWS_WITH(SafetensorsFile(wrap), Catch::Contains("more bytes than any file holds"));
}

TEST_CASE("atomic write replaces the old file", "[safetensors]") {
  const std::string p = temp_path("atomic.bin");
  write_file_atomically(p, "first");
  write_file_atomically(p, "second");
  REQUIRE(slurp(p) == "second");
}
