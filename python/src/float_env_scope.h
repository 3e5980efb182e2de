// The floating-point environment of one call from Python into qtrain. qtrain computes with subnormals
// flushed (framework/core/float_env.h): its CPU results, and their bit-identity with the CUDA kernels,
// depend on it. The interpreter's threads belong to the caller (PyTorch computes on them, with
// subnormals unless torch.set_flush_denormal(True)): each call sets the flags on entry and puts the
// caller's back on return, so that importing qtrain changes nothing in the program around it.
#pragma once

#include "framework/core/float_env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace qtrain::python {

class FlushedFloats {
 public:
  FlushedFloats() {
#if defined(__x86_64__) || defined(__i386__)
    saved_ = _mm_getcsr();
#else
    flushed_before_ = subnormals_flushed();
#endif
    flush_subnormals();
  }
  ~FlushedFloats() {
#if defined(__x86_64__) || defined(__i386__)
    // Only the flush bits: a call may leave exception flags behind, as any arithmetic does.
    constexpr unsigned kFlushBits = (1u << 15) | (1u << 6);
    _mm_setcsr((_mm_getcsr() & ~kFlushBits) | (saved_ & kFlushBits));
#else
    if (!flushed_before_) keep_subnormals();
#endif
  }
  FlushedFloats(const FlushedFloats&) = delete;
  FlushedFloats& operator=(const FlushedFloats&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  unsigned saved_ = 0;
#else
  bool flushed_before_ = false;
#endif
};

}  // namespace qtrain::python
