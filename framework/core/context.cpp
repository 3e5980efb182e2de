// Context construction (the CUDA half lives in context_cuda.cpp / context_nocuda.cpp).
#include "framework/core/context.h"

#include <cblas.h>

#include "framework/core/check.h"

namespace qtrain {

CudaHandles* make_cuda_handles(int index, uint64_t seed);  // context_(no)cuda.cpp
void synchronize_cuda_handles(CudaHandles& handles);

int set_blas_threads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
  return openblas_get_num_threads();
}

Context Context::cpu(uint64_t seed, int cpu_threads) {
  Context ctx;
  ctx.seed_ = seed;
  ctx.cpu_threads_ = set_blas_threads(cpu_threads);
  ctx.pool_ = std::make_unique<CpuPool>(ctx.cpu_threads_);
  return ctx;
}

Context Context::cuda(int index, uint64_t seed) {
  Context ctx;
  ctx.device_ = Device::cuda(index);
  ctx.seed_ = seed;
  ctx.pool_ = std::make_unique<CpuPool>(1);
  ctx.cuda_.reset(make_cuda_handles(index, seed));
  return ctx;
}

Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;
Context::~Context() = default;

CudaHandles& Context::cuda() {
  QT_CHECK(cuda_ != nullptr, "this context is on {}, not a CUDA device", device_.str());
  return *cuda_;
}

void Context::synchronize() {
  if (cuda_) synchronize_cuda_handles(*cuda_);
}

Device select_device(const std::string& setting, int local_rank, const std::string& setting_name) {
  if (setting == "cpu") return Device::cpu();
  const int gpus = cuda_device_count();
  if (setting == "cuda") {
    if (gpus == 0)
      input_error("{}: cuda was requested but no CUDA GPU is available{}; use cpu or auto", setting_name,
                  QTRAIN_HAS_CUDA ? "" : " (this qtrain was built without CUDA)");
    return Device::cuda(local_rank % gpus);
  }
  return gpus > 0 ? Device::cuda(local_rank % gpus) : Device::cpu();
}

Context make_context(Device device, uint64_t seed, int threads) {
  return device.is_cuda() ? Context::cuda(device.index, seed) : Context::cpu(seed, threads);
}

}  // namespace qtrain
