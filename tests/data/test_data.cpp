// data/: the IDX reader on files written here (good, wrong magic, truncated, mismatched counts, bad
// labels, gzip), MNIST normalization and limits, the data config section, the dataset registry, and
// the Loader: the epoch permutation (deterministic, a permutation, pinned to golden values), shards,
// resume, prefetch errors and restarts. The real MNIST / Fashion-MNIST files are checked when present.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "data/dataset.h"
#include "data/dataset_info.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/mnist.h"
#include "framework/core/float_env.h"
#include "tests/support/idx_files.h"
#include "tests/support/real_data.h"
#include "tests/support/temp_dir.h"
#include "tests/support/config_text.h"

using namespace qtrain;
using qtrain::testing::config_from_text;
namespace fs = std::filesystem;

namespace {

using qtrain::testing::Bytes;
using qtrain::testing::idx_labels_bytes;
using qtrain::testing::TempDir;

void write_bytes(const std::string& path, const Bytes& bytes, bool gzip = false) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
    REQUIRE(gzclose(f) == Z_OK);
  } else {
    qtrain::testing::write_file(path, bytes);
  }
}

// An IDX image file of `count` images of rows x cols: pixel j of image i is (i * 7 + j) % 256.
Bytes idx_images(uint32_t count, uint32_t rows = 28, uint32_t cols = 28) {
  Bytes pixels;
  for (uint32_t i = 0; i < count; ++i)
    for (uint32_t j = 0; j < rows * cols; ++j) pixels.push_back(static_cast<uint8_t>((i * 7 + j) % 256));
  return qtrain::testing::idx_images_bytes(pixels, count, rows, cols);
}

Bytes idx_labels(const Bytes& labels) { return idx_labels_bytes(labels); }

std::vector<int32_t> first_labels(const Dataset& d, int n) {
  std::vector<float> x(static_cast<size_t>(shape_numel(d.sample_shape())));
  std::vector<int32_t> labels;
  for (int i = 0; i < n; ++i) {
    int32_t label = -1;
    d.read(i, x.data(), &label);
    labels.push_back(label);
  }
  return labels;
}

// A complete MNIST-style folder: 5 training and 3 test samples.
void write_mnist_folder(const TempDir& dir, bool gzip = false) {
  const std::string ext = gzip ? ".gz" : "";
  write_bytes(dir.file("train-images-idx3-ubyte" + ext), idx_images(5), gzip);
  write_bytes(dir.file("train-labels-idx1-ubyte" + ext), idx_labels({5, 0, 4, 1, 9}), gzip);
  write_bytes(dir.file("t10k-images-idx3-ubyte" + ext), idx_images(3), gzip);
  write_bytes(dir.file("t10k-labels-idx1-ubyte" + ext), idx_labels({7, 2, 1}), gzip);
}

DataConfig data_config_from(const std::string& yaml) {
  ConfigNode root = config_from_text(yaml);
  ConfigNode section = root.child("data");
  return parse_data_config(section);
}

// Sample i is [1, 2, 2] filled with i; its label is i % 10. Throws at `fail_at` when set.
class CountingDataset final : public Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {1, 2, 2}; }
  int num_classes() const override { return 10; }
  void read(int64_t index, float* x, int32_t* label) const override {
    if (index == fail_at_) input_error("sample {}: cannot decode", index);
    std::fill_n(x, 4, static_cast<float>(index));
    *label = static_cast<int32_t>(index % 10);
  }

 private:
  int64_t n_, fail_at_;
};

// The sample ids of one batch (read back from x), checking that labels and every value agree.
std::vector<int64_t> batch_ids(const Batch& b) {
  std::vector<int64_t> ids;
  const int64_t rows = b.x.dim(0);
  REQUIRE(b.labels.numel() == rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = b.x.data<float>() + r * 4;
    const auto id = static_cast<int64_t>(x[0]);
    REQUIRE(x[3] == x[0]);
    REQUIRE(b.labels.data<int32_t>()[r] == id % 10);
    ids.push_back(id);
  }
  return ids;
}

// Every batch of one epoch, flattened to sample ids.
std::vector<int64_t> epoch_ids(Loader& loader, int64_t epoch, int64_t first_batch = 0) {
  loader.start_epoch(epoch, first_batch);
  std::vector<int64_t> ids;
  int64_t expected_index = first_batch;
  while (auto b = loader.next()) {
    REQUIRE(b->epoch == epoch);
    REQUIRE(b->index == expected_index++);
    for (int64_t id : batch_ids(*b)) ids.push_back(id);
  }
  REQUIRE(expected_index == loader.batches_per_epoch());
  return ids;
}

}  // namespace

