// Per-rank checkpoint files, committed in two phases (rank_state.h).
#include "train/rank_state.h"

#include <filesystem>
#include <system_error>

#include "framework/core/check.h"

namespace qtrain {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "qtrain-rank-state-1";

std::string rank_prefix(int rank) { return fmt::format("checkpoint.rank{}.", rank); }

// Written by versions before the two-phase commit: one file per rank, overwritten at every checkpoint.
std::string unversioned_path(const std::string& run_dir, int rank) {
  return (fs::path(run_dir) / (rank_prefix(rank) + "safetensors")).string();
}

}  // namespace

std::string rank_state_path(const std::string& run_dir, int rank, int64_t step) {
  return (fs::path(run_dir) / fmt::format("{}step{}.safetensors", rank_prefix(rank), step)).string();
}

void save_rank_state(const std::string& run_dir, int rank, int64_t step, const std::vector<NamedTensor>& state) {
  save_safetensors(rank_state_path(run_dir, rank, step), state,
                   {{"format", kFormat}, {"step", std::to_string(step)}, {"rank", std::to_string(rank)}});
}

void remove_stale_rank_states(const std::string& run_dir, int rank, int64_t step) {
  const std::string keep = fs::path(rank_state_path(run_dir, rank, step)).filename().string();
  const std::string prefix = rank_prefix(rank);
  std::error_code ec;
  const std::string suffix = ".safetensors";
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    // This rank's files only (the prefix ends with a dot, so rank 1's never matches rank 10's), and
    // only finished ones: a temporary file of an interrupted write does not end in the suffix.
    const bool step_file = name.rfind(prefix + "step", 0) == 0 && name.size() > suffix.size() &&
                           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if ((step_file && name != keep) || entry.path() == fs::path(unversioned_path(run_dir, rank)))
      fs::remove(entry.path(), ec);
  }
}

SafetensorsFile open_rank_state(const std::string& run_dir, int rank, int64_t step) {
  std::string path = rank_state_path(run_dir, rank, step);
  std::error_code ec;
  if (!fs::exists(path, ec) && fs::exists(unversioned_path(run_dir, rank), ec)) path = unversioned_path(run_dir, rank);
  if (!fs::exists(path, ec))
    input_error("--resume {}: {} is missing (the error-feedback state of rank {} at step {})", run_dir, path, rank,
                step);
  SafetensorsFile f(path);
  if (f.metadata_value("format") != kFormat)
    input_error("{}: not a qtrain rank state file (format '{}', expected '{}')", path, f.metadata_value("format"),
                kFormat);
  if (f.metadata_value("rank") != std::to_string(rank) || f.metadata_value("step") != std::to_string(step))
    input_error(
        "{}: holds the error-feedback state of rank {} at step {}, but rank {} resumes the checkpoint of "
        "step {}: the files do not belong together (a run interrupted while a version of qtrain before "
        "the two-phase checkpoint wrote them, or files copied between runs), so it cannot continue exactly",
        path, f.metadata_value("rank"), f.metadata_value("step"), rank, step);
  return f;
}

}  // namespace qtrain
