// Builds without the CUDA toolkit: no CUDA call can fail because none is made, so these strings only
// exist to satisfy check.h.
#include "framework/core/check.h"

namespace qtrain::detail {
std::string cuda_error_string(int code) { return fmt::format("CUDA error {} (built without CUDA)", code); }
std::string cublas_error_string(int code) { return fmt::format("cuBLAS status {}", code); }
std::string cudnn_error_string(int code) { return fmt::format("cuDNN status {}", code); }
std::string curand_error_string(int code) { return fmt::format("cuRAND status {}", code); }
}  // namespace qtrain::detail
