// Training-time augmentation: the `data.augment` config block, the random choices of each transform
// (drawn from one sample's Philox stream, see Loader's augment_key), and the pixel operations of the
// small in-memory image datasets. Augmentation only ever applies to the training split.
//
//   random_crop         {size, padding}: pad the image with `padding` black pixels on every side, cut a
//                       size x size window at a uniformly random offset (torchvision RandomCrop with
//                       padding and fill 0). Small square images (CIFAR).
//   random_resized_crop {scale, ratio}: a window of random area fraction and aspect ratio, resized to
//                       data.image_size (torchvision RandomResizedCrop). Decoded images (imagefolder).
//   horizontal_flip     mirror left-right with probability 1/2.
// Which dataset offers which transform is its descriptor's AugmentSupport (data/dataset_info.h).
#pragma once

#include <cstdint>
#include <string>

#include "data/random_stream.h"
#include "framework/core/config_node.h"

namespace qtrain {

struct AugmentConfig {
  bool random_crop = false;
  int64_t crop_size = 0;     // output side; 0 = the image's side
  int64_t crop_padding = 0;  // black pixels added on each side before cropping
  bool random_resized_crop = false;
  double scale_min = 0.08, scale_max = 1.0;             // fraction of the image area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // width / height
  bool horizontal_flip = false;

  bool any() const { return random_crop || random_resized_crop || horizontal_flip; }
};

// The transforms a dataset's reader implements in read_augmented(), as its descriptor states them.
struct AugmentSupport {
  int64_t crop_side = 0;  // random_crop, up to this size (the image's side); 0: no random_crop
  bool random_resized_crop = false;
  bool horizontal_flip = false;
};

struct DatasetInfo;

// Parses `data.augment` for `dataset` (calls finish()). A transform the dataset does not support is
// an error naming the key and the datasets that support it.
AugmentConfig parse_augment_config(ConfigNode& section, const DatasetInfo& dataset);

// A window of an image in pixels; top/left may be negative (in padding) for random_crop.
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// random_crop on a side x side image: a size x size window whose offset is uniform over the padded
// image, in unpadded coordinates (top, left in [-padding, side + padding - size]). Two draws.
CropBox draw_random_crop(PhiloxWords& words, int64_t side, int64_t size, int64_t padding);

// random_resized_crop on a height x width image, exactly torchvision's RandomResizedCrop.get_params:
// up to 10 attempts of an area fraction uniform in [scale_min, scale_max] and a log-uniform aspect
// ratio, accepted when the rounded window fits; otherwise the largest centered window whose aspect
// ratio is clamped into [ratio_min, ratio_max].
CropBox draw_random_resized_crop(PhiloxWords& words, int64_t height, int64_t width, const AugmentConfig& a);

// horizontal_flip: true with probability 1/2. One draw.
inline bool draw_flip(PhiloxWords& words) { return (words.next() >> 31) != 0; }

// Writes the box's window of `channels` planes of side x side u8 pixels (CHW) as normalized floats
// (CHW, box.height x box.width): out[c][y][x] = table[c * 256 + pixel], pixels outside the image are
// black (value 0), and the window is mirrored left-right when `flip`.
void crop_planes(const uint8_t* planes, int64_t channels, int64_t side, const CropBox& box, bool flip,
                 const float* tables, float* out);

}  // namespace qtrain
