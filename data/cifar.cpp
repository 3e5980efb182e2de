// CIFAR-10 / CIFAR-100: loads the split's record files into memory once (validating sizes and labels),
// then serves samples as crops of the planar pixels through one 256-entry normalization table per
// channel. The training transforms (random crop with black padding, flip) draw from the sample's key.
#include "data/cifar.h"

#include <array>
#include <filesystem>

#include "data/dataset_info.h"
#include "data/idx.h"
#include "framework/core/check.h"

namespace qtrain {
namespace {

constexpr int64_t kPixels = 3 * kCifarSide * kCifarSide;  // 3072: R, G, B planes

struct Layout {
  const char* name;
  int label_bytes;
  std::vector<std::string> train_files, test_files;
  const char* archive;
};

Layout layout(CifarVariant v) {
  if (v == CifarVariant::cifar10)
    return {"cifar10",
            1,
            {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"},
            {"test_batch.bin"},
            "cifar-10-binary.tar.gz (its folder cifar-10-batches-bin)"};
  return {"cifar100", 2, {"train.bin"}, {"test.bin"}, "cifar-100-binary.tar.gz (its folder cifar-100-binary)"};
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return s;
}

class CifarDataset final : public Dataset {
 public:
  CifarDataset(std::vector<uint8_t> pixels, std::vector<uint8_t> labels, int classes, const std::vector<double>& mean,
               const std::vector<double>& std, int64_t size, const AugmentConfig& augment)
      : pixels_(std::move(pixels)), labels_(std::move(labels)), classes_(classes), size_(size), augment_(augment) {
    for (int c = 0; c < 3; ++c)
      for (int v = 0; v < 256; ++v)
        tables_[static_cast<size_t>(c * 256 + v)] = static_cast<float>((v / 255.0 - mean[c]) / std[c]);
  }

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape sample_shape() const override { return {3, size_, size_}; }
  int num_classes() const override { return classes_; }

  // The central size x size window, unflipped.
  void read(int64_t index, float* x, int32_t* label) const override {
    const int64_t offset = (kCifarSide - size_) / 2;
    emit(index, CropBox{offset, offset, size_, size_}, false, x, label);
  }

  void read_augmented(int64_t index, PhiloxKey key, float* x, int32_t* label) const override {
    PhiloxWords words(key);
    const int64_t offset = (kCifarSide - size_) / 2;
    CropBox box{offset, offset, size_, size_};
    if (augment_.random_crop) box = draw_random_crop(words, kCifarSide, size_, augment_.crop_padding);
    const bool flip = augment_.horizontal_flip && draw_flip(words);
    emit(index, box, flip, x, label);
  }

 private:
  void emit(int64_t index, const CropBox& box, bool flip, float* x, int32_t* label) const {
    QT_CHECK(index >= 0 && index < size(), "cifar: sample {} out of range [0, {})", index, size());
    crop_planes(pixels_.data() + index * kPixels, 3, kCifarSide, box, flip, tables_.data(), x);
    *label = labels_[static_cast<size_t>(index)];
  }

  std::vector<uint8_t> pixels_;  // (N, 3, 32, 32)
  std::vector<uint8_t> labels_;
  int classes_;
  int64_t size_;  // output side
  AugmentConfig augment_;
  std::array<float, 3 * 256> tables_{};
};

}  // namespace

void cifar_mean_std(CifarVariant variant, std::vector<double>* mean, std::vector<double>* std) {
  if (variant == CifarVariant::cifar10) {
    *mean = {0.4914, 0.4822, 0.4465};
    *std = {0.2470, 0.2435, 0.2616};
  } else {
    *mean = {0.5071, 0.4865, 0.4409};
    *std = {0.2673, 0.2564, 0.2762};
  }
}

std::unique_ptr<Dataset> open_cifar(const std::string& folder, Split split, const CifarOptions& options) {
  namespace fs = std::filesystem;
  const Layout l = layout(options.variant);
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    input_error("data folder '{}' for dataset {} does not exist; it should hold {} and {}, extracted from {}", folder,
                l.name, joined(l.train_files), joined(l.test_files), l.archive);
  const std::vector<std::string>& files = split == Split::train ? l.train_files : l.test_files;
  std::vector<std::string> missing;
  for (const auto& f : files)
    if (!fs::is_regular_file(fs::path(folder) / f, ec)) missing.push_back(f);
  if (!missing.empty())
    input_error("{}: missing {}; a {} folder holds {} and {} (the binary version, extracted from {})", folder,
                joined(missing), l.name, joined(l.train_files), joined(l.test_files), l.archive);

  const int64_t record = l.label_bytes + kPixels;
  const int label_index = options.variant == CifarVariant::cifar100 && !options.coarse_labels ? 1 : 0;
  const int classes = options.variant == CifarVariant::cifar10 ? 10 : options.coarse_labels ? 20 : 100;
  std::vector<uint8_t> pixels, labels;
  for (const auto& f : files) {
    if (options.limit > 0 && static_cast<int64_t>(labels.size()) >= options.limit) break;
    const std::string path = (fs::path(folder) / f).string();
    const std::vector<uint8_t> bytes = read_file_bytes(path);
    const auto n = static_cast<int64_t>(bytes.size());
    if (n == 0 || n % record != 0)
      input_error(
          "{}: truncated or not a {} file: {} bytes is not a whole number of {}-byte records ({} label "
          "byte{} + {} pixel bytes)",
          path, l.name, n, record, l.label_bytes, l.label_bytes == 1 ? "" : "s", kPixels);
    for (int64_t r = 0; r < n / record; ++r) {
      const uint8_t* rec = bytes.data() + r * record;
      // CIFAR-100 records carry both labels; both are checked whichever is used.
      const int limits[2] = {options.variant == CifarVariant::cifar10 ? 10 : 20, 100};
      for (int b = 0; b < l.label_bytes; ++b)
        if (rec[b] >= limits[b])
          input_error("{}: record {} has {}label {}, out of range for {} classes (0..{})", path, r,
                      l.label_bytes == 1 ? ""
                      : b == 0           ? "coarse "
                                         : "fine ",
                      rec[b], limits[b], limits[b] - 1);
      if (options.limit > 0 && static_cast<int64_t>(labels.size()) >= options.limit) continue;
      labels.push_back(rec[label_index]);
      pixels.insert(pixels.end(), rec + l.label_bytes, rec + record);
    }
  }

  std::vector<double> mean, std;
  cifar_mean_std(options.variant, &mean, &std);
  if (!options.mean.empty()) mean = options.mean;
  if (!options.std.empty()) std = options.std;
  QT_CHECK(mean.size() == 3 && std.size() == 3, "cifar: mean and std need 3 values, got {} and {}", mean.size(),
           std.size());
  for (double s : std) QT_CHECK(s > 0, "cifar: std must be > 0, got {}", s);
  QT_CHECK(options.size >= 1 && options.size <= kCifarSide, "cifar: sample side {} must be in [1, {}]", options.size,
           kCifarSide);
  return std::make_unique<CifarDataset>(std::move(pixels), std::move(labels), classes, mean, std, options.size,
                                        options.augment);
}

namespace {

// The reader's options (cifar100's `label`) completed with the common keys for one split.
std::unique_ptr<Dataset> open_cifar_split(CifarVariant variant, const DataConfig& config, Split split) {
  CifarOptions o = config.dataset_options_as<CifarOptions>();
  o.variant = variant;
  o.mean = config.mean;
  o.std = config.std;
  o.limit = config.limit(split);
  // Both splits have the random_crop size: the test split reads the central window.
  o.size = config.augment.random_crop ? config.augment.crop_size : kCifarSide;
  o.augment = config.augment_of(split);
  return open_cifar(config.path, split, o);
}

DatasetInfo cifar_row(CifarVariant variant) {
  DatasetInfo d;
  d.name = layout(variant).name;
  d.channels = 3;
  d.augment = {.crop_side = kCifarSide, .horizontal_flip = true};
  d.open = [variant](const DataConfig& config, Split split) { return open_cifar_split(variant, config, split); };
  return d;
}

}  // namespace

namespace data_detail {

const DatasetInfo& cifar10_dataset_info() {
  static const DatasetInfo info = cifar_row(CifarVariant::cifar10);
  return info;
}

// cifar100 owns `label`: fine (the 100 classes) or coarse (the 20 superclasses).
const DatasetInfo& cifar100_dataset_info() {
  static const DatasetInfo info = [] {
    DatasetInfo d = cifar_row(CifarVariant::cifar100);
    d.keys = {"label"};
    d.parse = [](ConfigNode& section) {
      CifarOptions o;
      o.coarse_labels = section.get_choice("label", "fine", {"fine", "coarse"}) == "coarse";
      return std::any(o);
    };
    return d;
  }();
  return info;
}

}  // namespace data_detail
}  // namespace qtrain
