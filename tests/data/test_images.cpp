// The image datasets of data/: CIFAR-10/100 records written here (values, labels, normalization,
// truncated files, bad labels, missing files, limits), the augmentation draws and crops (determinism
// per key, padding, flips, the loader's independence of threads and resume), the worker pool, the
// antialiased resize against PIL, JPEG decoding (RGB, grayscale, CMYK, malformed files), the
// imagefolder index and transforms on a JPEG tree written here, and the new data config keys. The real
// CIFAR-10 subset in the shared data: the CTest entry test_images_cifar10_subset, "Skipped" without it.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include "data/augment.h"
#include "data/cifar.h"
#include "data/dataset.h"
#include "data/dataset_info.h"
#include "data/imagefolder.h"
#include "data/jpeg.h"
#include "data/loader.h"
#include "data/resample.h"
#include "data/worker_pool.h"
#include "tests/support/image_files.h"
#include "tests/support/real_data.h"
#include "tests/support/temp_dir.h"

using namespace qtrain;
namespace fs = std::filesystem;

namespace {

using qtrain::testing::Bytes;
using qtrain::testing::cifar_pixel;
using qtrain::testing::cifar_pixels;
using qtrain::testing::TempDir;
using qtrain::testing::write_file;

constexpr double kCifar10Mean[3] = {0.4914, 0.4822, 0.4465};
constexpr double kCifar10Std[3] = {0.2470, 0.2435, 0.2616};
constexpr double kImageNetMean[3] = {0.485, 0.456, 0.406};
constexpr double kImageNetStd[3] = {0.229, 0.224, 0.225};

DataConfig data_config_from(const std::string& yaml) {
  auto source = std::make_shared<ConfigSource>();
  source->file = "test.yaml";
  ConfigNode root(YAML::Load(yaml), "", source);
  ConfigNode section = root.child("data");
  return parse_data_config(section);
}

// CIFAR-10 folder: data_batch_b holds records 2(b-1), 2(b-1)+1 (labels (i * 3) % 10), test_batch 3
// records numbered from 100 (labels 9, 8, 7).
void write_cifar10_folder(const TempDir& dir) {
  for (uint32_t b = 1; b <= 5; ++b) {
    Bytes file;
    for (uint32_t i = 2 * (b - 1); i < 2 * b; ++i)
      qtrain::testing::append_cifar_record(file, {static_cast<uint8_t>((i * 3) % 10)}, cifar_pixels(i));
    write_file(dir.file("data_batch_" + std::to_string(b) + ".bin"), file);
  }
  Bytes test;
  for (uint32_t i = 0; i < 3; ++i)
    qtrain::testing::append_cifar_record(test, {static_cast<uint8_t>(9 - i)}, cifar_pixels(100 + i));
  write_file(dir.file("test_batch.bin"), test);
}

// CIFAR-100 folder: train record i has coarse label i % 20 and fine label (i * 7) % 100.
void write_cifar100_folder(const TempDir& dir, uint32_t train = 4) {
  Bytes file;
  for (uint32_t i = 0; i < train; ++i)
    qtrain::testing::append_cifar_record(file, {static_cast<uint8_t>(i % 20), static_cast<uint8_t>((i * 7) % 100)},
                                         cifar_pixels(i));
  write_file(dir.file("train.bin"), file);
  Bytes test;
  qtrain::testing::append_cifar_record(test, {19, 99}, cifar_pixels(50));
  write_file(dir.file("test.bin"), test);
}

std::vector<float> read_sample(const Dataset& d, int64_t index, int32_t* label) {
  std::vector<float> x(static_cast<size_t>(shape_numel(d.sample_shape())));
  d.read(index, x.data(), label);
  return x;
}

std::vector<float> read_augmented(const Dataset& d, int64_t index, PhiloxKey key, int32_t* label) {
  std::vector<float> x(static_cast<size_t>(shape_numel(d.sample_shape())));
  d.read_augmented(index, key, x.data(), label);
  return x;
}

float cifar10_normalized(int c, uint8_t pixel) {
  return static_cast<float>((pixel / 255.0 - kCifar10Mean[c]) / kCifar10Std[c]);
}

// Every sample of every batch of one epoch, concatenated.
std::vector<float> epoch_values(Loader& loader, int64_t epoch, int64_t first_batch = 0) {
  loader.start_epoch(epoch, first_batch);
  std::vector<float> all;
  while (auto b = loader.next()) all.insert(all.end(), b->x.data<float>(), b->x.data<float>() + b->x.numel());
  return all;
}

void write_jpeg(const std::string& path, const Bytes& pixels, int width, int height, int components, int quality = 95) {
  write_file(path, qtrain::testing::encode_jpeg(pixels, width, height, components, quality));
}

}  // namespace

// -------------------------------------------------------------------------------------------- CIFAR

TEST_CASE("cifar10: record order, labels and per-channel normalization", "[data][cifar]") {
  TempDir dir;
  write_cifar10_folder(dir);
  auto train = open_cifar(dir.path().string(), Split::train, {});
  REQUIRE(train->size() == 10);
  REQUIRE(train->sample_shape() == Shape{3, 32, 32});
  REQUIRE(train->num_classes() == 10);
  for (int64_t i = 0; i < 10; ++i) {
    int32_t label = -1;
    const auto x = read_sample(*train, i, &label);
    REQUIRE(label == (i * 3) % 10);  // data_batch_1..5 concatenated in order
    for (int c = 0; c < 3; ++c)
      for (int y : {0, 7, 31})
        for (int xx : {0, 13, 31})
          REQUIRE(x[static_cast<size_t>((c * 32 + y) * 32 + xx)] ==
                  Approx(cifar10_normalized(c, cifar_pixel(static_cast<uint32_t>(i), c, y, xx))).epsilon(1e-6));
  }
  auto test = open_cifar(dir.path().string(), Split::test, {});
  REQUIRE(test->size() == 3);
  int32_t label = -1;
  const auto x = read_sample(*test, 2, &label);
  REQUIRE(label == 7);
  // Test image 102, green plane (c = 1), row 1, column 2: (102 * 31 + 85 + 8 + 2) % 256.
  REQUIRE(cifar_pixel(102, 1, 1, 2) == 185);  // (3162 + 95) % 256
  REQUIRE(x[1024 + 32 + 2] == Approx((185 / 255.0 - 0.4822) / 0.2435));

  // data.mean / data.std override the standard values; data.limit_* keep the first records.
  DataConfig config = data_config_from("data: {dataset: cifar10, path: " + dir.path().string() +
                                       ", mean: [0, 0.5, 1], std: [1, 0.5, 0.25], limit_train: 3}\n");
  auto custom = open_dataset(config, Split::train);
  REQUIRE(custom->sample_shape()[0] == dataset_info("cifar10").channels);  // what data.mean is checked against
  REQUIRE(custom->size() == 3);
  const auto y = read_sample(*custom, 0, &label);
  REQUIRE(y[0] == Approx(cifar_pixel(0, 0, 0, 0) / 255.0));
  REQUIRE(y[1024] == Approx((cifar_pixel(0, 1, 0, 0) / 255.0 - 0.5) / 0.5));
  REQUIRE(y[2048] == Approx((cifar_pixel(0, 2, 0, 0) / 255.0 - 1) / 0.25));
}

