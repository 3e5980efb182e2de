// imagefolder: the sorted file index built at open, and the per-sample decode + transform. Transforms
// resample straight from the decoded image into the output (one pass, no intermediate resized image).
#include "data/imagefolder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "data/dataset_info.h"
#include "data/jpeg.h"
#include "data/resample.h"
#include "framework/core/check.h"

namespace qtrain {
namespace {

namespace fs = std::filesystem;

constexpr double kImageNetMean[3] = {0.485, 0.456, 0.406};
constexpr double kImageNetStd[3] = {0.229, 0.224, 0.225};

bool is_jpeg_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg";
}

bool hidden(const fs::path& p) { return !p.filename().empty() && p.filename().string()[0] == '.'; }

// The sub-folder names of `folder`, sorted; an InputError when it is not a folder.
std::vector<std::string> class_folders(const fs::path& folder, const std::string& what) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    input_error(
        "{}: {} folder not found; an imagefolder data.path holds train/<class>/*.JPEG and "
        "val/<class>/*.JPEG",
        folder.string(), what);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.is_directory() && !hidden(entry.path())) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class ImageFolderDataset final : public Dataset {
 public:
  ImageFolderDataset(std::vector<std::string> files, std::vector<int32_t> labels, int classes,
                     const ImageFolderOptions& o, const double mean[3], const double std[3])
      : files_(std::move(files)),
        labels_(std::move(labels)),
        classes_(classes),
        options_(o),
        norm_(make_normalization(mean, std)) {}

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  Shape sample_shape() const override { return {3, options_.image_size, options_.image_size}; }
  int num_classes() const override { return classes_; }

  void read(int64_t index, float* x, int32_t* label) const override {
    const RgbImage image = load(index, label);
    // Resize(eval_resize): the shorter side becomes eval_resize, the longer one int(eval_resize * long /
    // short) as torchvision computes it; CenterCrop(image_size) of that, at round((resized - size) / 2).
    const int64_t h = image.height, w = image.width, s = options_.eval_resize, size = options_.image_size;
    const int64_t rh = h <= w ? s : s * h / w;
    const int64_t rw = h <= w ? s * w / h : s;
    const auto top = static_cast<int64_t>(std::nearbyint(static_cast<double>(rh - size) / 2));
    const auto left = static_cast<int64_t>(std::nearbyint(static_cast<double>(rw - size) / 2));
    const double sy = static_cast<double>(h) / static_cast<double>(rh);
    const double sx = static_cast<double>(w) / static_cast<double>(rw);
    const SourceRect rect{static_cast<double>(top) * sy, static_cast<double>(left) * sx, static_cast<double>(size) * sy,
                          static_cast<double>(size) * sx};
    resample_rgb(image, rect, CropBox{0, 0, h, w}, size, size, false, norm_, x);
  }

  void read_augmented(int64_t index, PhiloxKey key, float* x, int32_t* label) const override {
    const AugmentConfig& a = options_.augment;
    if (!a.random_resized_crop && !a.horizontal_flip) return read(index, x, label);
    PhiloxWords words(key);
    if (!a.random_resized_crop) {
      // Flip only: the evaluation view, mirrored. Mirroring the output equals mirroring the input
      // except for the centre's rounding, which is immaterial here.
      read(index, x, label);
      if (draw_flip(words)) mirror(x);
      return;
    }
    const RgbImage image = load(index, label);
    const CropBox box = draw_random_resized_crop(words, image.height, image.width, a);
    const bool flip = a.horizontal_flip && draw_flip(words);
    const SourceRect rect{static_cast<double>(box.top), static_cast<double>(box.left), static_cast<double>(box.height),
                          static_cast<double>(box.width)};
    resample_rgb(image, rect, box, options_.image_size, options_.image_size, flip, norm_, x);
  }

 private:
  RgbImage load(int64_t index, int32_t* label) const {
    QT_CHECK(index >= 0 && index < size(), "imagefolder: sample {} out of range [0, {})", index, size());
    *label = labels_[static_cast<size_t>(index)];
    return read_jpeg(files_[static_cast<size_t>(index)]);
  }

  void mirror(float* x) const {
    const int64_t s = options_.image_size;
    for (int64_t row = 0; row < 3 * s; ++row) std::reverse(x + row * s, x + (row + 1) * s);
  }

  std::vector<std::string> files_;
  std::vector<int32_t> labels_;
  int classes_;
  ImageFolderOptions options_;
  Normalization norm_;
};

}  // namespace

