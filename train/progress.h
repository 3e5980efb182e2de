// Progress display: a single redrawn bar on a terminal, plain log lines otherwise (CI, files, pipes).
#pragma once

#include <chrono>
#include <string>

namespace qtrain {

class Progress {
 public:
  enum class Mode { bar, lines, none };
  // mode "auto" picks bar when stderr is a terminal.
  Progress(const std::string& mode, int64_t lines_every_steps);
  // Called after each step.
  void update(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, int64_t step, double loss, double accuracy,
              double samples_per_s, double comm_share);
  // Ends the current bar line (before a log line is printed).
  void clear();
  Mode mode() const { return mode_; }

 private:
  Mode mode_;
  int64_t every_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace qtrain