TEST_CASE("cifar100: fine labels by default, coarse on request", "[data][cifar]") {
  TempDir dir;
  write_cifar100_folder(dir);
  DataConfig fine = data_config_from("data: {dataset: cifar100, path: " + dir.path().string() + "}\n");
  auto train = open_dataset(fine, Split::train);
  REQUIRE(train->num_classes() == 100);
  REQUIRE(train->size() == 4);
  int32_t label = -1;
  const auto x = read_sample(*train, 3, &label);
  REQUIRE(label == 21);
  REQUIRE(x[0] == Approx((cifar_pixel(3, 0, 0, 0) / 255.0 - 0.5071) / 0.2673));  // CIFAR-100's statistics
  DataConfig coarse = data_config_from("data: {dataset: cifar100, label: coarse, path: " + dir.path().string() + "}\n");
  auto c = open_dataset(coarse, Split::train);
  REQUIRE(c->num_classes() == 20);
  read_sample(*c, 3, &label);
  REQUIRE(label == 3);
  auto test = open_dataset(coarse, Split::test);
  read_sample(*test, 0, &label);
  REQUIRE(label == 19);
}

TEST_CASE("cifar: truncated files, labels out of range and missing files are named", "[data][cifar]") {
  TempDir dir;
  write_cifar10_folder(dir);
  Bytes cut;
  qtrain::testing::append_cifar_record(cut, {1}, cifar_pixels(0));
  qtrain::testing::append_cifar_record(cut, {2}, cifar_pixels(1));
  cut.resize(cut.size() - 5);  // 6141 bytes
  write_file(dir.file("data_batch_3.bin"), cut);
  REQUIRE_THROWS_AS(open_cifar(dir.path().string(), Split::train, {}), InputError);
  REQUIRE_THROWS_WITH(open_cifar(dir.path().string(), Split::train, {}),
                      Catch::Contains(dir.file("data_batch_3.bin") + ": truncated") &&
                          Catch::Contains("6141 bytes is not a whole number of 3073-byte records (1 label byte + 3072 "
                                          "pixel bytes)"));
  write_file(dir.file("data_batch_3.bin"), {});
  REQUIRE_THROWS_WITH(open_cifar(dir.path().string(), Split::train, {}), Catch::Contains("0 bytes"));
  REQUIRE_NOTHROW(open_cifar(dir.path().string(), Split::test, {}));  // the test split has its own file

  Bytes bad;
  qtrain::testing::append_cifar_record(bad, {3}, cifar_pixels(0));
  qtrain::testing::append_cifar_record(bad, {10}, cifar_pixels(1));
  write_file(dir.file("test_batch.bin"), bad);
  REQUIRE_THROWS_WITH(open_cifar(dir.path().string(), Split::test, {}),
                      Catch::Contains(dir.file("test_batch.bin") + ": record 1 has label 10, out of range for 10 "
                                                                   "classes (0..9)"));

  TempDir hundred;
  write_cifar100_folder(hundred);
  Bytes fine;
  qtrain::testing::append_cifar_record(fine, {4, 100}, cifar_pixels(0));
  write_file(hundred.file("test.bin"), fine);
  CifarOptions o;
  o.variant = CifarVariant::cifar100;
  REQUIRE_THROWS_WITH(open_cifar(hundred.path().string(), Split::test, o),
                      Catch::Contains("record 0 has fine label 100, out of range for 100 classes (0..99)"));
  o.coarse_labels = true;  // both labels are checked whichever is used
  REQUIRE_THROWS_WITH(open_cifar(hundred.path().string(), Split::test, o), Catch::Contains("fine label 100"));
  Bytes size100(3073);
  write_file(hundred.file("train.bin"), size100);
  REQUIRE_THROWS_WITH(open_cifar(hundred.path().string(), Split::train, o),
                      Catch::Contains("3073 bytes is not a whole number of 3074-byte records (2 label bytes"));

  fs::remove(dir.file("data_batch_2.bin"));
  fs::remove(dir.file("data_batch_4.bin"));
  REQUIRE_THROWS_WITH(open_cifar(dir.path().string(), Split::train, {}),
                      Catch::Contains(dir.path().string() + ": missing data_batch_2.bin and data_batch_4.bin") &&
                          Catch::Contains("cifar-10-binary.tar.gz"));
  REQUIRE_THROWS_WITH(open_cifar("/nonexistent/cifar", Split::train, {}),
                      Catch::Contains("data folder '/nonexistent/cifar' for dataset cifar10 does not exist"));
}

// ------------------------------------------------------------------------------------- augmentation

TEST_CASE("augment: crop_planes crops, pads with black and mirrors", "[data][augment]") {
  // Two 4x4 planes, pixel = 10 * plane + 4 * y + x + 1; tables map v to v (plane 0) and -v (plane 1).
  Bytes planes;
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 16; ++i) planes.push_back(static_cast<uint8_t>(10 * c + i + 1));
  std::vector<float> tables(512);
  for (int v = 0; v < 256; ++v) {
    tables[static_cast<size_t>(v)] = static_cast<float>(v);
    tables[static_cast<size_t>(256 + v)] = -static_cast<float>(v);
  }
  std::vector<float> out(2 * 3 * 3);
  crop_planes(planes.data(), 2, 4, CropBox{1, 0, 3, 3}, false, tables.data(), out.data());
  REQUIRE(out == std::vector<float>{5, 6, 7, 9, 10, 11, 13, 14, 15, -15, -16, -17, -19, -20, -21, -23, -24, -25});
  crop_planes(planes.data(), 2, 4, CropBox{1, 0, 3, 3}, true, tables.data(), out.data());
  REQUIRE(std::vector<float>(out.begin(), out.begin() + 9) == std::vector<float>{7, 6, 5, 11, 10, 9, 15, 14, 13});
  // Window at (-1, 2): the top row and the right column lie in the padding (black = table[0] = 0).
  crop_planes(planes.data(), 2, 4, CropBox{-1, 2, 3, 3}, false, tables.data(), out.data());
  REQUIRE(std::vector<float>(out.begin(), out.begin() + 9) == std::vector<float>{0, 0, 0, 3, 4, 0, 7, 8, 0});
  crop_planes(planes.data(), 2, 4, CropBox{-1, 2, 3, 3}, true, tables.data(), out.data());
  REQUIRE(std::vector<float>(out.begin(), out.begin() + 9) == std::vector<float>{0, 0, 0, 0, 4, 3, 0, 8, 7});
}

