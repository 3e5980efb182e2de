// The `data` config section (every key validated, normalization lengths checked against the
// dataset's channels) and open_dataset(), which maps a DataConfig to a reader.
#include <cmath>
#include <limits>

#include "data/dataset.h"
#include "data/mnist.h"

namespace qtrain {
namespace {

// Channels of each dataset's samples, for checking data.mean / data.std.
// mnist and fashion_mnist are both grey-scale; a colour dataset returns 3 here.
int dataset_channels(const std::string& /*dataset*/) { return 1; }

std::vector<double> get_per_channel(ConfigNode& section, const std::string& key, const std::string& dataset,
                                    bool positive) {
  std::vector<double> v = section.get_double_list(key, {});
  if (v.empty()) {
    if (section.has(key)) section.fail(key, "must list one value per channel, got an empty list");
    return v;
  }
  const int channels = dataset_channels(dataset);
  if (static_cast<int>(v.size()) != channels)
    section.fail(key, fmt::format("has {} value(s) but dataset {} has {} channel(s)", v.size(), dataset, channels));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) section.fail(key, fmt::format("entry {} must be a finite number, got {}", i, v[i]));
    if (positive && !(v[i] > 0)) section.fail(key, fmt::format("entry {} must be > 0, got {}", i, v[i]));
  }
  return v;
}

}  // namespace

DataConfig parse_data_config(ConfigNode& section) {
  constexpr int64_t kMaxBatch = 1 << 20;
  constexpr int64_t kMaxSamples = std::numeric_limits<int32_t>::max();
  DataConfig c;
  c.dataset = section.get_choice("dataset", c.dataset, {"mnist", "fashion_mnist"});
  c.path = section.require<std::string>("path");
  if (c.path.empty()) section.fail("path", "must name the folder with the dataset's files");
  c.batch_size = section.get_int("batch_size", c.batch_size, 1, kMaxBatch);
  c.eval_batch_size = section.get_int("eval_batch_size", c.eval_batch_size, 1, kMaxBatch);
  c.shuffle = section.get<bool>("shuffle", c.shuffle);
  c.drop_last = section.get<bool>("drop_last", c.drop_last);
  c.prefetch = static_cast<int>(section.get_int("prefetch", c.prefetch, 1, 64));
  c.mean = get_per_channel(section, "mean", c.dataset, /*positive=*/false);
  c.std = get_per_channel(section, "std", c.dataset, /*positive=*/true);
  c.limit_train = section.get_int("limit_train", c.limit_train, 0, kMaxSamples);
  c.limit_test = section.get_int("limit_test", c.limit_test, 0, kMaxSamples);
  section.finish();
  return c;
}

std::unique_ptr<Dataset> open_dataset(const DataConfig& config, Split split) {
  MnistOptions o;
  if (config.dataset == "mnist") o.variant = MnistVariant::mnist;
  else if (config.dataset == "fashion_mnist") o.variant = MnistVariant::fashion_mnist;
  else input_error("data.dataset must be one of mnist, fashion_mnist, got '{}'", config.dataset);
  if (!config.mean.empty()) o.mean = config.mean[0];
  if (!config.std.empty()) o.std = config.std[0];
  o.limit = split == Split::train ? config.limit_train : config.limit_test;
  return open_mnist(config.path, split, o);
}

}  // namespace qtrain
