// Progress bar and plain progress lines.
#include "train/progress.h"

#include <unistd.h>

#include <cstdio>
#include <fmt/format.h>

namespace qtrain {

Progress::Progress(const std::string& mode, int64_t lines_every_steps) : every_(lines_every_steps) {
  if (mode == "bar")
    mode_ = Mode::bar;
  else if (mode == "lines")
    mode_ = Mode::lines;
  else if (mode == "none")
    mode_ = Mode::none;
  else
    mode_ = ::isatty(STDERR_FILENO) ? Mode::bar : Mode::lines;
}

void Progress::update(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, int64_t step, double loss,
                      double accuracy, double samples_per_s, double comm_share) {
  if (mode_ == Mode::none) return;
  const std::string stats = fmt::format("loss {:.4f} acc {:5.2f}% {:.0f} samples/s comm {:4.1f}%", loss, 100 * accuracy,
                                        samples_per_s, 100 * comm_share);
  if (mode_ == Mode::lines) {
    if (step % every_ == 0 || batch == batches)
      std::fprintf(
          stderr, "%s\n",
          fmt::format("epoch {}/{} batch {}/{} step {} {}", epoch + 1, epochs, batch, batches, step, stats).c_str());
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (batch != batches && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 28;
  const int filled = batches > 0 ? static_cast<int>(kWidth * batch / batches) : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r\033[2Kepoch %lld/%lld [%s] %lld/%lld %s", static_cast<long long>(epoch + 1),
               static_cast<long long>(epochs), bar.c_str(), static_cast<long long>(batch),
               static_cast<long long>(batches), stats.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::clear() {
  if (mode_ == Mode::bar && drawn_) {
    std::fprintf(stderr, "\r\033[2K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace qtrain