TEST_CASE("augment: random crops are deterministic per key, cover every offset, pad with black", "[data][augment]") {
  TempDir dir;
  write_cifar10_folder(dir);
  DataConfig config = data_config_from("data: {dataset: cifar10, path: " + dir.path().string() +
                                       ", augment: {random_crop: {size: 32, padding: 4}, horizontal_flip: true}}\n");
  auto train = open_dataset(config, Split::train);
  auto test = open_dataset(config, Split::test);
  REQUIRE(train->sample_shape() == Shape{3, 32, 32});
  int32_t label = -1;
  std::set<int64_t> tops, lefts;
  int flips = 0, padded_checked = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const int64_t index = i % 10;
    const PhiloxKey key = augment_key(7, i / 10, index);
    const auto x = read_augmented(*train, index, key, &label);
    REQUIRE(label == (index * 3) % 10);
    REQUIRE(x == read_augmented(*train, index, key, &label));  // same key, same sample
    // The expected window, from the documented draws: top, left, then the flip.
    PhiloxWords words(key);
    const CropBox box = draw_random_crop(words, 32, 32, 4);
    const bool flip = draw_flip(words);
    REQUIRE(box.top >= -4);
    REQUIRE(box.top <= 4);
    tops.insert(box.top);
    lefts.insert(box.left);
    flips += flip;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int xx = 0; xx < 32; ++xx) {
          const int64_t sy = box.top + y, sx = box.left + (flip ? 31 - xx : xx);
          const bool inside = sy >= 0 && sy < 32 && sx >= 0 && sx < 32;
          const uint8_t pixel =
              inside ? cifar_pixel(static_cast<uint32_t>(index), c, static_cast<int>(sy), static_cast<int>(sx)) : 0;
          padded_checked += !inside;
          REQUIRE(x[static_cast<size_t>((c * 32 + y) * 32 + xx)] == Approx(cifar10_normalized(c, pixel)));
        }
  }
  REQUIRE(tops.size() == 9);  // -4 .. 4
  REQUIRE(lefts.size() == 9);
  REQUIRE(flips > 70);  // 200 fair coin flips with fixed keys: 100 expected
  REQUIRE(flips < 130);
  REQUIRE(padded_checked > 0);
  // The test split never augments: any key reads the plain sample.
  REQUIRE(read_augmented(*test, 1, augment_key(7, 0, 1), &label) == read_sample(*test, 1, &label));
  // Different epochs give different crops of the same sample (some key among a few differs).
  bool differs = false;
  for (int64_t e = 1; e < 5; ++e)
    differs |= read_augmented(*train, 0, augment_key(7, e, 0), &label) !=
               read_augmented(*train, 0, augment_key(7, 0, 0), &label);
  REQUIRE(differs);
}

