// Loader: the epoch permutation (Philox-driven Fisher-Yates), this rank's shard of it, and a prefetch
// thread that assembles batches ahead of the trainer (with a WorkerPool sharing each batch's samples). The thread is
// stopped and joined before a new epoch starts and in the destructor; a reader exception travels to next().
#include "data/loader.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "data/random_stream.h"
#include "framework/core/float_env.h"

namespace qtrain {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  QT_CHECK(n >= 0 && n <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max()),
           "epoch_permutation: {} samples, supported up to 2^32 - 1", n);
  QT_CHECK(epoch >= 0, "epoch_permutation: negative epoch {}", epoch);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  if (!shuffle) return p;
  PhiloxWords words(derive_philox_key(seed, static_cast<uint64_t>(epoch), kShuffleStream));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = bounded(words, static_cast<uint32_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

Loader::Loader(const Dataset& dataset, LoaderOptions options) : dataset_(dataset), options_(options) {
  QT_CHECK(options_.batch_size >= 1, "loader: batch_size must be >= 1, got {}", options_.batch_size);
  QT_CHECK(options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size,
           "loader: rank {} of world size {}", options_.rank, options_.world_size);
  QT_CHECK(options_.prefetch >= 1, "loader: prefetch must be >= 1, got {}", options_.prefetch);
  QT_CHECK(options_.workers >= 1, "loader: workers must be >= 1, got {}", options_.workers);
  if (options_.workers > 1) pool_ = std::make_unique<WorkerPool>(options_.workers);
  shard_size_ = dataset_.size() / options_.world_size;
  shard_begin_ = options_.rank * shard_size_;
}

Loader::~Loader() { stop(); }

int64_t Loader::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? shard_size_ / b : (shard_size_ + b - 1) / b;
}

int64_t Loader::samples_per_epoch() const {
  return options_.drop_last ? batches_per_epoch() * options_.batch_size : shard_size_;
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  QT_CHECK(epoch >= 0, "loader: negative epoch {}", epoch);
  QT_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch(), "loader: first batch {} of an epoch of {}",
           first_batch, batches_per_epoch());
  stop();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.clear();
    done_ = false;
    stopping_ = false;
    error_ = nullptr;
    started_ = true;
  }
  worker_ = std::thread(&Loader::produce, this, epoch, first_batch);
}

std::optional<Batch> Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  QT_CHECK(started_, "loader: next() before start_epoch()");
  cv_.wait(lock, [&] { return !ready_.empty() || done_; });
  if (!ready_.empty()) {
    Batch batch = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    cv_.notify_all();  // a prefetch slot is free
    return batch;
  }
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

Batch Loader::assemble(const std::vector<int64_t>& permutation, int64_t epoch, int64_t index) const {
  const int64_t begin = index * options_.batch_size;
  const int64_t rows = std::min(options_.batch_size, shard_size_ - begin);
  const Shape sample = dataset_.sample_shape();
  const int64_t sample_numel = shape_numel(sample);
  Shape x_shape{rows};
  x_shape.insert(x_shape.end(), sample.begin(), sample.end());
  if (dataset_.is_sequence()) return assemble_sequences(permutation, epoch, index);
  Batch batch;
  batch.x = Tensor::empty(x_shape, DType::f32);      // (B, sample...)
  batch.labels = Tensor::empty({rows}, DType::i32);  // (B)
  batch.epoch = epoch;
  batch.index = index;
  float* x = batch.x.data<float>();
  int32_t* labels = batch.labels.data<int32_t>();
  // Every row depends only on its sample index (and the epoch), so rows may be read in any order on
  // any thread.
  auto read_row = [&](int64_t r) {
    const int64_t sample = permutation[static_cast<size_t>(shard_begin_ + begin + r)];
    if (options_.augment)
      dataset_.read_augmented(sample, augment_key(options_.seed, epoch, sample), x + r * sample_numel, labels + r);
    else
      dataset_.read(sample, x + r * sample_numel, labels + r);
  };
  if (pool_) {
    pool_->parallel_for(rows, read_row);
  } else {
    for (int64_t r = 0; r < rows; ++r) read_row(r);
  }
  return batch;
}

// Sequences are zero-padded to the longest one in the batch: x is (B, T_max, frame...).
Batch Loader::assemble_sequences(const std::vector<int64_t>& permutation, int64_t epoch, int64_t index) const {
  const int64_t begin = index * options_.batch_size;
  const int64_t rows = std::min(options_.batch_size, shard_size_ - begin);
  const Shape frame = dataset_.sample_shape();
  const int64_t frame_numel = shape_numel(frame);
  std::vector<int64_t> ids(static_cast<size_t>(rows));
  int64_t t_max = 1;
  for (int64_t r = 0; r < rows; ++r) {
    ids[static_cast<size_t>(r)] = permutation[static_cast<size_t>(shard_begin_ + begin + r)];
    t_max = std::max(t_max, dataset_.sequence_length(ids[static_cast<size_t>(r)]));
  }
  Shape x_shape{rows, t_max};
  x_shape.insert(x_shape.end(), frame.begin(), frame.end());
  Batch batch;
  batch.x = Tensor::zeros(x_shape, DType::f32);
  batch.labels = Tensor::zeros({rows}, DType::i32);
  batch.lengths = Tensor::empty({rows}, DType::i32);
  batch.target_lengths = Tensor::empty({rows}, DType::i32);
  batch.epoch = epoch;
  batch.index = index;
  std::vector<int32_t> all_targets, targets;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t id = ids[static_cast<size_t>(r)];
    dataset_.read_sequence(id, batch.x.data<float>() + r * t_max * frame_numel, &targets);
    batch.lengths.data<int32_t>()[r] = static_cast<int32_t>(dataset_.sequence_length(id));
    batch.target_lengths.data<int32_t>()[r] = static_cast<int32_t>(targets.size());
    all_targets.insert(all_targets.end(), targets.begin(), targets.end());
  }
  batch.targets = Tensor::empty({std::max<int64_t>(1, static_cast<int64_t>(all_targets.size()))}, DType::i32);
  std::copy(all_targets.begin(), all_targets.end(), batch.targets.data<int32_t>());
  return batch;
}

void Loader::produce(int64_t epoch, int64_t first_batch) {
  flush_subnormals();
  try {
    const std::vector<int64_t> permutation = epoch_permutation(dataset_.size(), options_.seed, epoch, options_.shuffle);
    const int64_t batches = batches_per_epoch();
    for (int64_t index = first_batch; index < batches; ++index) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || static_cast<int>(ready_.size()) < options_.prefetch; });
        if (stopping_) break;
      }
      // Assembled outside the lock so next() can hand out earlier batches meanwhile.
      Batch batch = assemble(permutation, epoch, index);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) break;
        ready_.push_back(std::move(batch));
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
}

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

}  // namespace qtrain