// ---------------------------------------------------------------------------------------- IDX files

TEST_CASE("idx: a good image and label file", "[data][idx]") {
  TempDir dir;
  write_bytes(dir.file("images"), idx_images(3, 4, 5));
  write_bytes(dir.file("labels"), idx_labels({3, 1, 4}));
  const IdxImages images = read_idx_images(dir.file("images"));
  REQUIRE(images.count == 3);
  REQUIRE(images.rows == 4);
  REQUIRE(images.cols == 5);
  REQUIRE(images.pixels.size() == 60);
  REQUIRE(images.pixels[0] == 0);
  REQUIRE(images.pixels[20 + 1] == 8);  // image 1, pixel 1: (7 + 1) % 256
  REQUIRE(read_idx_labels(dir.file("labels")) == Bytes{3, 1, 4});
}

TEST_CASE("idx: gzip files read the same as plain ones", "[data][idx]") {
  TempDir dir;
  write_bytes(dir.file("images"), idx_images(4));
  write_bytes(dir.file("images.gz"), idx_images(4), /*gzip=*/true);
  write_bytes(dir.file("labels.gz"), idx_labels({0, 9, 8, 7}), /*gzip=*/true);
  REQUIRE(fs::file_size(dir.file("images.gz")) < fs::file_size(dir.file("images")));
  REQUIRE(read_idx_images(dir.file("images.gz")).pixels == read_idx_images(dir.file("images")).pixels);
  REQUIRE(read_idx_labels(dir.file("labels.gz")) == Bytes{0, 9, 8, 7});
}

TEST_CASE("idx: a limit reads the first images only, and a file cut after them is enough", "[data][idx]") {
  TempDir dir;
  const Bytes full = idx_images(5);  // 16 + 5 * 784 bytes
  write_bytes(dir.file("images"), full);
  write_bytes(dir.file("images.gz"), full, /*gzip=*/true);
  const IdxImages all = read_idx_images(dir.file("images"));
  for (const char* name : {"images", "images.gz"}) {
    const IdxImages two = read_idx_images(dir.file(name), 2);
    REQUIRE(two.count == 2);
    REQUIRE(two.announced == 5);
    REQUIRE(two.pixels == Bytes(all.pixels.begin(), all.pixels.begin() + 2 * 784));
  }
  REQUIRE(read_idx_images(dir.file("images"), 9).count == 5);  // a limit above the count reads them all
  REQUIRE(read_idx_images(dir.file("images"), 9).announced == 5);
  // Cut inside the third image: two images read, three refused with the bytes they need.
  write_bytes(dir.file("cut"), Bytes(full.begin(), full.begin() + 16 + 2 * 784 + 100));
  REQUIRE(read_idx_images(dir.file("cut"), 2).pixels == Bytes(all.pixels.begin(), all.pixels.begin() + 2 * 784));
  REQUIRE_THROWS_WITH(read_idx_images(dir.file("cut"), 3),
                      Catch::Contains(dir.file("cut")) && Catch::Contains("truncated") &&
                          Catch::Contains("the first 3 of them need 2368 bytes, found 1684"));
}

TEST_CASE("idx: wrong magic numbers print found and expected", "[data][idx]") {
  TempDir dir;
  write_bytes(dir.file("labels"), idx_labels({1, 2}));
  write_bytes(dir.file("images"), idx_images(1));
  REQUIRE_THROWS_AS(read_idx_images(dir.file("labels")), InputError);
  REQUIRE_THROWS_WITH(read_idx_images(dir.file("labels")),
                      Catch::Contains(dir.file("labels")) && Catch::Contains("not an IDX image file") &&
                          Catch::Contains("magic number 0x00000801, expected 0x00000803"));
  REQUIRE_THROWS_WITH(
      read_idx_labels(dir.file("images")),
      Catch::Contains("not an IDX label file") && Catch::Contains("magic number 0x00000803, expected 0x00000801"));
}

