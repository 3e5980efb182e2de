// Consecutive random words of one Philox4x32-10 stream, and the draws the data pipeline makes from
// them: unbiased bounded integers for shuffles and crop offsets, uniform doubles for crop areas and
// aspect ratios. A stream is a pure function of its key, so the loader's shuffles and every sample's
// augmentation are the same on every platform, thread count and resume.
#pragma once

#include <cstdint>

#include "framework/core/philox.h"

namespace qtrain {

// Word k of the stream under `key` is word k % 4 of the Philox block at counter k / 4.
class PhiloxWords {
 public:
  explicit PhiloxWords(PhiloxKey key) : key_(key) {}
  uint32_t next() {
    if (used_ == 4) {
      block_ = philox4x32_10(static_cast<uint32_t>(counter_), static_cast<uint32_t>(counter_ >> 32), 0, 0, key_);
      ++counter_;
      used_ = 0;
    }
    return block_.v[used_++];
  }

 private:
  PhiloxKey key_;
  uint64_t counter_ = 0;
  PhiloxBlock block_{};
  int used_ = 4;
};

// An unbiased integer in [0, range), range >= 1 (Lemire, "Fast random integer generation in an
// interval", 2019): the high word of word * range, rejecting the few low words that would bias it.
inline uint32_t bounded(PhiloxWords& words, uint32_t range) {
  uint64_t m = static_cast<uint64_t>(words.next()) * range;
  uint32_t low = static_cast<uint32_t>(m);
  if (low < range) {
    const uint32_t threshold = static_cast<uint32_t>(-range) % range;  // 2^32 mod range
    while (low < threshold) {
      m = static_cast<uint64_t>(words.next()) * range;
      low = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

// A double in the open interval (0, 1) from one word: (word + 0.5) / 2^32.
inline double uniform_open01(PhiloxWords& words) { return (static_cast<double>(words.next()) + 0.5) * 0x1p-32; }

}  // namespace qtrain
