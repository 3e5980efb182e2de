// A dataset's descriptor: everything outside its reader needs to know about a dataset, in one row that
// the reader's own .cpp file defines (as quant/method.h's rows do for the quantization methods). The
// `data` section's parser, data.augment's checks, the loader's defaults and every message that lists
// datasets read the rows; no code outside a reader's files compares dataset names.
// data/datasets.def lists the rows (one line per dataset).
#pragma once

#include <any>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/dataset.h"

namespace qtrain {

struct DatasetInfo {
  std::string name;  // data.dataset
  // Channels of a sample: data.mean and data.std list one value each. 0: the samples are not
  // normalized per channel, and both keys are refused, saying `no_mean_std` (why).
  int channels = 0;
  std::string no_mean_std;
  // The data.augment transforms that the reader's read_augmented() applies.
  AugmentSupport augment;
  // Keys of the `data` section that this dataset's reader owns (beside the common ones of
  // DataConfig): the reader's `parse` reads them, and a config of another dataset that sets one is
  // refused, naming the datasets it applies to.
  std::vector<std::string> keys;
  // Whether reading a sample is dominated by decoding it (JPEG files): data.workers then defaults to
  // the hardware threads (at most 8) instead of 1.
  bool decodes_on_read = false;
  // Reads and validates `keys` (errors name the key and what was expected) and returns the reader's
  // options with them set (DataConfig::dataset_options); `open` adds the common keys.
  std::function<std::any(ConfigNode& section)> parse = [](ConfigNode&) { return std::any{}; };
  // Opens one split of a parsed config (open_dataset()).
  std::function<std::unique_ptr<Dataset>(const DataConfig& config, Split split)> open;
};

// Every dataset, in datasets.def's order (the order in which messages and docs list them).
std::span<const DatasetInfo* const> datasets();
// The names of the datasets that satisfy `pred` (default: all), in datasets.def's order.
std::vector<std::string> dataset_names(const std::function<bool(const DatasetInfo&)>& pred = {});
// The descriptor of `name`; an InputError that lists the registered datasets when there is none.
const DatasetInfo& dataset_info(const std::string& name);
// The message for a key or transform that `dataset` lacks: "applies to dataset a only, not x" or
// "applies to datasets a, b and c, not x", listing the datasets that satisfy `has` (a transform
// that no reader implements: "applies to no registered dataset").
std::string applies_only_to(const std::function<bool(const DatasetInfo&)>& has, const std::string& dataset);

}  // namespace qtrain
