// Loader: turns a Dataset into batches for one rank. Every epoch's order is a permutation derived from
// (seed, epoch) alone, so every rank computes the same permutation, takes its own contiguous shard of
// it, and a resumed run sees exactly the batches it would have seen. A prefetch thread assembles the
// next batches while the trainer computes, decoding the samples of a batch on `workers` threads.
// Training augmentation draws from a key per (seed, epoch, sample index), so it is as reproducible as
// the order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/worker_pool.h"
#include "framework/core/tensor.h"

namespace qtrain {

struct LoaderOptions {
  int64_t batch_size = 128;  // per rank
  bool shuffle = true;
  bool drop_last = false;  // drop a final partial batch (training under data parallelism uses true)
  uint64_t seed = 1;
  int rank = 0;
  int world_size = 1;
  int prefetch = 2;      // batches assembled ahead
  bool augment = false;  // read samples through Dataset::read_augmented (the training loader)
  int workers = 1;       // threads assembling one batch (the prefetch thread included)
};

struct Batch {
  Tensor x;       // (B, sample_shape...) f32, CPU
  Tensor labels;  // (B) i32, CPU
  // Sequence datasets only (undefined otherwise): x is (B, T_max, frame...) zero-padded, lengths (B)
  // i32 the frames of each sample, targets the concatenated target sequences (i32, at least one
  // element), target_lengths (B) i32 their lengths.
  Tensor lengths, targets, target_lengths;
  int64_t epoch = 0;
  int64_t index = 0;  // batch index within the epoch
};

// Sharding: with n samples and world size W, every rank gets m = n / W samples per epoch, rank r the
// positions [r*m, (r+1)*m) of the epoch's permutation; the n - m*W left over are dropped so that every
// rank runs the same number of steps. Batches are consecutive runs of batch_size within the shard; the
// last one is partial (kept unless drop_last).
class Loader {
 public:
  // `dataset` must outlive the loader.
  Loader(const Dataset& dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Batches of one epoch for this rank.
  int64_t batches_per_epoch() const;
  // Samples of one epoch for this rank.
  int64_t samples_per_epoch() const;
  // Starts producing the batches of `epoch`, beginning at batch `first_batch` (for resume). Stops and
  // discards an epoch still in progress.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the current epoch, or nullopt at its end. Rethrows a reader error (after the
  // batches completed before it).
  std::optional<Batch> next();

 private:
  void produce(int64_t epoch, int64_t first_batch);
  Batch assemble(const std::vector<int64_t>& permutation, int64_t epoch, int64_t index) const;
  Batch assemble_sequences(const std::vector<int64_t>& permutation, int64_t epoch, int64_t index) const;
  void stop();

  const Dataset& dataset_;
  LoaderOptions options_;
  std::unique_ptr<WorkerPool> pool_;  // null when workers == 1
  int64_t shard_begin_ = 0, shard_size_ = 0;
  std::thread worker_;
  // Guards ready_, done_, stopping_, error_. One condition variable serves both directions (a batch
  // became ready / a slot became free / stop requested); every change notifies all waiters.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  bool started_ = false, done_ = false, stopping_ = false;
  std::exception_ptr error_;
};

// The stream identifier of the shuffle in derive_philox_key(seed, epoch, kShuffleStream): keeps the
// data order independent of every other use of the run seed.
constexpr uint64_t kShuffleStream = 0x5DA7A5E7ull;

// The stream identifier of augment_key: keeps augmentation independent of the shuffle and of every
// other use of the run seed.
constexpr uint64_t kAugmentStream = 0xA06E4E7ull;

// The Philox key of sample `index`'s training transforms in `epoch`: the same whichever rank, batch or
// thread reads it.
inline PhiloxKey augment_key(uint64_t seed, int64_t epoch, int64_t index) {
  return derive_philox_key(seed, kAugmentStream, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
}

// The permutation of [0, n) used for `epoch` (identity when shuffle is off): Fisher-Yates driven by
// Philox4x32-10 words with unbiased bounded integers (Lemire's method), so it is the same on every
// platform and compiler. Exposed for tests.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

}  // namespace qtrain
