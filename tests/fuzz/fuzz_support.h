// What the fuzz targets share: the outcome rule (a malformed input ends in qtrain's InputError; any
// other exception, a broken property, a sanitizer report, a hang or a memory blow-up is a finding),
// a reader that takes the fuzzer's bytes field by field, and scratch files for readers that open a
// path. A finding prints one "fuzz finding:" line and aborts, so libFuzzer saves the input as
// crash-<sha1> (and the replay test fails on it).
#pragma once

#include <cxxabi.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <typeinfo>

#include "framework/core/check.h"

namespace qtrain::fuzz {

[[noreturn]] inline void finding(const std::string& message) {
  std::fprintf(stderr, "fuzz finding: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_REQUIRE(cond, ...)                                                                                    \
  do {                                                                                                             \
    if (!(cond))                                                                                                   \
      ::qtrain::fuzz::finding(fmt::format("{} ({}:{}: {})", fmt::format(__VA_ARGS__), __FILE__, __LINE__, #cond)); \
  } while (0)

inline std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   &std::free);
  return status == 0 && name ? name.get() : type.name();
}

// Runs `body` on input that may be malformed: true when it returns, false when it ends in an
// InputError (the expected way to refuse an input, which must say what was wrong). Any other
// exception is a finding; `what` names the call in its message.
template <typename Body>
bool accepts(const char* what, Body&& body) {
  try {
    body();
    return true;
  } catch (const InputError& e) {
    if (std::strlen(e.what()) == 0) finding(fmt::format("{}: an InputError with an empty message", what));
    return false;
  } catch (const std::bad_alloc&) {
    finding(fmt::format("{}: std::bad_alloc (an allocation sized by the input instead of an InputError)", what));
  } catch (const std::exception& e) {
    finding(fmt::format("{}: {} instead of an InputError: {}", what, type_name(typeid(e)), e.what()));
  } catch (...) {
    finding(fmt::format("{}: an exception that is not a std::exception", what));
  }
}

// The fuzzer's bytes, taken from the front field by field; a field past the end reads as zeros.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() {
    const uint16_t lo = u8();
    return static_cast<uint16_t>(lo | u8() << 8);
  }
  // Everything not yet taken.
  std::span<const uint8_t> rest() const { return {data_ + pos_, size_ - pos_}; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A folder of this process under the system's temporary folder (TMPDIR), made on first use and
// removed at a normal exit (an abort on a finding leaves it, with the input that was written there).
inline const std::filesystem::path& scratch_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      std::string pattern = (std::filesystem::temp_directory_path() / "qtrain_fuzz_XXXXXX").string();
      if (::mkdtemp(pattern.data()) == nullptr) finding("cannot make a scratch folder under " + pattern);
      path = pattern;
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// Writes `bytes` to `path` (replacing it); a failure is a finding (of the machine, not the input).
inline void write_file(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) finding("cannot write the scratch file " + path.string());
}

inline std::span<const uint8_t> as_bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

}  // namespace qtrain::fuzz
