// Fuzz target idx: the IDX reader of MNIST and Fashion-MNIST (data/idx.h), plain and gzip, on
// arbitrary file contents (written to a scratch file: the reader opens a path through zlib). The
// same file is read as images and as labels; accepted images hold exactly the pixels their header
// announces.
#include "data/idx.h"
#include "tests/fuzz/fuzz_support.h"

using namespace qtrain;
using namespace qtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = scratch_dir() / "input.idx";
  write_file(file, {data, size});
  accepts("read_idx_images", [&] {
    const IdxImages images = read_idx_images(file.string());
    FUZZ_REQUIRE(images.count >= 0 && images.rows >= 0 && images.cols >= 0, "negative dimensions {} x {} x {}",
                 images.count, images.rows, images.cols);
    using u128 = unsigned __int128;  // three 32-bit counts: no overflow
    FUZZ_REQUIRE(images.pixels.size() == u128(images.count) * u128(images.rows) * u128(images.cols),
                 "{} pixel bytes for {} images of {}x{}", images.pixels.size(), images.count, images.rows, images.cols);
  });
  accepts("read_idx_labels", [&] { read_idx_labels(file.string()); });
  return 0;
}
