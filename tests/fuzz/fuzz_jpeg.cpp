// Fuzz target jpeg: the JPEG decoder of the imagefolder dataset (data/jpeg.h, libjpeg-turbo with its
// errors and corrupt-data warnings as InputErrors) on arbitrary bytes. A decoded image holds exactly
// height x width RGB pixels within the decompression-bomb limit.
#include "data/jpeg.h"
#include "tests/fuzz/fuzz_support.h"

using namespace qtrain;
using namespace qtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accepts("decode_jpeg", [&] {
    const RgbImage image = decode_jpeg(data, size, "fuzz.jpg");
    FUZZ_REQUIRE(image.height >= 1 && image.width >= 1 &&
                     static_cast<uint64_t>(image.height) * static_cast<uint64_t>(image.width) <= kMaxJpegPixels,
                 "a decoded image of {}x{}", image.height, image.width);
    FUZZ_REQUIRE(image.pixels.size() == static_cast<size_t>(image.height * image.width * 3),
                 "{} bytes for {}x{} RGB pixels", image.pixels.size(), image.height, image.width);
  });
  return 0;
}