namespace {

std::unique_ptr<Dataset> index_and_open(const std::string& root, Split split, const ImageFolderOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    input_error(
        "data folder '{}' for dataset imagefolder does not exist; it should hold train/<class>/*.JPEG and "
        "val/<class>/*.JPEG (ImageNet's layout)",
        root);
  const std::vector<std::string> classes = class_folders(fs::path(root) / "train", "the training");
  if (classes.empty())
    input_error("{}: no class folders; each class is a sub-folder holding its JPEG files",
                (fs::path(root) / "train").string());
  const char* split_name = split == Split::train ? "train" : "val";
  const fs::path split_dir = fs::path(root) / split_name;
  const std::vector<std::string> present =
      split == Split::train ? classes : class_folders(split_dir, "the validation (test split)");
  if (present.empty()) input_error("{}: no class folders", split_dir.string());

  std::vector<std::string> files;
  std::vector<int32_t> labels;
  for (const std::string& name : present) {
    const auto it = std::lower_bound(classes.begin(), classes.end(), name);
    if (it == classes.end() || *it != name)
      input_error("{}: class folder '{}' has no counterpart in {}; val/ may only hold the training classes",
                  split_dir.string(), name, (fs::path(root) / "train").string());
    const auto label = static_cast<int32_t>(it - classes.begin());
    const fs::path class_dir = split_dir / name;
    std::vector<std::string> names;
    int64_t ignored = 0;
    for (const auto& entry : fs::directory_iterator(class_dir)) {
      if (hidden(entry.path()) || entry.is_directory()) continue;
      if (!is_jpeg_name(entry.path())) {
        ++ignored;
        continue;
      }
      // A pipe would block the loader thread that opens it forever; a dangling link fails only when read.
      if (!entry.is_regular_file())
        input_error("{}: not a regular file (a dangling link, a pipe or a device); a class folder holds JPEG files",
                    entry.path().string());
      names.push_back(entry.path().filename().string());
    }
    if (names.empty())
      input_error("{}: class folder holds no JPEG files (.jpg or .jpeg, any case){}", class_dir.string(),
                  ignored > 0 ? fmt::format("; {} file(s) with other extensions were ignored", ignored) : "");
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      files.push_back((class_dir / n).string());
      labels.push_back(label);
    }
  }
  if (options.limit > 0 && options.limit < static_cast<int64_t>(files.size())) {
    files.resize(static_cast<size_t>(options.limit));
    labels.resize(static_cast<size_t>(options.limit));
  }
  QT_CHECK(options.mean.empty() || options.mean.size() == 3, "imagefolder: mean needs 3 values");
  QT_CHECK(options.std.empty() || options.std.size() == 3, "imagefolder: std needs 3 values");
  double mean[3], std[3];
  for (int c = 0; c < 3; ++c) {
    mean[c] = options.mean.empty() ? kImageNetMean[c] : options.mean[static_cast<size_t>(c)];
    std[c] = options.std.empty() ? kImageNetStd[c] : options.std[static_cast<size_t>(c)];
    QT_CHECK(std[c] > 0, "imagefolder: std must be > 0, got {}", std[c]);
  }
  QT_CHECK(options.image_size >= 1 && options.eval_resize >= options.image_size,
           "imagefolder: eval_resize {} must be >= image_size {}", options.eval_resize, options.image_size);
  return std::make_unique<ImageFolderDataset>(std::move(files), std::move(labels), static_cast<int>(classes.size()),
                                              options, mean, std);
}

}  // namespace

std::unique_ptr<Dataset> open_imagefolder(const std::string& root, Split split, const ImageFolderOptions& options) {
  // Listing a tree meets what a status query throws on (a symbolic link loop, a folder removed
  // meanwhile): name the path rather than let std::filesystem's exception escape.
  try {
    return index_and_open(root, split, options);
  } catch (const fs::filesystem_error& e) {
    input_error("{}: cannot list the image folder: {}", e.path1().string(), e.code().message());
  }
}

namespace {

// The reader's keys: the sample side and the evaluation resize.
ImageFolderOptions parse_imagefolder_keys(ConfigNode& section) {
  ImageFolderOptions o;
  o.image_size = section.get_int("image_size", o.image_size, 1, 4096);
  // The default keeps ImageNet's ratio 256 / 224 for other image sizes.
  o.eval_resize = section.get_int("eval_resize", (o.image_size * 256 + 112) / 224, 1, 8192);
  if (o.eval_resize < o.image_size)
    section.fail("eval_resize",
                 fmt::format("must be >= image_size ({}) for the center crop, got {}", o.image_size, o.eval_resize));
  return o;
}

std::unique_ptr<Dataset> open_imagefolder_split(const DataConfig& config, Split split) {
  ImageFolderOptions o = config.dataset_options_as<ImageFolderOptions>();
  o.mean = config.mean;
  o.std = config.std;
  o.limit = config.limit(split);
  o.augment = config.augment_of(split);
  return open_imagefolder(config.path, split, o);
}

}  // namespace

namespace data_detail {

const DatasetInfo& imagefolder_dataset_info() {
  static const DatasetInfo info = [] {
    DatasetInfo d;
    d.name = "imagefolder";
    d.channels = 3;
    d.augment = {.random_resized_crop = true, .horizontal_flip = true};
    d.keys = {"image_size", "eval_resize"};
    d.decodes_on_read = true;  // JPEG decoding dominates a sample's read
    d.parse = [](ConfigNode& section) { return std::any(parse_imagefolder_keys(section)); };
    d.open = open_imagefolder_split;
    return d;
  }();
  return info;
}

}  // namespace data_detail
}  // namespace qtrain