TEST_CASE("augment: smaller crops are random in training and central in testing", "[data][augment]") {
  TempDir dir;
  write_cifar10_folder(dir);
  DataConfig config = data_config_from("data: {dataset: cifar10, path: " + dir.path().string() +
                                       ", augment: {random_crop: {size: 28}}}\n");
  auto train = open_dataset(config, Split::train);
  auto test = open_dataset(config, Split::test);
  REQUIRE(train->sample_shape() == Shape{3, 28, 28});
  REQUIRE(test->sample_shape() == Shape{3, 28, 28});
  int32_t label = -1;
  const auto x = read_sample(*test, 0, &label);  // offset (32 - 28) / 2 = 2
  REQUIRE(x[0] == Approx(cifar10_normalized(0, cifar_pixel(100, 0, 2, 2))));
  REQUIRE(x[28 * 28 + 27] == Approx(cifar10_normalized(1, cifar_pixel(100, 1, 2, 29))));
  std::set<int64_t> tops;
  for (int64_t i = 0; i < 100; ++i) {
    PhiloxWords words(augment_key(3, 0, i));
    const CropBox box = draw_random_crop(words, 32, 28, 0);
    tops.insert(box.top);
    const auto y = read_augmented(*train, 0, augment_key(3, 0, i), &label);
    REQUIRE(y[0] ==
            Approx(cifar10_normalized(0, cifar_pixel(0, 0, static_cast<int>(box.top), static_cast<int>(box.left)))));
  }
  REQUIRE(tops == std::set<int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("augment: random resized crops stay in the image with torchvision's scale and ratio", "[data][augment]") {
  AugmentConfig a;
  a.random_resized_crop = true;
  double min_area = 1, max_area = 0;
  for (uint64_t i = 0; i < 500; ++i) {
    PhiloxWords words(derive_philox_key(1, i));
    const CropBox b = draw_random_resized_crop(words, 300, 400, a);
    REQUIRE(b.top >= 0);
    REQUIRE(b.left >= 0);
    REQUIRE(b.height >= 1);
    REQUIRE(b.width >= 1);
    REQUIRE(b.top + b.height <= 300);
    REQUIRE(b.left + b.width <= 400);
    const double area = static_cast<double>(b.height * b.width) / (300.0 * 400.0);
    min_area = std::min(min_area, area);
    max_area = std::max(max_area, area);
    // Accepted windows have a rounded ratio within [3/4, 4/3] (up to rounding of the sides).
    const double ratio = static_cast<double>(b.width) / static_cast<double>(b.height);
    REQUIRE(ratio >= 0.75 * 0.95);
    REQUIRE(ratio <= 4.0 / 3.0 * 1.05);
    PhiloxWords again(derive_philox_key(1, i));
    const CropBox c = draw_random_resized_crop(again, 300, 400, a);
    REQUIRE((c.top == b.top && c.left == b.left && c.height == b.height && c.width == b.width));
  }
  REQUIRE(min_area < 0.15);
  REQUIRE(min_area >= 0.079);
  REQUIRE(max_area > 0.8);
  // A 4 x 400 strip almost never fits a window: the fallback is the central window with ratio 4/3.
  a.scale_min = 0.9;
  PhiloxWords words(derive_philox_key(2, 0));
  const CropBox f = draw_random_resized_crop(words, 4, 400, a);
  REQUIRE((f.top == 0 && f.height == 4 && f.width == 5 && f.left == 197));
}

TEST_CASE("worker pool: every index once, the lowest failing index's error", "[data][loader]") {
  for (int threads : {1, 2, 4}) {
    WorkerPool pool(threads);
    REQUIRE(pool.threads() == threads);
    for (int round = 0; round < 20; ++round) {
      std::vector<std::atomic<int>> hits(97);
      pool.parallel_for(97, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
      for (auto& h : hits) REQUIRE(h.load() == 1);
    }
    std::atomic<int> calls{0};
    REQUIRE_THROWS_WITH(pool.parallel_for(50,
                                          [&](int64_t i) {
                                            ++calls;
                                            if (i == 31 || i == 12 || i == 40) input_error("item {} failed", i);
                                          }),
                        "item 12 failed");
    REQUIRE(calls.load() == 50);
    pool.parallel_for(0, [](int64_t) { FAIL("no items"); });
  }
}

TEST_CASE("loader: augmented batches are the same for any workers, prefetch and resume", "[data][loader][augment]") {
  TempDir dir;
  write_cifar10_folder(dir);
  DataConfig config = data_config_from("data: {dataset: cifar10, path: " + dir.path().string() +
                                       ", augment: {random_crop: {padding: 4}, horizontal_flip: true}}\n");
  auto train = open_dataset(config, Split::train);
  Loader serial(*train, {.batch_size = 3, .seed = 9, .prefetch = 1, .augment = true, .workers = 1});
  Loader parallel(*train, {.batch_size = 3, .seed = 9, .prefetch = 3, .augment = true, .workers = 3});
  const auto a = epoch_values(serial, 2);
  REQUIRE(a.size() == 10 * 3072);
  REQUIRE(a == epoch_values(parallel, 2));
  // Resuming at batch 2 gives the tail (samples 6..9 of the epoch).
  const auto tail = epoch_values(parallel, 2, 2);
  REQUIRE(tail == std::vector<float>(a.begin() + 6 * 3072, a.end()));
  REQUIRE(a != epoch_values(serial, 3));
  // Without augment the loader reads the plain samples.
  Loader plain(*train, {.batch_size = 4, .shuffle = false, .workers = 2});
  const auto p = epoch_values(plain, 0);
  int32_t label = -1;
  REQUIRE(std::vector<float>(p.begin() + 3072, p.begin() + 2 * 3072) == read_sample(*train, 1, &label));
}

// ------------------------------------------------------------------------------------------- resize

TEST_CASE("resample: matches PIL's bilinear resize (antialiased) within one level", "[data][resample]") {
  // A 9 x 7 RGB image; golden values from PIL 9.4 Image.resize(..., BILINEAR) of the same pixels.
  RgbImage image;
  image.height = 7;
  image.width = 9;
  for (int y = 0; y < 7; ++y)
    for (int x = 0; x < 9; ++x)
      for (int c = 0; c < 3; ++c)
        image.pixels.push_back(static_cast<uint8_t>((x * 37 + y * 61 + c * 101 + (x * y) % 7 * 13) % 256));
  const Normalization identity{{1, 1, 1}, {0, 0, 0}};
  auto check = [&](const SourceRect& rect, const CropBox& bounds, int64_t oh, int64_t ow, int c,
                   const std::vector<int>& golden) {
    std::vector<float> out(static_cast<size_t>(3 * oh * ow));
    resample_rgb(image, rect, bounds, oh, ow, false, identity, out.data());
    for (int64_t i = 0; i < oh * ow; ++i)
      REQUIRE(std::abs(out[static_cast<size_t>(c * oh * ow + i)] - golden[i]) <= 1.0f);
  };
  const SourceRect whole{0, 0, 7, 9};
  const CropBox all{0, 0, 7, 9};
  check(whole, all, 3, 4, 0, {92, 122, 108, 94, 121, 108, 145, 141, 146, 121, 89, 131});  // shrink
  check(whole, all, 3, 4, 2, {111, 110, 97, 113, 118, 81, 122, 135, 133, 152, 164, 146});
  check(whole, all, 11, 13, 0,  // enlarge
        {0,   20,  46,  71,  97,  122, 148, 174, 199, 205, 54,  20,  40,  28,  51,  81,  110, 140, 134, 83,  113,
         142, 158, 63,  50,  74,  67,  94,  130, 165, 186, 139, 7,   43,  78,  106, 78,  93,  121, 105, 137, 179,
         220, 146, 74,  21,  63,  103, 138, 115, 136, 168, 144, 131, 135, 181, 108, 61,  68,  92,  129, 169, 152,
         135, 122, 183, 86,  21,  73,  70,  87,  140, 130, 154, 200, 189, 103, 6,   222, 129, 57,  74,  108, 135,
         154, 190, 215, 231, 226, 146, 53,  191, 140, 98,  98,  141, 153, 123, 170, 191, 193, 193, 151, 100, 67,
         109, 147, 153, 165, 129, 32,  45,  54,  61,  67,  105, 147, 82,  141, 196, 208, 135, 70,  31,  44,  56,
         69,  81,  136, 194, 110, 172, 231, 247, 106, 24,  41,  58,  74,  91,  107, 166, 228});
  // A crop resized on its own (PIL: crop((2, 1, 8, 6)).resize((4, 3))): nothing outside it leaks in.
  check(SourceRect{1, 2, 5, 6}, CropBox{1, 2, 5, 6}, 3, 4, 1, {64, 116, 183, 204, 148, 155, 158, 94, 55, 57, 112, 125});
}

TEST_CASE("resample: uniform images stay uniform, linear ramps stay linear, flips mirror", "[data][resample]") {
  RgbImage image;
  image.height = 40;
  image.width = 64;
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 64; ++x) image.pixels.insert(image.pixels.end(), {static_cast<uint8_t>(2 * x + 10), 77, 200});
  const double mean[3] = {0.5, 0.5, 0.5}, std[3] = {0.25, 0.5, 1.0};
  const Normalization norm = make_normalization(mean, std);
  // Integer reductions (filter centred between samples), identity and enlargement reproduce a ramp
  // exactly away from the borders; other factors sample the triangle asymmetrically (PIL does the same,
  // as the golden test above checks).
  for (int64_t ow : {16, 32, 64, 150}) {
    std::vector<float> out(static_cast<size_t>(3 * 10 * ow)), flipped(out.size());
    resample_rgb(image, SourceRect{0, 0, 40, 64}, CropBox{0, 0, 40, 64}, 10, ow, false, norm, out.data());
    resample_rgb(image, SourceRect{0, 0, 40, 64}, CropBox{0, 0, 40, 64}, 10, ow, true, norm, flipped.data());
    const double scale = 64.0 / static_cast<double>(ow), support = std::max(scale, 1.0);
    for (int64_t y = 0; y < 10; ++y)
      for (int64_t x = 0; x < ow; ++x) {
        const size_t i = static_cast<size_t>(y * ow + x);
        REQUIRE(out[10 * ow + i] == Approx((77 / 255.0 - 0.5) / 0.5).margin(1e-5));
        REQUIRE(out[20 * ow + i] == Approx((200 / 255.0 - 0.5) / 1.0).margin(1e-5));
        REQUIRE(flipped[i] == out[static_cast<size_t>(y * ow + ow - 1 - x)]);
        const double center = (static_cast<double>(x) + 0.5) * scale;
        if (center - support >= 0 && center + support <= 64) {  // the filter lies inside: exact on a ramp
          const double v = 2 * (center - 0.5) + 10;
          REQUIRE(out[i] == Approx((v / 255.0 - 0.5) / 0.25).margin(1e-4));
        }
      }
  }
}

// --------------------------------------------------------------------------------------------- JPEG

TEST_CASE("jpeg: RGB, grayscale and CMYK files decode to RGB", "[data][jpeg]") {
  TempDir dir;
  Bytes rgb;
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 24; ++x)
      rgb.insert(rgb.end(), {static_cast<uint8_t>(x * 10), static_cast<uint8_t>(y * 15), 128});
  write_jpeg(dir.file("rgb.jpg"), rgb, 24, 16, 3, 100);
  const RgbImage a = read_jpeg(dir.file("rgb.jpg"));
  REQUIRE(a.height == 16);
  REQUIRE(a.width == 24);
  REQUIRE(a.pixels.size() == 16 * 24 * 3);
  // Chroma subsampling blurs the colour gradient a little even at quality 100.
  double error = 0;
  for (size_t i = 0; i < rgb.size(); ++i) {
    REQUIRE(std::abs(int(a.pixels[i]) - int(rgb[i])) <= 12);
    error += std::abs(int(a.pixels[i]) - int(rgb[i]));
  }
  REQUIRE(error / static_cast<double>(rgb.size()) < 2.0);

  write_jpeg(dir.file("gray.jpg"), Bytes(8 * 8, 90), 8, 8, 1);
  const RgbImage g = read_jpeg(dir.file("gray.jpg"));
  for (size_t i = 0; i < g.pixels.size(); ++i) REQUIRE(std::abs(int(g.pixels[i]) - 90) <= 1);

  // libjpeg writes CMYK with an Adobe marker, which marks the values as inverted: R = C * K / 255.
  Bytes cmyk;
  for (int i = 0; i < 64; ++i) cmyk.insert(cmyk.end(), {255, 0, 128, 200});
  write_jpeg(dir.file("cmyk.jpg"), cmyk, 8, 8, 4, 100);
  const RgbImage k = read_jpeg(dir.file("cmyk.jpg"));
  REQUIRE(k.width == 8);
  for (size_t i = 0; i < 64; ++i) {
    REQUIRE(std::abs(int(k.pixels[i * 3]) - 200) <= 3);
    REQUIRE(std::abs(int(k.pixels[i * 3 + 1]) - 0) <= 3);
    REQUIRE(std::abs(int(k.pixels[i * 3 + 2]) - 100) <= 3);
  }
}

TEST_CASE("jpeg: malformed files name the file and libjpeg's reason", "[data][jpeg]") {
  TempDir dir;
  Bytes noisy;
  for (int i = 0; i < 64 * 64 * 3; ++i) noisy.push_back(static_cast<uint8_t>((i * 2654435761u) >> 24));
  const Bytes good = qtrain::testing::encode_jpeg(noisy, 64, 64, 3);
  write_file(dir.file("cut.jpg"), Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2)));
  REQUIRE_THROWS_AS(read_jpeg(dir.file("cut.jpg")), InputError);
  REQUIRE_THROWS_WITH(read_jpeg(dir.file("cut.jpg")),
                      Catch::Contains(dir.file("cut.jpg") + ": cannot decode JPEG: Premature end of JPEG file"));
  write_file(dir.file("header.jpg"), Bytes(good.begin(), good.begin() + 40));
  REQUIRE_THROWS_WITH(read_jpeg(dir.file("header.jpg")),
                      Catch::Contains(dir.file("header.jpg") + ": cannot decode JPEG: "));
  write_file(dir.file("png.jpg"), Bytes{0x89, 'P', 'N', 'G', 13, 10, 26, 10});
  REQUIRE_THROWS_WITH(
      read_jpeg(dir.file("png.jpg")),
      Catch::Contains(dir.file("png.jpg") + ": not a JPEG file (it does not start with the JPEG marker"));
  Bytes bad_marker = good;
  bad_marker[2] = 0xFF;
  bad_marker[3] = 0xD9;  // an end-of-image marker right after the start: no image
  write_file(dir.file("marker.jpg"), bad_marker);
  REQUIRE_THROWS_WITH(read_jpeg(dir.file("marker.jpg")), Catch::Contains("cannot decode JPEG"));
  REQUIRE_THROWS_WITH(read_jpeg(dir.file("absent.jpg")), Catch::Contains("absent.jpg: cannot open the file"));
}

