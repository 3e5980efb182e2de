// Fuzz target cifar: the CIFAR-10/100 binary reader (data/cifar.h) on an arbitrary test-split file,
// then every sample it accepts read plainly and augmented.
//
// Input: byte 0 the options (bit 0 cifar100, bit 1 its coarse labels, bit 2 random_crop, bit 3
// horizontal_flip), byte 1 the sample side (1..32), byte 2 the crop padding (0..32), byte 3 the record
// limit (0..3, 0 = all); the rest is the file (test_batch.bin or test.bin, in a scratch folder).
#include <cmath>
#include <filesystem>
#include <vector>

#include "data/cifar.h"
#include "tests/fuzz/fuzz_support.h"

using namespace qtrain;
using namespace qtrain::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  const uint8_t flags = in.u8();
  CifarOptions options;
  options.variant = (flags & 1) != 0 ? CifarVariant::cifar100 : CifarVariant::cifar10;
  options.coarse_labels = options.variant == CifarVariant::cifar100 && (flags & 2) != 0;
  options.size = 1 + in.u8() % kCifarSide;
  options.augment.random_crop = (flags & 4) != 0;
  options.augment.crop_size = options.size;
  options.augment.crop_padding = in.u8() % (kCifarSide + 1);
  options.augment.horizontal_flip = (flags & 8) != 0;
  options.limit = in.u8() % 4;
  if (!options.augment.random_crop) options.size = kCifarSide;  // as the data config sets it

  const auto folder = scratch_dir() / "cifar";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  write_file(folder / (options.variant == CifarVariant::cifar10 ? "test_batch.bin" : "test.bin"), in.rest());
  accepts("open_cifar", [&] {
    const auto dataset = open_cifar(folder.string(), Split::test, options);
    const Shape shape = dataset->sample_shape();
    FUZZ_REQUIRE(shape == Shape({3, options.size, options.size}), "sample shape {} for side {}", shape_str(shape),
                 options.size);
    std::vector<float> x(static_cast<size_t>(3 * options.size * options.size));
    for (int64_t i = 0; i < dataset->size(); ++i) {
      int32_t label = -1;
      dataset->read(i, x.data(), &label);
      FUZZ_REQUIRE(label >= 0 && label < dataset->num_classes(), "sample {} has label {} of {} classes", i, label,
                   dataset->num_classes());
      for (float v : x) FUZZ_REQUIRE(std::isfinite(v), "sample {} holds {}", i, v);
      dataset->read_augmented(i, PhiloxKey{static_cast<uint32_t>(i), 7}, x.data(), &label);
      for (float v : x) FUZZ_REQUIRE(std::isfinite(v), "augmented sample {} holds {}", i, v);
    }
  });
  return 0;
}
