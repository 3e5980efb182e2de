// The `data.augment` block, the per-sample random draws of each transform and the crop of planar
// images. Every draw takes its words from the sample's own stream in a fixed order, so an epoch's
// augmentation does not depend on threads, prefetch or where a run was resumed.
#include "data/augment.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "data/dataset_info.h"

namespace qtrain {
namespace {

// A transform given as `key: true|false` or as a mapping of its options (`key: {...}` turns it on):
// the options (an empty mapping for `true`), or nothing when it is off. Returned by value: assigning
// one ConfigNode to another would assign through yaml-cpp's shared node and overwrite the config.
std::optional<ConfigNode> transform_block(ConfigNode& section, const std::string& key) {
  if (section.has(key) && section.yaml()[key].IsMap()) return section.child(key);
  if (section.get<bool>(key, false)) return section.empty_child(key);
  return std::nullopt;
}

// A [min, max] pair of numbers with lo <= min <= max <= hi (min > lo when lo_exclusive).
void get_range(ConfigNode& block, const std::string& key, double lo, double hi, double* min, double* max) {
  if (!block.has(key)) {
    block.accept(key);
    return;
  }
  const std::vector<double> v = block.get_double_list(key, {});
  if (v.size() != 2) block.fail(key, fmt::format("must be a pair [min, max], got {} value(s)", v.size()));
  if (!(v[0] > lo) || !(v[0] <= v[1]) || !(v[1] <= hi) || !std::isfinite(v[1]))
    block.fail(key, fmt::format("must satisfy {} < min <= max <= {}, got [{}, {}]", lo, hi, v[0], v[1]));
  *min = v[0];
  *max = v[1];
}

}  // namespace

AugmentConfig parse_augment_config(ConfigNode& section, const DatasetInfo& dataset) {
  AugmentConfig a;
  if (std::optional<ConfigNode> crop = transform_block(section, "random_crop")) {
    ConfigNode& block = *crop;
    const int64_t side = dataset.augment.crop_side;
    if (side == 0)
      section.fail("random_crop",
                   applies_only_to([](const DatasetInfo& d) { return d.augment.crop_side > 0; }, dataset.name) +
                       (dataset.augment.random_resized_crop ? " (use random_resized_crop)" : ""));
    a.random_crop = true;
    a.crop_size = block.get_int("size", side, 1, side);
    a.crop_padding = block.get_int("padding", 0, 0, side);
    block.finish();
  }
  if (std::optional<ConfigNode> resized = transform_block(section, "random_resized_crop")) {
    ConfigNode& block = *resized;
    if (!dataset.augment.random_resized_crop)
      section.fail("random_resized_crop",
                   applies_only_to([](const DatasetInfo& d) { return d.augment.random_resized_crop; }, dataset.name));
    a.random_resized_crop = true;
    get_range(block, "scale", 0.0, 1.0, &a.scale_min, &a.scale_max);
    get_range(block, "ratio", 0.0, 100.0, &a.ratio_min, &a.ratio_max);
    block.finish();
  }
  a.horizontal_flip = section.get<bool>("horizontal_flip", false);
  if (a.horizontal_flip && !dataset.augment.horizontal_flip)
    section.fail("horizontal_flip",
                 applies_only_to([](const DatasetInfo& d) { return d.augment.horizontal_flip; }, dataset.name));
  section.finish();
  return a;
}

CropBox draw_random_crop(PhiloxWords& words, int64_t side, int64_t size, int64_t padding) {
  const auto offsets = static_cast<uint32_t>(side + 2 * padding - size + 1);  // >= 1 since size <= side
  CropBox box;
  box.top = static_cast<int64_t>(bounded(words, offsets)) - padding;
  box.left = static_cast<int64_t>(bounded(words, offsets)) - padding;
  box.height = box.width = size;
  return box;
}

CropBox draw_random_resized_crop(PhiloxWords& words, int64_t height, int64_t width, const AugmentConfig& a) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_min = std::log(a.ratio_min), log_max = std::log(a.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (a.scale_min + (a.scale_max - a.scale_min) * uniform_open01(words));
    const double ratio = std::exp(log_min + (log_max - log_min) * uniform_open01(words));
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * ratio)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / ratio)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox box;
      box.top = bounded(words, static_cast<uint32_t>(height - h + 1));
      box.left = bounded(words, static_cast<uint32_t>(width - w + 1));
      box.height = h;
      box.width = w;
      return box;
    }
  }
  // Fallback: a central crop of the whole image, narrowed to the allowed aspect ratios.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < a.ratio_min)
    h = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / a.ratio_min)));
  else if (in_ratio > a.ratio_max)
    w = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * a.ratio_max)));
  return CropBox{(height - h) / 2, (width - w) / 2, h, w};
}

void crop_planes(const uint8_t* planes, int64_t channels, int64_t side, const CropBox& box, bool flip,
                 const float* tables, float* out) {
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = planes + c * side * side;
    const float* table = tables + c * 256;
    const float black = table[0];
    for (int64_t y = 0; y < box.height; ++y) {
      float* row = out + (c * box.height + y) * box.width;
      const int64_t sy = box.top + y;
      if (sy < 0 || sy >= side) {
        std::fill_n(row, box.width, black);
        continue;
      }
      const uint8_t* src = plane + sy * side;
      for (int64_t x = 0; x < box.width; ++x) {
        const int64_t sx = box.left + (flip ? box.width - 1 - x : x);
        row[x] = sx < 0 || sx >= side ? black : table[src[sx]];
      }
    }
  }
}

}  // namespace qtrain
