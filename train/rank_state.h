// The per-rank part of a checkpoint: each rank's error-feedback residuals, which differ between ranks
// and so cannot live in rank 0's checkpoint.safetensors. A checkpoint is committed in two phases so
// that a crash at any moment leaves a checkpoint whose rank files are all there:
//   1. every rank writes checkpoint.rank<r>.step<N>.safetensors (the files of the last committed
//      checkpoint stay);
//   2. after a barrier, rank 0 renames checkpoint.safetensors (step N) into place: the commit;
//   3. after another barrier, every rank removes its files of other steps.
// A resume reads the file of the checkpoint's step, whichever phase a crash interrupted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/safetensors.h"

namespace qtrain {

std::string rank_state_path(const std::string& run_dir, int rank, int64_t step);

// Phase 1: this rank's state at `step`, written atomically under the step's own name.
void save_rank_state(const std::string& run_dir, int rank, int64_t step, const std::vector<NamedTensor>& state);

// Phase 3: removes this rank's state files of every other step, and the unversioned
// checkpoint.rank<r>.safetensors that versions before the two phases wrote.
void remove_stale_rank_states(const std::string& run_dir, int rank, int64_t step);

// The state to resume `rank` at `step` from: the file of that step, or else an unversioned file of an
// earlier version. Its metadata must name this rank and this step; anything else (a missing file, a
// file of another step, which such a version left when a crash came between the ranks' writes) is an
// InputError naming the file.
SafetensorsFile open_rank_state(const std::string& run_dir, int rank, int64_t step);

}  // namespace qtrain
