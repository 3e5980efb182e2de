// Subnormal flushing (float_env.h): the per-thread flags. float_env_at_load.cpp sets them on the main
// thread of every qtrain program before any shared library's constructor runs.
#include "framework/core/float_env.h"

#include <cfloat>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace qtrain {
namespace {

#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned kFtz = 1u << 15;  // MXCSR: flush subnormal results to zero
constexpr unsigned kDaz = 1u << 6;   // MXCSR: read subnormal operands as zero
#elif defined(__aarch64__)
constexpr unsigned long kFz = 1ul << 24;  // FPCR.FZ: flush subnormal operands and results
#endif

// No sanitizer instrumentation: it runs before AddressSanitizer's runtime may be initialized.
__attribute__((no_sanitize("address", "undefined"))) void set_flags() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(_mm_getcsr() | kFtz | kDaz);
#elif defined(__aarch64__)
  unsigned long fpcr = 0;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | kFz));
#endif
}

void clear_flags() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(_mm_getcsr() & ~(kFtz | kDaz));
#elif defined(__aarch64__)
  unsigned long fpcr = 0;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  __asm__ volatile("msr fpcr, %0" : : "r"(fpcr & ~kFz));
#endif
}

}  // namespace

// Not instrumented: float_env_at_load.cpp calls it before AddressSanitizer's runtime may be initialized.
__attribute__((no_sanitize("address", "undefined"))) void flush_subnormals() { set_flags(); }

void keep_subnormals() { clear_flags(); }

bool subnormals_flushable() {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

bool subnormals_flushed() {
  // volatile: the compiler must not fold the arithmetic at compile time, where nothing is flushed.
  volatile float tiny = FLT_MIN / 4;  // a subnormal operand
  volatile float one = 1.0f, half = 0.5f, min = FLT_MIN;
  const bool daz = tiny * one == 0.0f;
  const bool ftz = min * half == 0.0f;  // normal operands, a subnormal result
  return daz && ftz;
}

unsigned long float_control_word() {
#if defined(__x86_64__) || defined(__i386__)
  return _mm_getcsr();
#elif defined(__aarch64__)
  unsigned long fpcr = 0;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
#else
  return 0;
#endif
}

}  // namespace qtrain
