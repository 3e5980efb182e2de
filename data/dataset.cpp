// The `data` config section (every key validated, normalization lengths checked against the
// dataset's channels) and open_dataset(), which maps a DataConfig to a reader.
#include <cmath>
#include <limits>

#include "data/an4.h"
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
  c.dataset = section.get_choice("dataset", c.dataset, {"mnist", "fashion_mnist", "an4"});
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
  if (c.dataset == "an4") {
    // Speech keys exist only for speech datasets, so a typo'd image config still fails finish().
    c.speech.byte_order = section.get_choice("byte_order", c.speech.byte_order, {"big", "little"});
    c.speech.cache_dir = section.get<std::string>("cache_dir", c.speech.cache_dir);
    if (section.has("features")) {
      ConfigNode f = section.child("features");
      c.speech.num_mels = static_cast<int>(f.get_int("num_mels", c.speech.num_mels, 1, 512));
      c.speech.window_ms = f.get_double("window_ms", c.speech.window_ms, 1.0, 1000.0);
      c.speech.hop_ms = f.get_double("hop_ms", c.speech.hop_ms, 0.1, 1000.0);
      c.speech.fft_size = static_cast<int>(f.get_int("fft_size", c.speech.fft_size, 16, 1 << 16));
      c.speech.window = f.get_choice("window", c.speech.window, {"hann", "hamming"});
      f.finish();
    }
  }
  section.finish();
  return c;
}

std::unique_ptr<Dataset> open_dataset(const DataConfig& config, Split split) {
  if (config.dataset == "an4") {
    An4Options a;
    a.audio.raw_byte_order = config.speech.byte_order == "little" ? ByteOrder::little : ByteOrder::big;
    a.features.num_mels = config.speech.num_mels;
    a.features.window_ms = config.speech.window_ms;
    a.features.hop_ms = config.speech.hop_ms;
    a.features.fft_size = config.speech.fft_size;
    a.features.window = config.speech.window == "hamming" ? WindowType::hamming : WindowType::hann;
    a.cache_dir = config.speech.cache_dir;
    a.limit = split == Split::train ? config.limit_train : config.limit_test;
    return open_an4(config.path, split, a);
  }
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
