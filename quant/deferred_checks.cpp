// DeferredChecks: the host's bookkeeping; the device area's allocation and readback are CUDA calls in
// common.cu (quant/kernels.h).
#include "quant/deferred_checks.h"

#include <exception>
#include <utility>

#include "framework/core/check.h"
#include "quant/kernels.h"
#include "quant/quantizer.h"

namespace qtrain {
namespace {

thread_local DeferredChecks* t_active = nullptr;

// Enough for a mid-sized model's step (a tensor costs a few encodes and decodes per piece); the area
// doubles when a step needs more.
constexpr size_t kInitialSlots = 512;

// Raises a copy of the current exception with `prefix` before its message, keeping its type where the
// callers catch by type (the trainer's NaN guard catches NonFiniteInputError).
[[noreturn]] void rethrow_prefixed(const std::string& prefix) {
  try {
    throw;
  } catch (const NonFiniteInputError& e) {
    throw NonFiniteInputError(prefix + e.what());
  } catch (const InputError& e) {
    throw InputError(prefix + e.what());
  } catch (const Error& e) {
    throw Error(prefix + e.what());
  }
}

}  // namespace

DeferredChecks::DeferredChecks(Context& ctx) : ctx_(ctx) {
  QT_CHECK(ctx.device().is_cuda(), "deferred quantizer checks are for CUDA contexts, not {}", ctx.device().str());
  allocate(kInitialSlots);
}

DeferredChecks::~DeferredChecks() {
  if (t_active == this) t_active = nullptr;
  release();
}

void DeferredChecks::allocate(size_t capacity) {
#if QTRAIN_QUANT_CUDA
  device_ = quant_detail::cuda_status_area_allocate(ctx_, capacity, &host_);
  capacity_ = capacity;
#else
  (void)capacity;
  QT_FAIL("this build has no CUDA quantizers");
#endif
}

void DeferredChecks::release() {
#if QTRAIN_QUANT_CUDA
  quant_detail::cuda_status_area_free(ctx_, device_, host_);
#endif
  device_ = host_ = nullptr;
  capacity_ = used_ = 0;
}

DeferredChecks::Scope::Scope(DeferredChecks& checks) : previous_(t_active) { t_active = &checks; }
DeferredChecks::Scope::~Scope() { t_active = previous_; }

DeferredChecks* DeferredChecks::active(const Context& ctx) {
  return t_active != nullptr && &t_active->ctx_ == &ctx ? t_active : nullptr;
}

EncodeStatus* DeferredChecks::take_slot() {
  if (used_ == capacity_) {
    const size_t grown = 2 * capacity_;
    settle(describe_);  // every slot is free again (or an error is raised here)
    release();
    allocate(grown);
  }
  return device_ + used_++;
}

void DeferredChecks::defer(EncodeStatus* slot, std::function<void(const EncodeStatus&)> check) {
  QT_CHECK(slot >= device_ && slot < device_ + used_, "deferred check of a status word that is not one of its slots");
  checks_.push_back({static_cast<size_t>(slot - device_), tag_, std::move(check)});
}

void DeferredChecks::settle(const std::function<std::string(uint64_t)>& describe) {
  if (describe) describe_ = describe;
  if (used_ == 0) return;
#if QTRAIN_QUANT_CUDA
  // One copy and one wait for the whole step; the slots are zeroed again behind it on the stream.
  quant_detail::cuda_status_area_read(ctx_, host_, device_, used_);
#endif
  used_ = 0;
  std::vector<Pending> checks = std::move(checks_);
  checks_.clear();
  for (const Pending& p : checks) {
    try {
      p.check(host_[p.slot]);
    } catch (const Error&) {
      rethrow_prefixed(describe_ ? describe_(p.tag) + ": " : std::string());
    }
  }
}

}  // namespace qtrain