TEST_CASE("jpeg: a header declaring a huge image is refused before anything is allocated", "[data][jpeg]") {
  // The 64x64 image with its frame header (SOF0: FF C0, length, precision, height, width) claiming
  // 60000x60000: decoding used to allocate and clear 10.8 GB for the pixels before noticing that the
  // data is missing (a std::bad_alloc, or the machine's memory, per loader thread).
  TempDir dir;
  Bytes bomb = qtrain::testing::encode_jpeg(qtrain::testing::solid_rgb(64, 64, 1, 2, 3), 64, 64, 3);
  size_t sof = 0;
  while (sof + 9 < bomb.size() && !(bomb[sof] == 0xFF && bomb[sof + 1] == 0xC0)) ++sof;
  REQUIRE(sof + 9 < bomb.size());
  for (size_t at : {sof + 5, sof + 7}) {
    bomb[at] = 60000 >> 8;
    bomb[at + 1] = 60000 & 0xFF;
  }
  write_file(dir.file("bomb.jpg"), bomb);
  REQUIRE_THROWS_WITH(read_jpeg(dir.file("bomb.jpg")),
                      Catch::Contains(dir.file("bomb.jpg") + ": the JPEG header declares 60000x60000 pixels"));
}

// -------------------------------------------------------------------------------------- imagefolder

