// A .preinit_array entry that flushes subnormals on the main thread of every qtrain program before any
// shared library's constructor runs. OpenBLAS (the pthread build) starts its worker threads in its own
// constructor, before main(); those threads inherit the main thread's flags at that moment and qtrain
// has no other way to reach them.
//
// Programs only: the loader runs the .preinit_array entries of the executable alone, and a shared
// object may not hold one (the linker refuses): the Python module (python/) links qtrain_core too, and
// must not change the flags of the interpreter's threads (it flushes around its own calls instead).
// Nothing refers to this object, so qtrain_flags makes every executable ask for its symbol
// (cmake/Warnings.cmake); a shared object never pulls it out of the static library.
#include "framework/core/float_env.h"

namespace {

__attribute__((no_sanitize("address", "undefined"))) void flush_at_load(int, char**, char**) {
  qtrain::flush_subnormals();
}

}  // namespace

// Runs on the main thread before the shared libraries' constructors (OpenBLAS's thread start).
extern "C" __attribute__((section(".preinit_array"),
                          used)) void (*const qtrain_flush_subnormals_at_load)(int, char**, char**) = flush_at_load;
