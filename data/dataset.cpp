// The `data` config section (the common keys, normalization lengths checked against the dataset's
// channels, then the dataset's own keys read by its reader) and open_dataset(), which hands a
// DataConfig to its reader. Every dataset-specific answer comes from the descriptor (dataset_info.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "data/dataset.h"
#include "data/dataset_info.h"

namespace qtrain {
namespace {

std::vector<double> get_per_channel(ConfigNode& section, const std::string& key, const DatasetInfo& dataset,
                                    bool positive) {
  if (dataset.channels == 0 && section.has(key))
    section.fail(key, fmt::format("does not apply to dataset {}: {}", dataset.name, dataset.no_mean_std));
  std::vector<double> v = section.get_double_list(key, {});
  if (v.empty()) {
    if (section.has(key)) section.fail(key, "must list one value per channel, got an empty list");
    return v;
  }
  if (static_cast<int>(v.size()) != dataset.channels)
    section.fail(
        key, fmt::format("has {} value(s) but dataset {} has {} channel(s)", v.size(), dataset.name, dataset.channels));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) section.fail(key, fmt::format("entry {} must be a finite number, got {}", i, v[i]));
    if (positive && !(v[i] > 0)) section.fail(key, fmt::format("entry {} must be > 0, got {}", i, v[i]));
  }
  return v;
}

// Refuses a key that other datasets' readers own and `dataset`'s does not, naming those datasets
// (else finish() would only call it unknown).
void refuse_keys_of_others(ConfigNode& section, const DatasetInfo& dataset) {
  auto owns = [](const DatasetInfo& d, const std::string& key) {
    return std::find(d.keys.begin(), d.keys.end(), key) != d.keys.end();
  };
  for (const DatasetInfo* other : datasets())
    for (const std::string& key : other->keys)
      if (section.has(key) && !owns(dataset, key))
        section.fail(key, applies_only_to([&](const DatasetInfo& d) { return owns(d, key); }, dataset.name));
}

}  // namespace

DataConfig parse_data_config(ConfigNode& section) {
  constexpr int64_t kMaxBatch = 1 << 20;
  constexpr int64_t kMaxSamples = std::numeric_limits<int32_t>::max();
  DataConfig c;
  c.dataset = section.get_choice("dataset", c.dataset, dataset_names());
  const DatasetInfo& dataset = dataset_info(c.dataset);
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
  c.mean = get_per_channel(section, "mean", dataset, /*positive=*/false);
  c.std = get_per_channel(section, "std", dataset, /*positive=*/true);
  c.limit_train = section.get_int("limit_train", c.limit_train, 0, kMaxSamples);
  c.limit_test = section.get_int("limit_test", c.limit_test, 0, kMaxSamples);
  c.workers = static_cast<int>(section.get_int("workers", c.workers, 0, 256));
  if (section.has("augment")) {
    ConfigNode augment = section.child("augment");
    c.augment = parse_augment_config(augment, dataset);
  }
  refuse_keys_of_others(section, dataset);
  c.dataset_options = dataset.parse(section);
  section.finish();
  return c;
}

int loader_workers(const DataConfig& config) {
  if (config.workers > 0) return config.workers;
  if (!dataset_info(config.dataset).decodes_on_read) return 1;
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

std::unique_ptr<Dataset> open_dataset(const DataConfig& config, Split split) {
  return dataset_info(config.dataset).open(config, split);
}

}  // namespace qtrain