TEST_CASE("idx: truncated files say how many bytes were expected and found", "[data][idx]") {
  TempDir dir;
  Bytes images = idx_images(3);  // 16 + 3 * 784 = 2368 bytes
  images.resize(2000);
  write_bytes(dir.file("images"), images);
  REQUIRE_THROWS_WITH(read_idx_images(dir.file("images")), Catch::Contains(dir.file("images")) &&
                                                               Catch::Contains("truncated") &&
                                                               Catch::Contains("3 images of 28x28") &&
                                                               Catch::Contains("2368 bytes are expected, found 2000"));
  Bytes labels = idx_labels({1, 2, 3, 4});  // 8 + 4 bytes
  labels.pop_back();
  write_bytes(dir.file("labels"), labels);
  REQUIRE_THROWS_WITH(read_idx_labels(dir.file("labels")), Catch::Contains("truncated") &&
                                                               Catch::Contains("4 labels") &&
                                                               Catch::Contains("12 bytes are expected, found 11"));
  write_bytes(dir.file("header"), Bytes{0, 0, 8, 3, 0, 0});
  REQUIRE_THROWS_WITH(read_idx_images(dir.file("header")),
                      Catch::Contains("truncated: 6 bytes, the IDX image header alone needs 16"));
  Bytes long_labels = idx_labels({1, 2});
  long_labels.push_back(0);
  write_bytes(dir.file("long"), long_labels);
  REQUIRE_THROWS_WITH(read_idx_labels(dir.file("long")), Catch::Contains("trailing data"));
  // 2^32-1 images of (2^32-1)x(2^32-1): the byte count wrapped around and the message claimed
  // 12884901903 bytes were expected.
  write_bytes(dir.file("huge"), qtrain::testing::idx_images_bytes({}, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu));
  REQUIRE_THROWS_WITH(read_idx_images(dir.file("huge")),
                      Catch::Contains(dir.file("huge") + ": the header announces 4294967295 images of "
                                                         "4294967295x4294967295, more bytes than any file holds"));
}

TEST_CASE("idx: a gzip file expanding far beyond its header is refused without reading it all", "[data][idx]") {
  // One 28x28 image announced, then 256 MB of zeros (about 250 KB of gzip): the size is compared with
  // the header while reading, not after decompressing all of it into memory.
  TempDir dir;
  gzFile f = gzopen(dir.file("bomb.gz").c_str(), "wb9");
  REQUIRE(f != nullptr);
  const Bytes header = qtrain::testing::idx_images_bytes(Bytes(784, 0), 1);
  gzwrite(f, header.data(), static_cast<unsigned>(header.size()));
  const Bytes zeros(1 << 20, 0);
  for (int i = 0; i < 256; ++i) gzwrite(f, zeros.data(), static_cast<unsigned>(zeros.size()));
  gzclose(f);
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  REQUIRE_THROWS_WITH(read_idx_images(dir.file("bomb.gz")),
                      Catch::Contains(dir.file("bomb.gz") + ": longer than the 800 bytes that its header announces "
                                                            "(1 images of 28x28)"));
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);  // kilobytes
}

