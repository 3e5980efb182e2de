// The dataset contract: a fixed number of samples, each a float tensor of one shape and an integer
// label, readable by index from any thread. Readers validate their files once, at open, and report a
// missing or malformed file with its path and what was expected.
#pragma once

#include <any>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/augment.h"
#include "framework/core/check.h"
#include "framework/core/config_node.h"
#include "framework/core/philox.h"
#include "framework/core/tensor.h"

namespace qtrain {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;  // e.g. [1, 28, 28]
  virtual int num_classes() const = 0;
  // Writes sample `index` (normalized floats, shape_numel(sample_shape()) values) and its label.
  // Must be safe to call concurrently.
  virtual void read(int64_t index, float* x, int32_t* label) const = 0;
  // The same sample under the training transforms (data.augment), every random choice drawn from the
  // Philox stream `key` alone: the Loader passes augment_key(seed, epoch, index), so a sample's
  // augmentation is the same under any thread count, prefetch depth or resume. Must be safe to call
  // concurrently. Datasets without random transforms (and every test split) read() unchanged.
  virtual void read_augmented(int64_t index, PhiloxKey /*key*/, float* x, int32_t* label) const {
    read(index, x, label);
  }

  // Sequence datasets (speech). A sample is a variable number of frames, each of sample_shape(), and
  // its target is a variable-length sequence of classes in [1, num_classes()): class 0 is the CTC
  // blank. The Loader pads such samples into batches (Batch::lengths, targets, target_lengths).
  virtual bool is_sequence() const { return false; }
  // Frames of sample `index`.
  virtual int64_t sequence_length(int64_t /*index*/) const { return 1; }
  // Writes sequence_length(index) frames into x and replaces *targets. Safe to call concurrently.
  virtual void read_sequence(int64_t /*index*/, float* /*x*/, std::vector<int32_t>* /*targets*/) const {
    QT_FAIL("this dataset holds no sequences");
  }
  // The text of each class, for decoding (index 0, the blank, is ""; " " separates words); empty
  // for classification datasets.
  virtual std::vector<std::string> vocabulary() const { return {}; }
};

enum class Split { train, test };

// The `data` section of a config (docs/config-reference.md lists every key): the keys every dataset
// has, and the options of the dataset's own keys as its reader parsed them (data/dataset_info.h).
struct DataConfig {
  std::string dataset = "mnist";  // a name of data/datasets.def
  std::string path;               // folder with the dataset's files (required)
  int64_t batch_size = 128;       // per replica
  int64_t eval_batch_size = 128;  // default: batch_size
  bool shuffle = true;
  bool drop_last = false;
  int prefetch = 2;               // batches the loader thread prepares ahead
  std::vector<double> mean, std;  // per-channel normalization; empty = the dataset's standard values
  int64_t limit_train = 0;        // use only the first N training samples (0 = all)
  int64_t limit_test = 0;         // use only the first N test samples (0 = all)
  int workers = 0;                // threads decoding one batch; 0 = the dataset's default (loader_workers)
  AugmentConfig augment;          // training split only
  // The keys the dataset's reader owns, in the reader's own options type (DatasetInfo::parse).
  std::any dataset_options;

  // The reader's options: what its parse returned (T must be its type), or T's defaults where the
  // config was not parsed (a DataConfig built in code) or the dataset has no keys of its own.
  template <typename T>
  T dataset_options_as() const {
    if (!dataset_options.has_value()) return T{};
    const T* options = std::any_cast<T>(&dataset_options);
    QT_CHECK(options != nullptr, "dataset {}: its parsed options are not of the type its reader reads", dataset);
    return *options;
  }
  int64_t limit(Split split) const { return split == Split::train ? limit_train : limit_test; }
  // Random transforms are for training only; the test split reads every sample deterministically.
  AugmentConfig augment_of(Split split) const { return split == Split::train ? augment : AugmentConfig{}; }
};

// Parses and validates the `data` section (calls finish()).
DataConfig parse_data_config(ConfigNode& section);

// The loader threads for `config`: data.workers when set, else 1 for the in-memory datasets and up to
// 8 (the hardware threads) for those whose decoding dominates (DatasetInfo::decodes_on_read).
int loader_workers(const DataConfig& config);

// Opens one split with the dataset's reader; a missing folder or file, a wrong magic number, a
// truncated file or mismatched image/label counts are InputErrors naming the file and what was expected.
std::unique_ptr<Dataset> open_dataset(const DataConfig& config, Split split);

}  // namespace qtrain
