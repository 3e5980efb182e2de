// CIFAR-10 and CIFAR-100 in their official binary format (the "binary version" archives,
// cifar-10-binary.tar.gz / cifar-100-binary.tar.gz, extracted). Every record is the label byte(s) and
// 3072 pixel bytes: the red, green and blue planes of a 32x32 image, row-major.
//   cifar10:  data_batch_1.bin .. data_batch_5.bin (train, in that order), test_batch.bin;
//             record = 1 label byte (0..9) + 3072 = 3073 bytes.
//   cifar100: train.bin, test.bin; record = coarse label (0..19) + fine label (0..99) + 3072 = 3074.
// Samples are [3, S, S] floats, pixel / 255 normalized per channel as (x - mean[c]) / std[c], where S is
// 32, or the random_crop size (the training split crops randomly, the test split centrally).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/dataset.h"

namespace qtrain {

constexpr int64_t kCifarSide = 32;

enum class CifarVariant { cifar10, cifar100 };

struct CifarOptions {
  CifarVariant variant = CifarVariant::cifar10;
  bool coarse_labels = false;     // cifar100: the 20 superclasses instead of the 100 classes
  std::vector<double> mean, std;  // 3 values each; empty: the variant's standard values (cifar_mean_std)
  int64_t limit = 0;              // keep only the first N records (0 = all)
  int64_t size = kCifarSide;      // sample side: the central window (read) or a random_crop window
  AugmentConfig augment;          // random_crop (its padding) / horizontal_flip, applied by read_augmented()
};

// The standard per-channel statistics of the training set (population std over all pixels):
// CIFAR-10 mean 0.4914 0.4822 0.4465, std 0.2470 0.2435 0.2616;
// CIFAR-100 mean 0.5071 0.4865 0.4409, std 0.2673 0.2564 0.2762.
void cifar_mean_std(CifarVariant variant, std::vector<double>* mean, std::vector<double>* std);

// Reads and validates the split's files: missing files (all named), a size that is not a whole
// number of records (truncated), labels out of range (file and record index) are InputErrors.
std::unique_ptr<Dataset> open_cifar(const std::string& folder, Split split, const CifarOptions& options);

}  // namespace qtrain