TEST_CASE("idx: a truncated gzip stream is reported", "[data][idx]") {
  TempDir dir;
  write_bytes(dir.file("images.gz"), idx_images(20), /*gzip=*/true);
  Bytes gz;
  {
    std::ifstream in(dir.file("images.gz"), std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  gz.resize(gz.size() / 2);
  write_bytes(dir.file("cut.gz"), gz);
  REQUIRE_THROWS_WITH(read_idx_images(dir.file("cut.gz")),
                      Catch::Contains(dir.file("cut.gz")) && Catch::Contains("truncated"));
}

TEST_CASE("idx: a missing file names its path", "[data][idx]") {
  REQUIRE_THROWS_WITH(read_idx_labels("/nonexistent/labels"), Catch::Contains("/nonexistent/labels: file not found"));
}

// -------------------------------------------------------------------------------------------- MNIST

TEST_CASE("mnist: samples are pixel/255 normalized with the standard mean and std", "[data][mnist]") {
  TempDir dir;
  write_mnist_folder(dir);
  auto train = open_mnist(dir.path().string(), Split::train, {});
  REQUIRE(train->size() == 5);
  REQUIRE(train->sample_shape() == Shape{1, 28, 28});
  REQUIRE(train->num_classes() == 10);
  std::vector<float> x(784);
  int32_t label = -1;
  train->read(1, x.data(), &label);
  REQUIRE(label == 0);
  // Image 1, pixel j is (7 + j) % 256: pixel 0 is 7, pixel 248 is 255, pixel 249 is 0.
  // (7/255 - 0.1307) / 0.3081 = -0.335115; (1 - 0.1307) / 0.3081 = 2.821487; (0 - 0.1307) / 0.3081 = -0.424213.
  REQUIRE(x[0] == Approx((7 / 255.0 - 0.1307) / 0.3081));
  REQUIRE(x[0] == Approx(-0.335115).epsilon(1e-5));
  REQUIRE(x[248] == Approx(2.821487).epsilon(1e-5));
  REQUIRE(x[249] == Approx(-0.424213).epsilon(1e-5));

  MnistOptions fashion;
  fashion.variant = MnistVariant::fashion_mnist;
  auto test = open_mnist(dir.path().string(), Split::test, fashion);
  REQUIRE(test->size() == 3);
  test->read(0, x.data(), &label);
  REQUIRE(label == 7);
  REQUIRE(x[0] == Approx((0 - 0.2860) / 0.3530));  // image 0, pixel 0 is 0

  // Custom values from the config.
  DataConfig config = data_config_from("data: {path: " + dir.path().string() + ", mean: [0.5], std: [0.25]}\n");
  auto custom = open_dataset(config, Split::train);
  custom->read(0, x.data(), &label);
  REQUIRE(x[0] == Approx(-2.0));   // (0 - 0.5) / 0.25
  REQUIRE(x[255] == Approx(2.0));  // (1 - 0.5) / 0.25
}

TEST_CASE("mnist: gzipped folders and limits", "[data][mnist]") {
  TempDir dir;
  write_mnist_folder(dir, /*gzip=*/true);
  DataConfig config = data_config_from("data: {path: " + dir.path().string() + ", limit_train: 2, limit_test: 100}\n");
  auto train = open_dataset(config, Split::train);
  REQUIRE(train->size() == 2);
  auto test = open_dataset(config, Split::test);
  REQUIRE(test->size() == 3);  // a limit above the size keeps everything
  std::vector<float> x(784);
  int32_t label = -1;
  train->read(1, x.data(), &label);
  REQUIRE(label == 0);
}

TEST_CASE("mnist: missing folder and files", "[data][mnist]") {
  REQUIRE_THROWS_AS(open_mnist("/nonexistent/mnist", Split::train, {}), InputError);
  REQUIRE_THROWS_WITH(open_mnist("/nonexistent/mnist", Split::train, {}),
                      Catch::Contains("data folder '/nonexistent/mnist' for dataset mnist does not exist") &&
                          Catch::Contains("tools/fetch_mnist.sh"));
  MnistOptions fashion;
  fashion.variant = MnistVariant::fashion_mnist;
  REQUIRE_THROWS_WITH(open_mnist("/nonexistent/f", Split::train, fashion), Catch::Contains("dataset-fashion-mnist"));
  TempDir dir;
  write_mnist_folder(dir);
  fs::remove(dir.file("t10k-labels-idx1-ubyte"));
  REQUIRE_NOTHROW(open_mnist(dir.path().string(), Split::train, {}));
  REQUIRE_THROWS_WITH(open_mnist(dir.path().string(), Split::test, {}),
                      Catch::Contains(dir.path().string()) &&
                          Catch::Contains("missing t10k-labels-idx1-ubyte (or "
                                          "t10k-labels-idx1-ubyte.gz)") &&
                          Catch::Contains("train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte "
                                          "and t10k-labels-idx1-ubyte"));
}

TEST_CASE("mnist: image/label count mismatch, bad labels, wrong image size", "[data][mnist]") {
  TempDir dir;
  write_mnist_folder(dir);
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_labels({1, 2, 3, 4}));
  REQUIRE_THROWS_WITH(open_mnist(dir.path().string(), Split::train, {}),
                      Catch::Contains("holds 5 images but") && Catch::Contains("holds 4 labels"));
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_labels({1, 2, 10, 4, 5}));
  REQUIRE_THROWS_WITH(open_mnist(dir.path().string(), Split::train, {}),
                      Catch::Contains("train-labels-idx1-ubyte: label 10 at index 2 is out of range for 10 classes"));
  write_bytes(dir.file("t10k-images-idx3-ubyte"), idx_images(3, 32, 32));
  REQUIRE_THROWS_WITH(open_mnist(dir.path().string(), Split::test, {}), Catch::Contains("must be 28x28, found 32x32"));
}

// ------------------------------------------------------------------------------------------- config