namespace {

// train/{bird, ant, cat}, val/{ant, cat}: solid-colour JPEGs of assorted sizes, a non-JPEG and a
// hidden file that must be ignored.
void write_image_tree(const TempDir& dir) {
  for (const char* d : {"train/bird", "train/ant", "train/cat", "val/ant", "val/cat"})
    fs::create_directories(dir.file(d));
  write_jpeg(dir.file("train/bird/b2.JPEG"), qtrain::testing::solid_rgb(40, 30, 200, 30, 60), 40, 30, 3);
  write_jpeg(dir.file("train/bird/b1.jpg"), qtrain::testing::solid_rgb(20, 50, 10, 220, 90), 20, 50, 3);
  write_jpeg(dir.file("train/ant/a1.jpeg"), qtrain::testing::solid_rgb(64, 64, 128, 128, 128), 64, 64, 3);
  write_jpeg(dir.file("train/cat/c1.JPG"), qtrain::testing::solid_rgb(300, 200, 0, 0, 255), 300, 200, 3);
  write_jpeg(dir.file("train/cat/c0.jpg"), Bytes(17 * 23, 180), 17, 23, 1);  // grayscale, 17 wide
  write_file(dir.file("train/cat/notes.txt"), {'h', 'i'});
  write_file(dir.file("train/cat/.hidden.jpg"), {'x'});
  write_jpeg(dir.file("val/cat/v.jpg"), qtrain::testing::solid_rgb(33, 33, 5, 6, 7), 33, 33, 3);
  write_jpeg(dir.file("val/ant/v.jpg"), qtrain::testing::solid_rgb(48, 32, 250, 250, 0), 48, 32, 3);
}

void require_uniform(const std::vector<float>& x, int64_t side, const int rgb[3], double tolerance_levels) {
  for (int c = 0; c < 3; ++c) {
    const double expected = (rgb[c] / 255.0 - kImageNetMean[c]) / kImageNetStd[c];
    const double margin = tolerance_levels / 255.0 / kImageNetStd[c];
    for (int64_t i = 0; i < side * side; ++i)
      REQUIRE(x[static_cast<size_t>(c * side * side + i)] == Approx(expected).margin(margin));
  }
}

}  // namespace

TEST_CASE("imagefolder: classes sorted by folder, files sorted, other files ignored", "[data][imagefolder]") {
  TempDir dir;
  write_image_tree(dir);
  DataConfig config = data_config_from("data: {dataset: imagefolder, path: " + dir.path().string() +
                                       ", image_size: 16, eval_resize: 20}\n");
  auto train = open_dataset(config, Split::train);
  auto val = open_dataset(config, Split::test);
  REQUIRE(train->num_classes() == 3);  // ant 0, bird 1, cat 2
  REQUIRE(val->num_classes() == 3);
  REQUIRE(train->size() == 5);
  REQUIRE(val->size() == 2);
  REQUIRE(train->sample_shape() == Shape{3, 16, 16});
  // Order: ant/a1, bird/b1, bird/b2, cat/c0, cat/c1.
  const int colours[5][3] = {{128, 128, 128}, {10, 220, 90}, {200, 30, 60}, {180, 180, 180}, {0, 0, 255}};
  const int32_t labels[5] = {0, 1, 1, 2, 2};
  for (int64_t i = 0; i < 5; ++i) {
    int32_t label = -1;
    const auto x = read_sample(*train, i, &label);
    REQUIRE(label == labels[i]);
    require_uniform(x, 16, colours[i], 3);
  }
  int32_t label = -1;
  read_sample(*val, 0, &label);
  REQUIRE(label == 0);
  read_sample(*val, 1, &label);
  REQUIRE(label == 2);
  DataConfig limited =
      data_config_from("data: {dataset: imagefolder, path: " + dir.path().string() + ", limit_train: 2}\n");
  REQUIRE(open_dataset(limited, Split::train)->size() == 2);
  REQUIRE(open_dataset(limited, Split::train)->sample_shape() == Shape{3, 224, 224});
  REQUIRE(open_dataset(limited, Split::test)->sample_shape()[0] == dataset_info("imagefolder").channels);
}

TEST_CASE("imagefolder: random resized crops and flips keep shape and colour, deterministically",
          "[data][imagefolder][augment]") {
  TempDir dir;
  write_image_tree(dir);
  DataConfig config = data_config_from("data: {dataset: imagefolder, path: " + dir.path().string() +
                                       ", image_size: 24, augment: {random_resized_crop: true, "
                                       "horizontal_flip: true}}\n");
  REQUIRE(config.dataset_options_as<ImageFolderOptions>().eval_resize == 27);  // 24 * 256 / 224, rounded
  auto train = open_dataset(config, Split::train);
  const int colours[5][3] = {{128, 128, 128}, {10, 220, 90}, {200, 30, 60}, {180, 180, 180}, {0, 0, 255}};
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      int32_t label = -1;
      const auto x = read_augmented(*train, i, augment_key(4, epoch, i), &label);
      REQUIRE(x.size() == 3 * 24 * 24);
      require_uniform(x, 24, colours[i], 3);
      REQUIRE(x == read_augmented(*train, i, augment_key(4, epoch, i), &label));
    }
  // The same through a loader with several workers and with one.
  Loader one(*train, {.batch_size = 2, .seed = 4, .augment = true, .workers = 1});
  Loader four(*train, {.batch_size = 2, .seed = 4, .augment = true, .workers = 4});
  REQUIRE(epoch_values(one, 1) == epoch_values(four, 1));
}

TEST_CASE("imagefolder: evaluation resizes the shorter side and crops the centre", "[data][imagefolder]") {
  // A 64 x 32 image: red columns 0-15, green 16-47, blue 48-63. Resize(16) makes it 32 x 16 and
  // CenterCrop(16) keeps resized columns 8-23, i.e. source columns 16-47: green, bar the edges.
  TempDir dir;
  fs::create_directories(dir.file("train/only"));
  Bytes pixels;
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 64; ++x) {
      if (x < 16)
        pixels.insert(pixels.end(), {255, 0, 0});
      else if (x < 48)
        pixels.insert(pixels.end(), {0, 255, 0});
      else
        pixels.insert(pixels.end(), {0, 0, 255});
    }
  write_jpeg(dir.file("train/only/wide.jpg"), pixels, 64, 32, 3, 100);
  ImageFolderOptions o;
  o.image_size = 16;
  o.eval_resize = 16;
  auto train = open_imagefolder(dir.path().string(), Split::train, o);
  int32_t label = -1;
  const auto x = read_sample(*train, 0, &label);
  const int green[3] = {0, 255, 0};
  std::vector<float> inner;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 16; ++y)
      for (int xx = 2; xx < 14; ++xx) inner.push_back(x[static_cast<size_t>((c * 16 + y) * 16 + xx)]);
  for (int c = 0; c < 3; ++c) {
    const double expected = (green[c] / 255.0 - kImageNetMean[c]) / kImageNetStd[c];
    for (size_t i = 0; i < 16 * 12; ++i)
      REQUIRE(inner[c * 16 * 12 + i] == Approx(expected).margin(12 / 255.0 / kImageNetStd[c]));
  }
}

