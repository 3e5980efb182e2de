// MNIST / Fashion-MNIST: resolves the four IDX files in a folder (plain or .gz), validates them
// against each other, and serves normalized samples through a 256-entry table (one float per pixel
// value), which makes read() a lookup per pixel and trivially thread-safe.
#include "data/mnist.h"

#include <array>
#include <filesystem>

#include "data/dataset_info.h"
#include "data/idx.h"
#include "framework/core/check.h"

namespace qtrain {
namespace {

constexpr int kClasses = 10;
constexpr int64_t kSide = 28;

const char* variant_name(MnistVariant v) { return v == MnistVariant::mnist ? "mnist" : "fashion_mnist"; }

// How to obtain the files, for the error about a missing folder or file.
std::string how_to_get(MnistVariant v) {
  if (v == MnistVariant::mnist) return "run tools/fetch_mnist.sh to download MNIST into data/mnist";
  return "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) and set "
         "data.path to /usr/share/datasets/fashion-mnist";
}

class MnistDataset final : public Dataset {
 public:
  MnistDataset(IdxImages images, std::vector<uint8_t> labels, double mean, double std)
      : images_(std::move(images)), labels_(std::move(labels)) {
    for (int v = 0; v < 256; ++v) table_[v] = static_cast<float>((v / 255.0 - mean) / std);
  }

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape sample_shape() const override { return {1, kSide, kSide}; }
  int num_classes() const override { return kClasses; }

  void read(int64_t index, float* x, int32_t* label) const override {
    QT_CHECK(index >= 0 && index < size(), "mnist: sample {} out of range [0, {})", index, size());
    const uint8_t* px = images_.pixels.data() + index * kSide * kSide;
    for (int64_t i = 0; i < kSide * kSide; ++i) x[i] = table_[px[i]];
    *label = labels_[static_cast<size_t>(index)];
  }

 private:
  IdxImages images_;
  std::vector<uint8_t> labels_;
  std::array<float, 256> table_{};
};

}  // namespace

void mnist_mean_std(MnistVariant variant, double* mean, double* std) {
  if (variant == MnistVariant::mnist) {
    *mean = 0.1307;
    *std = 0.3081;
  } else {
    *mean = 0.2860;
    *std = 0.3530;
  }
}

std::string find_idx_file(const std::string& folder, const std::string& base, MnistVariant variant) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path plain = fs::path(folder) / base;
  if (fs::is_regular_file(plain, ec)) return plain.string();
  const fs::path gz = fs::path(folder) / (base + ".gz");
  if (fs::is_regular_file(gz, ec)) return gz.string();
  input_error(
      "{}: missing {} (or {}.gz); a {} folder holds train-images-idx3-ubyte, train-labels-idx1-ubyte, "
      "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each optionally gzipped; {}",
      folder, base, base, variant_name(variant), how_to_get(variant));
}

std::unique_ptr<Dataset> open_mnist(const std::string& folder, Split split, const MnistOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec))
    input_error("data folder '{}' for dataset {} does not exist; {}", folder, variant_name(options.variant),
                how_to_get(options.variant));
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string images_path = find_idx_file(folder, prefix + "-images-idx3-ubyte", options.variant);
  const std::string labels_path = find_idx_file(folder, prefix + "-labels-idx1-ubyte", options.variant);

  IdxImages images = read_idx_images(images_path, options.limit > 0 ? options.limit : -1);
  if (images.rows != kSide || images.cols != kSide)
    input_error("{}: {} images must be {}x{}, found {}x{}", images_path, variant_name(options.variant), kSide, kSide,
                images.rows, images.cols);
  std::vector<uint8_t> labels = read_idx_labels(labels_path);
  if (static_cast<int64_t>(labels.size()) != images.announced)
    input_error("{} holds {} images but {} holds {} labels; they must match", images_path, images.announced,
                labels_path, labels.size());
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] >= kClasses)
      input_error("{}: label {} at index {} is out of range for {} classes (0..{})", labels_path, labels[i], i,
                  kClasses, kClasses - 1);

  labels.resize(static_cast<size_t>(images.count));  // the limit's (read_idx_images read only those images)
  double mean = 0, std = 0;
  mnist_mean_std(options.variant, &mean, &std);
  mean = options.mean.value_or(mean);
  std = options.std.value_or(std);
  QT_CHECK(std > 0, "mnist: std must be > 0, got {}", std);
  return std::make_unique<MnistDataset>(std::move(images), std::move(labels), mean, std);
}

namespace {

// The `data` section's normalization (one channel) and limit, for one split.
std::unique_ptr<Dataset> open_mnist_split(MnistVariant variant, const DataConfig& config, Split split) {
  MnistOptions o;
  o.variant = variant;
  if (!config.mean.empty()) o.mean = config.mean[0];
  if (!config.std.empty()) o.std = config.std[0];
  o.limit = config.limit(split);
  return open_mnist(config.path, split, o);
}

// Both variants: grayscale, no transforms, no keys of their own.
DatasetInfo mnist_row(MnistVariant variant) {
  DatasetInfo d;
  d.name = variant_name(variant);
  d.channels = 1;
  d.open = [variant](const DataConfig& config, Split split) { return open_mnist_split(variant, config, split); };
  return d;
}

}  // namespace

namespace data_detail {

const DatasetInfo& mnist_dataset_info() {
  static const DatasetInfo info = mnist_row(MnistVariant::mnist);
  return info;
}

const DatasetInfo& fashion_mnist_dataset_info() {
  static const DatasetInfo info = mnist_row(MnistVariant::fashion_mnist);
  return info;
}

}  // namespace data_detail
}  // namespace qtrain