TEST_CASE("data config: defaults and values", "[data][config]") {
  DataConfig c = data_config_from("data: {path: data/mnist}\n");
  REQUIRE(c.dataset == "mnist");
  REQUIRE(c.path == "data/mnist");
  REQUIRE(c.batch_size == 128);
  REQUIRE(c.eval_batch_size == 128);  // the training batch
  REQUIRE(data_config_from("data: {path: data/mnist, batch_size: 32}\n").eval_batch_size == 32);
  REQUIRE(c.shuffle);
  REQUIRE(!c.drop_last);
  REQUIRE(c.prefetch == 2);
  REQUIRE(c.mean.empty());
  REQUIRE(c.std.empty());
  DataConfig f = data_config_from(
      "data: {dataset: fashion_mnist, path: x, batch_size: 64, shuffle: false, drop_last: true, prefetch: 4, "
      "mean: [0.3], std: [0.4], limit_train: 1000, limit_test: 500, eval_batch_size: 10}\n");
  REQUIRE(f.dataset == "fashion_mnist");
  REQUIRE(f.batch_size == 64);
  REQUIRE(!f.shuffle);
  REQUIRE(f.drop_last);
  REQUIRE(f.prefetch == 4);
  REQUIRE(f.mean == std::vector<double>{0.3});
  REQUIRE(f.std == std::vector<double>{0.4});
  REQUIRE(f.limit_train == 1000);
  REQUIRE(f.limit_test == 500);
  REQUIRE(f.eval_batch_size == 10);
}

