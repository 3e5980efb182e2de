// MNIST and Fashion-MNIST from a folder of IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each optionally gzipped as name.gz). Samples are
// [1, 28, 28] floats, pixel / 255 normalized as (x - mean) / std; 10 classes.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "data/dataset.h"

namespace qtrain {

enum class MnistVariant { mnist, fashion_mnist };

struct MnistOptions {
  MnistVariant variant = MnistVariant::mnist;
  std::optional<double> mean, std;  // absent: the variant's standard values (mnist_mean_std)
  int64_t limit = 0;                // keep only the first N samples (0 = all)
};

// The standard normalization: MNIST 0.1307 / 0.3081, Fashion-MNIST 0.2860 / 0.3530.
void mnist_mean_std(MnistVariant variant, double* mean, double* std);

// The path of `base` in `folder`: folder/base when it exists, else folder/base.gz; an InputError
// naming both and the four files the folder should hold when neither exists.
std::string find_idx_file(const std::string& folder, const std::string& base, MnistVariant variant);

std::unique_ptr<Dataset> open_mnist(const std::string& folder, Split split, const MnistOptions& options);

}  // namespace qtrain