TEST_CASE("imagefolder: empty class folders, missing folders and bad JPEGs are reported", "[data][imagefolder]") {
  TempDir dir;
  write_image_tree(dir);
  fs::create_directories(dir.file("train/dog"));
  write_file(dir.file("train/dog/readme.png"), {1, 2, 3});
  REQUIRE_THROWS_WITH(open_imagefolder(dir.path().string(), Split::train, {}),
                      Catch::Contains(dir.file("train/dog") + ": class folder holds no JPEG files") &&
                          Catch::Contains("1 file(s) with other extensions were ignored"));
  fs::remove_all(dir.file("train/dog"));
  fs::create_directories(dir.file("val/zebra"));
  REQUIRE_NOTHROW(open_imagefolder(dir.path().string(), Split::train, {}));
  REQUIRE_THROWS_WITH(open_imagefolder(dir.path().string(), Split::test, {}),
                      Catch::Contains("class folder 'zebra' has no counterpart in " + dir.file("train")));
  fs::remove_all(dir.file("val"));
  REQUIRE_THROWS_WITH(open_imagefolder(dir.path().string(), Split::test, {}),
                      Catch::Contains(dir.file("val") + ": the validation (test split) folder not found"));

  // A truncated JPEG is found when read, with its path; through the loader it surfaces in next().
  Bytes noisy;
  for (int i = 0; i < 32 * 32 * 3; ++i) noisy.push_back(static_cast<uint8_t>((i * 2654435761u) >> 24));
  Bytes jpeg = qtrain::testing::encode_jpeg(noisy, 32, 32, 3);
  jpeg.resize(jpeg.size() * 2 / 3);
  write_file(dir.file("train/bird/b3.jpg"), jpeg);
  auto train = open_imagefolder(dir.path().string(), Split::train, {});
  REQUIRE(train->size() == 6);
  std::vector<float> x(static_cast<size_t>(shape_numel(train->sample_shape())));
  int32_t label = -1;
  REQUIRE_THROWS_WITH(train->read(3, x.data(), &label),
                      Catch::Contains(dir.file("train/bird/b3.jpg") + ": cannot decode JPEG"));
  Loader loader(*train, {.batch_size = 6, .shuffle = false, .workers = 3});
  loader.start_epoch(0);
  REQUIRE_THROWS_WITH(loader.next(), Catch::Contains("b3.jpg: cannot decode JPEG"));

  // A pipe named like a JPEG blocked the loader thread that opened it (a hang); it is refused when the
  // index is built, as is a dangling link.
  TempDir piped;
  write_image_tree(piped);
  REQUIRE(::mkfifo(piped.file("train/ant/a2.jpg").c_str(), 0644) == 0);
  REQUIRE_THROWS_WITH(open_imagefolder(piped.path().string(), Split::train, {}),
                      Catch::Contains(piped.file("train/ant/a2.jpg") + ": not a regular file"));
  fs::remove(piped.file("train/ant/a2.jpg"));
  fs::create_symlink(piped.file("nowhere.jpg"), piped.file("train/ant/a2.jpg"));
  REQUIRE_THROWS_WITH(open_imagefolder(piped.path().string(), Split::train, {}),
                      Catch::Contains(piped.file("train/ant/a2.jpg") + ": not a regular file"));

  // A link to itself as a class folder: its status query threw std::filesystem::filesystem_error.
  fs::remove(piped.file("train/ant/a2.jpg"));
  fs::create_symlink(piped.file("train/loop"), piped.file("train/loop"));
  REQUIRE_THROWS_WITH(open_imagefolder(piped.path().string(), Split::train, {}),
                      Catch::Contains(piped.file("train/loop") + ": cannot list the image folder: Too many levels of "
                                                                 "symbolic links"));

  TempDir empty;
  fs::create_directories(empty.file("train"));
  REQUIRE_THROWS_WITH(open_imagefolder(empty.path().string(), Split::train, {}),
                      Catch::Contains(empty.file("train") + ": no class folders"));
  REQUIRE_THROWS_WITH(open_imagefolder("/nonexistent/imagenet", Split::train, {}),
                      Catch::Contains("data folder '/nonexistent/imagenet' for dataset imagefolder does not exist"));
}

// ------------------------------------------------------------------------------------------- config

TEST_CASE("data config: image datasets and augment keys", "[data][config]") {
  DataConfig c = data_config_from(
      "data:\n  dataset: cifar10\n  path: x\n  workers: 3\n  augment:\n    random_crop: {size: 28, padding: 2}\n"
      "    horizontal_flip: true\n");
  REQUIRE(c.dataset == "cifar10");
  REQUIRE(c.workers == 3);
  REQUIRE(c.augment.random_crop);
  REQUIRE(c.augment.crop_size == 28);
  REQUIRE(c.augment.crop_padding == 2);
  REQUIRE(c.augment.horizontal_flip);
  REQUIRE(!c.augment.random_resized_crop);
  REQUIRE(loader_workers(c) == 3);
  DataConfig d = data_config_from("data: {dataset: cifar100, path: x, label: coarse}\n");
  REQUIRE(d.dataset_options_as<CifarOptions>().coarse_labels);
  REQUIRE(!d.augment.any());
  REQUIRE(loader_workers(d) == 1);
  DataConfig i = data_config_from(
      "data: {dataset: imagefolder, path: x, image_size: 128, augment: {random_resized_crop: {scale: [0.25, 1], "
      "ratio: [0.5, 2]}}}\n");
  REQUIRE(i.dataset_options_as<ImageFolderOptions>().image_size == 128);
  REQUIRE(i.dataset_options_as<ImageFolderOptions>().eval_resize == 146);
  REQUIRE(i.augment.random_resized_crop);
  REQUIRE(i.augment.scale_min == 0.25);
  REQUIRE(i.augment.ratio_max == 2);
  REQUIRE(loader_workers(i) >= 1);
  DataConfig defaults = data_config_from("data: {dataset: imagefolder, path: x}\n");
  REQUIRE(defaults.dataset_options_as<ImageFolderOptions>().image_size == 224);
  REQUIRE(defaults.dataset_options_as<ImageFolderOptions>().eval_resize == 256);
  REQUIRE(data_config_from("data: {dataset: imagefolder, path: x, augment: {random_resized_crop: true}}\n")
              .augment.scale_min == 0.08);
  REQUIRE_THROWS_WITH(data_config_from("data: {dataset: cifar10, path: x, mean: [0.5]}\n"),
                      Catch::Contains("data.mean has 1 value(s) but dataset cifar10 has 3 channel(s)"));
}

