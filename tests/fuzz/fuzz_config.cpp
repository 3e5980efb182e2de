// Fuzz target config: the YAML config layer through the whole run config, as `qtrain train` reads it
// before it builds anything (parse_run_config: load_yaml, the --set overrides and every section's
// parser; the layer blocks and the optimizer are parsed when the model and optimizer are built).
//
// Input: the config file's text, then any number of --set assignments ("train.epochs=3"), each after
// a NUL byte (a command-line word cannot hold one); at most 16 are used.
#include <string>
#include <vector>

#include "train/run_config.h"
#include "tests/fuzz/fuzz_support.h"

using namespace qtrain;
using namespace qtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    const size_t end = input.find('\0', begin);
    parts.push_back(input.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos || parts.size() > 16) break;
    begin = end + 1;
  }
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  const auto file = scratch_dir() / "run.yaml";
  write_file(file, as_bytes(parts[0]));
  accepts("parse_run_config", [&] { const RunConfig config = parse_run_config(file.string(), overrides); });
  return 0;
}
