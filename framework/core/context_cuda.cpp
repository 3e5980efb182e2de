// CUDA half of Context: stream and library handles, every call checked.
#include "framework/core/check.h"
#include "framework/core/context.h"
#include "framework/core/cuda_context.h"

namespace qtrain {

CudaHandles::CudaHandles(int dev, unsigned long long seed) : device(dev) {
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream));
  CUDNN_CHECK(cudnnCreate(&cudnn));
  CUDNN_CHECK(cudnnSetStream(cudnn, stream));
  CURAND_CHECK(curandCreateGenerator(&curand, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(curand, seed));
  CURAND_CHECK(curandSetStream(curand, stream));
}

CudaHandles::~CudaHandles() {
  // Teardown errors are not actionable; never throw from a destructor.
  cudaSetDevice(device);
  if (curand) curandDestroyGenerator(curand);
  if (cudnn) cudnnDestroy(cudnn);
  if (cublas) cublasDestroy(cublas);
  if (stream) cudaStreamDestroy(stream);
}

CudaHandles* make_cuda_handles(int index, uint64_t seed) {
  QT_CHECK(cuda_available(), "device cuda:{} requested but no CUDA GPU is available", index);
  QT_CHECK(index >= 0 && index < cuda_device_count(), "device cuda:{} requested but only {} GPU(s) exist", index,
           cuda_device_count());
  return new CudaHandles(index, seed);
}

void CudaHandlesDeleter::operator()(CudaHandles* handles) const noexcept { delete handles; }

void synchronize_cuda_handles(CudaHandles& handles) { CUDA_CHECK(cudaStreamSynchronize(handles.stream)); }

StreamEvent::~StreamEvent() {
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));  // not actionable in teardown
}

void StreamEvent::record(Context& ctx) {
  if (!ctx.device().is_cuda()) return;
  if (event_ == nullptr) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
  }
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), ctx.cuda().stream));
  recorded_ = true;
}

void StreamEvent::make_wait(Context& ctx) const {
  if (!recorded_ || !ctx.device().is_cuda()) return;
  CUDA_CHECK(cudaStreamWaitEvent(ctx.cuda().stream, static_cast<cudaEvent_t>(event_), 0));
}

}  // namespace qtrain
