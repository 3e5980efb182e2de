// Test access to quant/cuda_common.cuh's device helpers (tests/quant/cuda_common_probe.cu).
#pragma once

#include <vector>

namespace qtrain::quant_test {

// warp_fold_partials over `partials` (the level-1 chunk sums of a det_sum), run by one warp: what
// each of the 32 lanes returned.
std::vector<float> warp_fold_partials_per_lane(const std::vector<float>& partials);

}  // namespace qtrain::quant_test
