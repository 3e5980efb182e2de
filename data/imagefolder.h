// An ImageNet-style folder of JPEG files: root/train/<class>/*.JPEG and root/val/<class>/*.JPEG (the
// test split). Classes are the sub-folders of train/, sorted by name (byte order), numbered from 0;
// val/ may hold only those folders. Files within a class are sorted by name; files whose extension is
// not .jpg / .jpeg (any case) and hidden files are ignored, but a class folder without any JPEG is an
// error. Images are decoded on read (on the loader's worker threads), so a malformed JPEG is reported
// when it is first read, with its path and libjpeg's message.
//
// Samples are [3, image_size, image_size] floats, pixel / 255 normalized per channel with the ImageNet
// statistics (mean 0.485 0.456 0.406, std 0.229 0.224 0.225) unless data.mean / data.std say otherwise.
//   read():           resize the shorter side to eval_resize, center-crop image_size (torchvision
//                     Resize(eval_resize) + CenterCrop(image_size)).
//   read_augmented(): random_resized_crop to image_size when configured (else as read()), then a
//                     horizontal flip with probability 1/2 when configured.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/dataset.h"

namespace qtrain {

struct ImageFolderOptions {
  int64_t image_size = 224;
  int64_t eval_resize = 256;
  std::vector<double> mean, std;  // 3 values each; empty: ImageNet's
  int64_t limit = 0;              // keep only the first N files (in class, then file order; 0 = all)
  AugmentConfig augment;
};

// Lists the split's files (decodes none). No train/ or split folder, no class folders, a class folder
// without JPEGs, or a val/ class unknown to train/ are InputErrors naming the folder.
std::unique_ptr<Dataset> open_imagefolder(const std::string& root, Split split, const ImageFolderOptions& options);

}  // namespace qtrain