TEST_CASE("data config: errors", "[data][config]") {
  REQUIRE_THROWS_WITH(data_config_from("data: {batch_size: 8}\n"), Catch::Contains("data.path is required"));
  REQUIRE_THROWS_WITH(
      data_config_from("data: {path: x, dataset: imagenet}\n"),
      Catch::Contains(
          "data.dataset must be one of mnist, fashion_mnist, cifar10, cifar100, imagefolder, an4, got 'imagenet'"));
  REQUIRE_THROWS_WITH(data_config_from("data: {path: x, batch_size: 0}\n"),
                      Catch::Contains("data.batch_size must be >= 1, got 0"));
  REQUIRE_THROWS_WITH(data_config_from("data: {path: x, mean: [0.1, 0.2, 0.3]}\n"),
                      Catch::Contains("data.mean has 3 value(s) but dataset mnist has 1 channel(s)"));
  REQUIRE_THROWS_WITH(data_config_from("data: {path: x, std: [0]}\n"),
                      Catch::Contains("data.std entry 0 must be > 0, got 0"));
  REQUIRE_THROWS_WITH(data_config_from("data: {path: x, std: []}\n"), Catch::Contains("got an empty list"));
  REQUIRE_THROWS_WITH(data_config_from("data: {path: x, limit_train: -1}\n"),
                      Catch::Contains("data.limit_train must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(data_config_from("data: {path: x, prefetch: 0}\n"),
                      Catch::Contains("data.prefetch must be >= 1, got 0"));
  // an4 never reads data.mean: the key is refused, not accepted and ignored.
  REQUIRE_THROWS_WITH(data_config_from("data: {path: x, dataset: an4, mean: [0.5, 0.5, 0.5]}\n"),
                      Catch::Contains("data.mean does not apply to dataset an4: its features are normalized per "
                                      "utterance"));
  REQUIRE_THROWS_WITH(data_config_from("data: {path: x, dataset: an4, features: {window_ms: 100}}\n"),
                      Catch::Contains("data.features.fft_size must be >= the window of 1600 samples (window_ms 100 "
                                      "at 16000 Hz), got 512"));
  REQUIRE_THROWS_WITH(data_config_from("data: {path: x, batchsize: 8}\n"),
                      Catch::Contains("unknown key 'data.batchsize'") && Catch::Contains("did you mean 'batch_size'"));
}

// ----------------------------------------------------------------------------------------- registry

TEST_CASE("dataset registry: names in datasets.def's order, unknown ones listed", "[data][registry]") {
  REQUIRE(dataset_names() ==
          std::vector<std::string>{"mnist", "fashion_mnist", "cifar10", "cifar100", "imagefolder", "an4"});
  const char* listed = "(registered: mnist, fashion_mnist, cifar10, cifar100, imagefolder, an4)";
  REQUIRE_THROWS_WITH(dataset_info("imagenet"),
                      Catch::Contains("unknown dataset 'imagenet' ") && Catch::Contains(listed));
  DataConfig built;  // in code, not parsed: open_dataset asks the registry too
  built.dataset = "imagenet";
  built.path = "x";
  REQUIRE_THROWS_WITH(open_dataset(built, Split::train), Catch::Contains(listed));
  for (const DatasetInfo* d : datasets()) REQUIRE(&dataset_info(d->name) == d);
}

TEST_CASE("dataset registry: data.mean and data.std have the descriptor's channels", "[data][registry]") {
  for (const DatasetInfo* d : datasets()) {
    CAPTURE(d->name);
    auto with = [&](const std::string& key, int values) {
      std::string list;
      for (int i = 0; i < values; ++i) list += (i ? ", " : "") + std::string("0.5");
      return "data: {dataset: " + d->name + ", path: x, " + key + ": [" + list + "]}\n";
    };
    if (d->channels == 0) {
      REQUIRE_THROWS_WITH(data_config_from(with("std", 1)),
                          Catch::Contains("data.std does not apply to dataset " + d->name + ": " + d->no_mean_std));
      continue;
    }
    REQUIRE(data_config_from(with("mean", d->channels)).mean.size() == static_cast<size_t>(d->channels));
    REQUIRE(data_config_from(with("std", d->channels)).std.size() == static_cast<size_t>(d->channels));
    REQUIRE_THROWS_WITH(data_config_from(with("mean", d->channels + 1)),
                        Catch::Contains(fmt::format("but dataset {} has {} channel(s)", d->name, d->channels)));
  }
  // The descriptor says what the reader serves.
  TempDir dir;
  write_mnist_folder(dir);
  const DataConfig config = data_config_from("data: {path: " + dir.path().string() + "}\n");
  REQUIRE(open_dataset(config, Split::train)->sample_shape()[0] == dataset_info("mnist").channels);
}

TEST_CASE("dataset registry: a reader's keys are refused for other datasets, naming the owners", "[data][registry]") {
  REQUIRE_THROWS_WITH(data_config_from("data: {dataset: mnist, path: x, byte_order: little}\n"),
                      Catch::Contains("data.byte_order applies to dataset an4 only, not mnist"));
  REQUIRE_THROWS_WITH(data_config_from("data: {dataset: an4, path: x, features: {num_mels: 2}, image_size: 8}\n"),
                      Catch::Contains("data.image_size applies to dataset imagefolder only, not an4"));
  for (const DatasetInfo* owner : datasets())
    for (const std::string& key : owner->keys)
      for (const DatasetInfo* other : datasets()) {
        if (std::count(other->keys.begin(), other->keys.end(), key)) continue;
        CAPTURE(key, other->name);
        REQUIRE_THROWS_WITH(
            data_config_from("data: {dataset: " + other->name + ", path: x, " + key + ": 1}\n"),
            Catch::Contains("data." + key + " applies to dataset") && Catch::Contains("not " + other->name));
      }
  auto named = [](std::set<std::string> names) {
    return [names](const DatasetInfo& d) { return names.count(d.name) != 0; };
  };
  REQUIRE(applies_only_to(named({"an4"}), "mnist") == "applies to dataset an4 only, not mnist");
  REQUIRE(applies_only_to(named({"an4", "mnist", "cifar10"}), "x") ==
          "applies to datasets mnist, cifar10 and an4, not x");
  REQUIRE(applies_only_to(named({}), "mnist") == "applies to no registered dataset, not mnist");
  // A key nobody owns stays an unknown key.
  REQUIRE_THROWS_WITH(data_config_from("data: {dataset: an4, path: x, byte_ordr: big}\n"),
                      Catch::Contains("unknown key 'data.byte_ordr'"));
}

// ------------------------------------------------------------------------------------------- loader

TEST_CASE("epoch permutation: deterministic, a permutation, and pinned", "[data][loader]") {
  const auto a = epoch_permutation(1000, 7, 3, true);
  REQUIRE(a == epoch_permutation(1000, 7, 3, true));
  REQUIRE(a != epoch_permutation(1000, 7, 4, true));
  REQUIRE(a != epoch_permutation(1000, 8, 3, true));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  REQUIRE(sorted == identity);
  REQUIRE(epoch_permutation(1000, 7, 3, false) == identity);
  REQUIRE(epoch_permutation(0, 1, 0, true).empty());
  REQUIRE(epoch_permutation(1, 1, 0, true) == std::vector<int64_t>{0});
  // Golden values from an independent Python implementation of the same definition (Philox4x32-10
  // under derive_philox_key(seed, epoch, kShuffleStream), words in counter order, Lemire bounded
  // integers, Fisher-Yates from the top). A change here changes every run's data order.
  REQUIRE(epoch_permutation(10, 1, 0, true) == std::vector<int64_t>{9, 3, 8, 6, 5, 4, 0, 2, 1, 7});
  REQUIRE(epoch_permutation(10, 1, 1, true) == std::vector<int64_t>{7, 5, 4, 2, 6, 9, 1, 8, 3, 0});
  REQUIRE(epoch_permutation(10, 42, 3, true) == std::vector<int64_t>{9, 1, 7, 0, 8, 4, 3, 6, 5, 2});
}

TEST_CASE("loader: shards are disjoint contiguous slices covering m * W samples", "[data][loader]") {
  // 103 samples over 4 ranks: m = 25 each, 3 dropped; batches of 10 are 10, 10, 5.
  CountingDataset data(103);
  const auto permutation = epoch_permutation(103, 5, 2, true);
  std::set<int64_t> seen;
  for (int rank = 0; rank < 4; ++rank) {
    Loader loader(data, {.batch_size = 10, .seed = 5, .rank = rank, .world_size = 4});
    REQUIRE(loader.batches_per_epoch() == 3);
    REQUIRE(loader.samples_per_epoch() == 25);
    const auto ids = epoch_ids(loader, 2);
    REQUIRE(ids == std::vector<int64_t>(permutation.begin() + rank * 25, permutation.begin() + (rank + 1) * 25));
    for (int64_t id : ids) REQUIRE(seen.insert(id).second);
  }
  REQUIRE(seen.size() == 100);

  Loader dropping(data, {.batch_size = 10, .drop_last = true, .seed = 5, .rank = 1, .world_size = 4});
  REQUIRE(dropping.batches_per_epoch() == 2);
  REQUIRE(dropping.samples_per_epoch() == 20);
  REQUIRE(epoch_ids(dropping, 2) == std::vector<int64_t>(permutation.begin() + 25, permutation.begin() + 45));
}

TEST_CASE("loader: batch shapes and the final partial batch", "[data][loader]") {
  CountingDataset data(23);
  Loader loader(data, {.batch_size = 8, .shuffle = false});
  loader.start_epoch(0);
  std::vector<int64_t> rows;
  while (auto b = loader.next()) {
    REQUIRE(b->x.dtype() == DType::f32);
    REQUIRE(b->labels.dtype() == DType::i32);
    REQUIRE(b->x.device().is_cpu());
    REQUIRE(b->x.shape() == Shape{b->x.dim(0), 1, 2, 2});
    rows.push_back(b->x.dim(0));
  }
  REQUIRE(rows == std::vector<int64_t>{8, 8, 7});
  REQUIRE(!loader.next());  // stays at the end
  REQUIRE(epoch_ids(loader, 1) == epoch_permutation(23, 1, 1, false));
}

TEST_CASE("loader: resuming at first_batch gives the tail of the full epoch", "[data][loader]") {
  CountingDataset data(200);
  Loader loader(data, {.batch_size = 16, .seed = 11, .rank = 1, .world_size = 2, .prefetch = 3});
  const auto full = epoch_ids(loader, 4);
  REQUIRE(full.size() == 100);
  const auto tail = epoch_ids(loader, 4, 3);
  REQUIRE(tail == std::vector<int64_t>(full.begin() + 48, full.end()));
  REQUIRE(epoch_ids(loader, 4, loader.batches_per_epoch()).empty());
  REQUIRE(epoch_ids(loader, 5) != full);
}

TEST_CASE("loader: a reader error is rethrown from next()", "[data][loader]") {
  CountingDataset data(50, /*fail_at=*/17);
  Loader loader(data, {.batch_size = 4, .shuffle = false, .prefetch = 2});
  loader.start_epoch(0);
  int batches = 0;
  auto drain = [&] {
    while (loader.next()) ++batches;
  };
  REQUIRE_THROWS_WITH(drain(), Catch::Contains("sample 17: cannot decode"));
  REQUIRE(batches == 4);  // batches 0-3 (samples 0-15) arrived before the failing batch 4
  // A new epoch starts cleanly after an error.
  loader.start_epoch(1, 5);
  REQUIRE(loader.next()->index == 5);
}

TEST_CASE("loader: restarting mid-epoch and destroying mid-epoch are clean", "[data][loader]") {
  CountingDataset data(1000);
  {
    Loader loader(data, {.batch_size = 10, .prefetch = 2});
    loader.start_epoch(0);
    REQUIRE(loader.next()->index == 0);
    // The prefetch thread is now blocked on a full queue; a new epoch stops it and starts over.
    const auto ids = epoch_ids(loader, 1);
    const auto expected = epoch_permutation(1000, 1, 1, true);
    REQUIRE(ids == expected);
    loader.start_epoch(2);
    REQUIRE(loader.next()->epoch == 2);
  }  // destroyed with the thread waiting for a free slot
  Loader never_started(data, {});
  REQUIRE_THROWS_WITH(never_started.next(), Catch::Contains("next() before start_epoch()"));
}

// ------------------------------------------------------------------------------------ real datasets

TEST_CASE("the real MNIST in data/mnist", "[data][mnist][real][real:mnist]") {
  const std::string folder = qtrain::testing::require_real_data("mnist");
  auto train = open_mnist(folder, Split::train, {});
  auto test = open_mnist(folder, Split::test, {});
  REQUIRE(train->size() == 60000);
  REQUIRE(test->size() == 10000);
  const std::vector<int32_t> train_labels = first_labels(*train, 5), test_labels = first_labels(*test, 5);
  REQUIRE(train_labels == std::vector<int32_t>{5, 0, 4, 1, 9});
  REQUIRE(test_labels == std::vector<int32_t>{7, 2, 1, 0, 4});
}

TEST_CASE("the real Fashion-MNIST of Debian's dataset-fashion-mnist (gzipped)",
          "[data][mnist][real][real:fashion_mnist]") {
  const std::string folder = qtrain::testing::require_real_data("fashion_mnist");
  DataConfig config = data_config_from("data: {dataset: fashion_mnist, path: " + folder + "}\n");
  auto train = open_dataset(config, Split::train);
  auto test = open_dataset(config, Split::test);
  REQUIRE(train->size() == 60000);
  REQUIRE(test->size() == 10000);
  const std::vector<int32_t> train_labels = first_labels(*train, 5), test_labels = first_labels(*test, 5);
  REQUIRE(train_labels == std::vector<int32_t>{9, 0, 0, 3, 0});
  REQUIRE(test_labels == std::vector<int32_t>{9, 2, 1, 1, 6});
  // The first training image's pixels sum to 76247 (of 784 * 255): its normalized mean follows.
  std::vector<float> x(784);
  int32_t label = -1;
  train->read(0, x.data(), &label);
  double sum = 0;
  for (float v : x) sum += v;
  REQUIRE(sum / 784 == Approx((76247.0 / 784 / 255 - 0.2860) / 0.3530).epsilon(1e-5));
}

// ---------------------------------------------------------------------------------------- float env

namespace {

// Records, for every sample read, whether the reading thread computes with subnormals flushed.
class FlushProbeDataset final : public Dataset {
 public:
  explicit FlushProbeDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {1, 2, 2}; }
  int num_classes() const override { return 10; }
  void read(int64_t index, float* x, int32_t* label) const override {
    (subnormals_flushed() ? flushed_ : kept_).fetch_add(1);
    std::fill_n(x, 4, static_cast<float>(index));
    *label = static_cast<int32_t>(index % 10);
  }
  mutable std::atomic<int64_t> flushed_{0}, kept_{0};

 private:
  int64_t n_;
};

}  // namespace

// The prefetch thread and the WorkerPool's helpers set the flags themselves (framework/core/float_env.h):
// the loader is built and started on a thread that keeps subnormals, which they would otherwise inherit.
TEST_CASE("loader: the prefetch thread and its workers compute with subnormals flushed", "[data][loader][float_env]") {
  if (!subnormals_flushable()) {
    WARN("no flush-to-zero mode on this architecture: nothing to check");
    return;
  }
  FlushProbeDataset dataset(512);
  LoaderOptions options;
  options.batch_size = 64;
  options.workers = 3;
  int64_t batches = 0;
  bool creator_flushed = true;
  std::thread creator([&] {  // no Catch2 assertion on this thread: they are not thread-safe
    keep_subnormals();
    creator_flushed = subnormals_flushed();
    Loader loader(dataset, options);
    loader.start_epoch(0);
    while (loader.next()) ++batches;
  });
  creator.join();
  REQUIRE_FALSE(creator_flushed);  // the probe tells the two modes apart
  REQUIRE(batches == 8);
  CHECK(dataset.kept_.load() == 0);
  CHECK(dataset.flushed_.load() == 512);
}
