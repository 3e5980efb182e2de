// The `data` config section (every key validated, normalization lengths checked against the
// dataset's channels) and open_dataset(), which maps a DataConfig to a reader.
#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "data/an4.h"
#include "data/cifar.h"
#include "data/dataset.h"
#include "data/imagefolder.h"
#include "data/mnist.h"

namespace qtrain {
namespace {

// Channels of each dataset's samples, for checking data.mean / data.std.
int dataset_channels(const std::string& dataset) { return dataset == "mnist" || dataset == "fashion_mnist" ? 1 : 3; }

// Rejects `key` when it is set for a dataset it does not apply to.
void only_for(ConfigNode& section, const std::string& key, const std::string& dataset, const std::string& applies_to) {
  if (section.has(key) && dataset != applies_to)
    section.fail(key, fmt::format("applies to dataset {} only, not {}", applies_to, dataset));
}

std::vector<double> get_per_channel(ConfigNode& section, const std::string& key, const std::string& dataset,
                                    bool positive) {
  // AN4's features are normalized per utterance (features.*): a mean or std there would be ignored.
  if (dataset == "an4" && section.has(key))
    section.fail(key, "applies to the image datasets only; an4's features are normalized per utterance");
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
  c.dataset =
      section.get_choice("dataset", c.dataset, {"mnist", "fashion_mnist", "cifar10", "cifar100", "imagefolder", "an4"});
  c.path = section.require<std::string>("path");
  if (c.path.empty()) section.fail("path", "must name the folder with the dataset's files");
  c.batch_size = section.get_int("batch_size", c.batch_size, 1, kMaxBatch);
  // By default evaluation uses the training batch: the network's activation buffers grow to the
  // largest batch they have seen and keep that size, so a larger evaluation batch raises the memory
  // of the whole run (ResNet-110 keeps about 6 MB per image: 1000 images took 6 GB per rank).
  c.eval_batch_size = section.get_int("eval_batch_size", c.batch_size, 1, kMaxBatch);
  c.shuffle = section.get<bool>("shuffle", c.shuffle);
  c.drop_last = section.get<bool>("drop_last", c.drop_last);
  c.prefetch = static_cast<int>(section.get_int("prefetch", c.prefetch, 1, 64));
  c.mean = get_per_channel(section, "mean", c.dataset, /*positive=*/false);
  c.std = get_per_channel(section, "std", c.dataset, /*positive=*/true);
  c.limit_train = section.get_int("limit_train", c.limit_train, 0, kMaxSamples);
  c.limit_test = section.get_int("limit_test", c.limit_test, 0, kMaxSamples);
  c.workers = static_cast<int>(section.get_int("workers", c.workers, 0, 256));
  if (section.has("augment")) {
    ConfigNode augment = section.child("augment");
    c.augment = parse_augment_config(augment, c.dataset);
  }
  only_for(section, "label", c.dataset, "cifar100");
  c.coarse_labels = section.get_choice("label", "fine", {"fine", "coarse"}) == "coarse";
  only_for(section, "image_size", c.dataset, "imagefolder");
  only_for(section, "eval_resize", c.dataset, "imagefolder");
  c.image_size = section.get_int("image_size", c.image_size, 1, 4096);
  // The default keeps ImageNet's ratio 256 / 224 for other image sizes.
  c.eval_resize = section.get_int("eval_resize", (c.image_size * 256 + 112) / 224, 1, 8192);
  if (c.eval_resize < c.image_size)
    section.fail("eval_resize",
                 fmt::format("must be >= image_size ({}) for the center crop, got {}", c.image_size, c.eval_resize));
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
      c.speech.stack = static_cast<int>(f.get_int("stack", c.speech.stack, 1, 16));
      // The filterbank checks this too, but cannot name the key.
      const int rate = FilterbankOptions{}.sample_rate;
      const long window = std::lround(c.speech.window_ms * rate / 1000.0);
      if (c.speech.fft_size < window)
        f.fail("fft_size", fmt::format("must be >= the window of {} samples (window_ms {} at {} Hz), got {}", window,
                                       c.speech.window_ms, rate, c.speech.fft_size));
      f.finish();
    }
  }
  section.finish();
  return c;
}

int loader_workers(const DataConfig& config) {
  if (config.workers > 0) return config.workers;
  if (config.dataset != "imagefolder") return 1;
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

std::unique_ptr<Dataset> open_dataset(const DataConfig& config, Split split) {
  const int64_t limit = split == Split::train ? config.limit_train : config.limit_test;
  // Random transforms are for training only; the test split reads every sample deterministically.
  const AugmentConfig augment = split == Split::train ? config.augment : AugmentConfig{};
  if (config.dataset == "cifar10" || config.dataset == "cifar100") {
    CifarOptions o;
    o.variant = config.dataset == "cifar10" ? CifarVariant::cifar10 : CifarVariant::cifar100;
    o.coarse_labels = config.coarse_labels;
    o.mean = config.mean;
    o.std = config.std;
    o.limit = limit;
    o.size = config.augment.random_crop ? config.augment.crop_size : kCifarSide;
    o.augment = augment;
    return open_cifar(config.path, split, o);
  }
  if (config.dataset == "imagefolder") {
    ImageFolderOptions o;
    o.image_size = config.image_size;
    o.eval_resize = config.eval_resize;
    o.mean = config.mean;
    o.std = config.std;
    o.limit = limit;
    o.augment = augment;
    return open_imagefolder(config.path, split, o);
  }
  if (config.dataset == "an4") {
    An4Options a;
    a.audio.raw_byte_order = config.speech.byte_order == "little" ? ByteOrder::little : ByteOrder::big;
    a.features.num_mels = config.speech.num_mels;
    a.features.window_ms = config.speech.window_ms;
    a.features.hop_ms = config.speech.hop_ms;
    a.features.fft_size = config.speech.fft_size;
    a.features.window = config.speech.window == "hamming" ? WindowType::hamming : WindowType::hann;
    a.cache_dir = config.speech.cache_dir;
    a.limit = limit;
    a.stack = config.speech.stack;
    return open_an4(config.path, split, a);
  }
  MnistOptions o;
  if (config.dataset == "mnist")
    o.variant = MnistVariant::mnist;
  else if (config.dataset == "fashion_mnist")
    o.variant = MnistVariant::fashion_mnist;
  else
    input_error("data.dataset must be one of mnist, fashion_mnist, cifar10, cifar100, imagefolder, an4, got '{}'",
                config.dataset);
  if (!config.mean.empty()) o.mean = config.mean[0];
  if (!config.std.empty()) o.std = config.std[0];
  o.limit = limit;
  return open_mnist(config.path, split, o);
}

}  // namespace qtrain
