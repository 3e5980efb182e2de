// Fuzz target an4: the AN4 corpus reader (data/an4.h) on an arbitrary corpus of one split: the
// transcription and fileids lists (etc/an4_train.*) and one audio file, written to a scratch folder
// as wav/r.raw, wav/s.sph and wav/w.wav (headerless PCM, NIST SPHERE and RIFF WAV readers), which
// the fileids name as "r", "s" and "w"; then the features of every utterance accepted.
//
// Input: byte 0 the options (bit 0: raw files little-endian, bits 1-2: frames stacked per step,
// 1..4), then the transcription text, a NUL, the fileids text, a NUL, the audio bytes. Fileids that
// leave the folder ("..", absolute paths) are skipped: they would read whatever the machine holds.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "data/an4.h"
#include "tests/fuzz/fuzz_support.h"

using namespace qtrain;
using namespace qtrain::fuzz;

namespace {

// Whether a line of `fileids` names a path outside wav/: one with "..", or absolute (after the blanks
// the reader trims).
bool leaves_folder(const std::string& fileids) {
  if (fileids.find("..") != std::string::npos) return true;
  bool line_start = true;
  for (char c : fileids) {
    if (line_start && c == '/') return true;
    line_start = c == '\n' || (line_start && (c == ' ' || c == '\t' || c == '\r'));
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  An4Options options;
  options.audio.raw_byte_order = (data[0] & 1) != 0 ? ByteOrder::little : ByteOrder::big;
  options.stack = 1 + ((data[0] >> 1) & 3);
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t first = input.find('\0');
  const size_t second = first == std::string::npos ? std::string::npos : input.find('\0', first + 1);
  if (second == std::string::npos) return 0;
  const std::string transcription = input.substr(0, first);
  const std::string fileids = input.substr(first + 1, second - first - 1);
  const std::string audio = input.substr(second + 1);
  if (leaves_folder(fileids)) return 0;

  const auto folder = scratch_dir() / "an4";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder / "etc");
  std::filesystem::create_directories(folder / "wav");
  write_file(folder / "etc" / "an4_train.transcription", as_bytes(transcription));
  write_file(folder / "etc" / "an4_train.fileids", as_bytes(fileids));
  for (const char* name : {"r.raw", "s.sph", "w.wav"}) write_file(folder / "wav" / name, as_bytes(audio));
  accepts("open_an4", [&] {
    const auto dataset = open_an4(folder.string(), Split::train, options);
    const int64_t step = dataset->sample_shape().at(0);
    FUZZ_REQUIRE(step == options.features.num_mels * options.stack, "steps of {} values for {} mels x {} frames", step,
                 options.features.num_mels, options.stack);
    for (int64_t i = 0; i < dataset->size(); ++i) {
      const int64_t length = dataset->sequence_length(i);
      FUZZ_REQUIRE(length >= 1, "utterance {} has {} steps", i, length);
      std::vector<float> x(static_cast<size_t>(length * step));
      std::vector<int32_t> targets;
      dataset->read_sequence(i, x.data(), &targets);
      FUZZ_REQUIRE(!targets.empty(), "utterance {} has no target characters", i);
      for (int32_t t : targets)
        FUZZ_REQUIRE(t >= 1 && t < dataset->num_classes(), "utterance {} has target {} of {} classes", i, t,
                     dataset->num_classes());
      for (float v : x) FUZZ_REQUIRE(std::isfinite(v), "utterance {} has feature {}", i, v);
    }
  });
  return 0;
}
