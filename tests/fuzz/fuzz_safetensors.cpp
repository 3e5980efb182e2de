// Fuzz target safetensors: the checkpoint reader (framework/core/safetensors.h) on arbitrary file
// contents. A file it accepts must then read back every tensor it lists, each holding exactly the
// bytes its shape and dtype need.
#include <vector>

#include "framework/core/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

using namespace qtrain;
using namespace qtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  accepts("SafetensorsFile", [&] {
    const SafetensorsFile file(bytes, "fuzz.safetensors");
    size_t total = 0;
    for (const std::string& name : file.names()) {
      FUZZ_REQUIRE(file.contains(name), "names() lists '{}', contains() denies it", name);
      const Tensor t = file.read(name);
      total += t.nbytes();
      FUZZ_REQUIRE(total <= size, "the tensors read so far hold {} bytes, more than the file's {}", total, size);
    }
    for (const auto& [key, value] : file.metadata())
      FUZZ_REQUIRE(file.metadata_value(key) == value, "metadata '{}' reads back differently", key);
  });
  return 0;
}
