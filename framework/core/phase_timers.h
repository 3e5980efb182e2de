// Per-phase wall-clock accounting of a training step (data wait, forward, backward, optimizer, and
// the exchange phases encode / communicate / decode once data parallelism is on).
#pragma once

#include <array>
#include <chrono>

namespace qtrain {

enum class Phase { data, forward, backward, encode, communicate, decode, optimizer, count_ };

inline const char* phase_name(Phase p) {
  static const char* names[] = {"data", "forward", "backward", "encode", "communicate", "decode", "optimizer"};
  return names[static_cast<int>(p)];
}

class PhaseTimers {
 public:
  static constexpr int kCount = static_cast<int>(Phase::count_);
  void add(Phase p, double seconds) { seconds_[static_cast<size_t>(p)] += seconds; }
  double seconds(Phase p) const { return seconds_[static_cast<size_t>(p)]; }
  double total() const {
    double t = 0;
    for (double s : seconds_) t += s;
    return t;
  }
  void reset() { seconds_.fill(0.0); }

 private:
  std::array<double, kCount> seconds_{};
};

// Adds the time from construction to stop() (or destruction) to one phase.
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimers& timers, Phase phase)
      : timers_(timers), phase_(phase), start_(std::chrono::steady_clock::now()) {}
  ~ScopedPhase() { stop(); }
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    timers_.add(phase_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  PhaseTimers& timers_;
  Phase phase_;
  std::chrono::steady_clock::time_point start_;
  bool stopped_ = false;
};

}  // namespace qtrain
