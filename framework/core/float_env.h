// Subnormal floats flushed to zero in every thread that computes (docs/design.md, "Arithmetic").
// On x86 a subnormal operand or result can cost a hundred cycles or more (on Intel cores; AMD's take
// far smaller penalties), and training meets them all the time: tiny gradients square into subnormals
// in RMSProp's and Adam's averages, and the backward GEMMs read them. The CUDA kernels are built with
// --ftz=true, so flushing on the CPU is also what keeps the CPU and CUDA paths bit-identical.
//
// flush_subnormals() sets the calling thread's flags: MXCSR's FTZ (bit 15: a subnormal result becomes
// zero) and DAZ (bit 6: a subnormal operand reads as zero) on x86, FPCR's FZ (bit 24, both at once) on
// AArch64, nothing elsewhere (subnormals_flushable() is false there). The flags are per thread and a new
// thread inherits its creator's, but each computing thread sets them itself when it starts, so that a
// thread created by a caller that never set them still computes like the rest: the main thread of every
// qtrain program (before OpenBLAS starts its threads: see float_env.cpp), CpuPool's lanes, the loader's
// workers and the gradient exchange's threads.
#pragma once

namespace qtrain {

// Sets FTZ and DAZ (or the equivalent) on the calling thread; cheap, and idempotent.
void flush_subnormals();
// Clears those flags on the calling thread (IEEE gradual underflow): for the tests that check that a
// thread sets them itself, and for code that needs subnormals.
void keep_subnormals();
// Whether this architecture has a flush mode that flush_subnormals() sets.
bool subnormals_flushable();
// Whether the calling thread computes with subnormals flushed, found by arithmetic (not by reading
// the flags): a subnormal operand reads as zero and a product below FLT_MIN becomes zero.
bool subnormals_flushed();
// The raw flags for diagnostics: MXCSR on x86, FPCR on AArch64, 0 elsewhere.
unsigned long float_control_word();

}  // namespace qtrain
