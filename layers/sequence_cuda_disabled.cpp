// Builds without the CUDA toolkit link this file instead of lstm.cu and ctc_loss.cu (cuda_disabled.cpp
// does the same for the other layers): every CUDA entry point of the sequence layers is a clear error.
#include "framework/core/check.h"
#include "layers/ctc_loss.h"
#include "layers/lstm.h"

namespace qtrain {

// Without CUDA no cuDNN state is ever created, so there is nothing to free.
void LstmCudnnDeleter::operator()(LstmCudnn*) const noexcept {}

void lstm_forward_cuda(Context&, LstmCudnnPtr&, const LstmCudaShape&, const std::vector<int32_t>&,
                       const std::vector<Tensor>&, const Tensor&, Tensor&, bool) {
  detail::fail(__FILE__, __LINE__, "QTRAIN_HAS_CUDA", "lstm: this qtrain was built without CUDA");
}
void lstm_backward_cuda(Context&, LstmCudnnPtr&, const LstmCudaShape&, const std::vector<Tensor>&,
                        std::vector<Tensor>&, const Tensor&, const Tensor&, const Tensor&, Tensor*) {
  detail::fail(__FILE__, __LINE__, "QTRAIN_HAS_CUDA", "lstm: this qtrain was built without CUDA");
}

void ctc_loss_cuda(Context&, const Tensor&, const int32_t*, const int32_t*, const int32_t*, Tensor*,
                   CtcCudaScratch&) {
  detail::fail(__FILE__, __LINE__, "QTRAIN_HAS_CUDA", "ctc: this qtrain was built without CUDA");
}

}  // namespace qtrain