TEST_CASE("data config: parsing leaves the config unchanged (it is saved for resume)", "[data][config]") {
  // The trainer writes the parsed YAML to config.resolved.yaml, which a resumed run reads back.
  auto source = std::make_shared<ConfigSource>();
  source->file = "test.yaml";
  const std::string text =
      "data: {dataset: imagefolder, path: x, augment: {random_resized_crop: {scale: [0.3, 0.9]}, horizontal_flip: "
      "true}}\n";
  YAML::Node yaml = YAML::Load(text);
  ConfigNode root(yaml, "", source);
  ConfigNode section = root.child("data");
  parse_data_config(section);
  REQUIRE(YAML::Dump(yaml) == YAML::Dump(YAML::Load(text)));
  YAML::Node cifar = YAML::Load("data: {dataset: cifar10, path: x, augment: {random_crop: {size: 28, padding: 4}}}\n");
  ConfigNode cifar_root(cifar, "", source);
  ConfigNode cifar_section = cifar_root.child("data");
  parse_data_config(cifar_section);
  REQUIRE(cifar["data"]["augment"]["random_crop"]["padding"].as<int>() == 4);
  REQUIRE(cifar["data"]["augment"]["random_crop"]["size"].as<int>() == 28);
}

TEST_CASE("data config: image dataset errors name the key", "[data][config]") {
  auto error = [](const std::string& yaml) {
    try {
      data_config_from(yaml);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error("data: {path: x, augment: {horizontal_flip: true}}\n"),
             Catch::Contains("data.augment.horizontal_flip applies to datasets cifar10, cifar100 and imagefolder, "
                             "not mnist"));
  CHECK_THAT(error("data: {dataset: imagefolder, path: x, augment: {random_crop: {padding: 4}}}\n"),
             Catch::Contains("data.augment.random_crop applies to datasets cifar10 and cifar100, not imagefolder "
                             "(use random_resized_crop)"));
  CHECK_THAT(error("data: {dataset: cifar10, path: x, augment: {random_resized_crop: true}}\n"),
             Catch::Contains("data.augment.random_resized_crop applies to dataset imagefolder only, not cifar10"));
  CHECK_THAT(
      error("data: {dataset: cifar10, path: x, augment: {random_crop: {size: 32, pading: 4}}}\n"),
      Catch::Contains("unknown key 'data.augment.random_crop.pading'") && Catch::Contains("did you mean 'padding'"));
  CHECK_THAT(error("data: {dataset: cifar10, path: x, augment: {random_crop: {size: 40}}}\n"),
             Catch::Contains("data.augment.random_crop.size must be <= 32, got 40"));
  CHECK_THAT(error("data: {dataset: cifar10, path: x, augment: {flip: true}}\n"),
             Catch::Contains("unknown key 'data.augment.flip'"));
  CHECK_THAT(error("data: {dataset: cifar10, path: x, augment: {horizontal_flip: maybe}}\n"),
             Catch::Contains("data.augment.horizontal_flip must be true or false"));
  CHECK_THAT(
      error("data: {dataset: imagefolder, path: x, augment: {random_resized_crop: {scale: [0.5, 0.2]}}}\n"),
      Catch::Contains("data.augment.random_resized_crop.scale must satisfy 0 < min <= max <= 1, got [0.5, 0.2]"));
  CHECK_THAT(error("data: {dataset: imagefolder, path: x, augment: {random_resized_crop: {ratio: [1]}}}\n"),
             Catch::Contains("data.augment.random_resized_crop.ratio must be a pair [min, max], got 1 value(s)"));
  CHECK_THAT(error("data: {dataset: cifar10, path: x, label: coarse}\n"),
             Catch::Contains("data.label applies to dataset cifar100 only, not cifar10"));
  CHECK_THAT(error("data: {dataset: cifar100, path: x, label: medium}\n"),
             Catch::Contains("data.label must be one of fine, coarse"));
  CHECK_THAT(error("data: {dataset: cifar10, path: x, image_size: 32}\n"),
             Catch::Contains("data.image_size applies to dataset imagefolder only, not cifar10"));
  CHECK_THAT(error("data: {dataset: imagefolder, path: x, image_size: 224, eval_resize: 200}\n"),
             Catch::Contains("data.eval_resize must be >= image_size (224) for the center crop, got 200"));
  CHECK_THAT(error("data: {dataset: cifar10, path: x, workers: -1}\n"),
             Catch::Contains("data.workers must be >= 0, got -1"));
  CHECK_THAT(error("data: {dataset: imagenet, path: x}\n"),
             Catch::Contains("data.dataset must be one of mnist, fashion_mnist, cifar10, cifar100, imagefolder"));
}

// ------------------------------------------------------------------------------------- real dataset

TEST_CASE("the real CIFAR-10 subset in the shared data", "[data][cifar][real][real:cifar10_subset]") {
  const std::string folder = qtrain::testing::require_real_data("cifar10_subset");
  DataConfig config = data_config_from("data: {dataset: cifar10, path: " + folder + "}\n");
  auto train = open_dataset(config, Split::train);
  auto test = open_dataset(config, Split::test);
  REQUIRE(train->size() == 5000);
  REQUIRE(test->size() == 1000);
  // Labels read from the files with od: the first records of data_batch_1 (6 = frog, 9 = truck) and
  // data_batch_2 (1), the first and last of test_batch (3, 8).
  int32_t label = -1;
  read_sample(*train, 0, &label);
  REQUIRE(label == 6);
  read_sample(*train, 1, &label);
  REQUIRE(label == 9);
  read_sample(*train, 1000, &label);
  REQUIRE(label == 1);
  read_sample(*test, 0, &label);
  REQUIRE(label == 3);
  read_sample(*test, 999, &label);
  REQUIRE(label == 8);
  // Per-channel means of the normalized training images and the label counts, from numpy on the same
  // files (pixel means 0.493424, 0.484183, 0.448090): a wrong plane order would move them by ~0.18.
  std::vector<double> sum(3, 0.0);
  std::vector<int> counts(10, 0);
  std::vector<float> x(3072);
  for (int64_t i = 0; i < train->size(); ++i) {
    train->read(i, x.data(), &label);
    ++counts[static_cast<size_t>(label)];
    for (int c = 0; c < 3; ++c) sum[c] += std::accumulate(x.begin() + c * 1024, x.begin() + (c + 1) * 1024, 0.0);
  }
  REQUIRE(counts == std::vector<int>{508, 515, 478, 484, 527, 469, 497, 512, 518, 492});
  REQUIRE(sum[0] / (5000 * 1024) == Approx((0.49342385 - 0.4914) / 0.2470).margin(1e-5));
  REQUIRE(sum[1] / (5000 * 1024) == Approx((0.48418251 - 0.4822) / 0.2435).margin(1e-5));
  REQUIRE(sum[2] / (5000 * 1024) == Approx((0.44809047 - 0.4465) / 0.2616).margin(1e-5));
}
