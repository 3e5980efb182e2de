# QTRAIN_FUZZ: a fuzzing build (tools/fuzz.sh, docs/fuzzing.md), in a build folder of its own. Every
# qtrain library is compiled with libFuzzer's coverage instrumentation, AddressSanitizer and
# UndefinedBehaviorSanitizer (any report aborts), and tests/fuzz adds one libFuzzer executable per
# target (the custom target `fuzz` builds them all). libFuzzer ships with clang only; the CUDA paths
# are left out (the fuzz targets run the CPU code, and nvcc objects would carry no instrumentation).
if(NOT QTRAIN_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "QTRAIN_FUZZ=ON needs clang (libFuzzer), but the C++ compiler is ${CMAKE_CXX_COMPILER_ID} "
                      "(${CMAKE_CXX_COMPILER}); configure a separate build folder with "
                      "CC=clang CXX=clang++ cmake -S . -B build-fuzz -DQTRAIN_FUZZ=ON -DQTRAIN_CUDA=OFF, "
                      "or run tools/fuzz.sh")
endif()
if(QTRAIN_CUDA STREQUAL "ON")
  message(FATAL_ERROR "QTRAIN_FUZZ=ON builds the CPU code only: configure it with -DQTRAIN_CUDA=OFF (or AUTO)")
endif()
set(QTRAIN_CUDA OFF)  # shadows the cache entry: Dependencies.cmake looks for no toolkit

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
check_cxx_source_compiles([[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
]] QTRAIN_LIBFUZZER_LINKS)
unset(CMAKE_REQUIRED_FLAGS)
if(NOT QTRAIN_LIBFUZZER_LINKS)
  message(FATAL_ERROR "QTRAIN_FUZZ=ON: ${CMAKE_CXX_COMPILER} cannot link -fsanitize=fuzzer,address,undefined; "
                      "install clang's runtime libraries (Debian: libclang-rt-dev or the clang package's "
                      "libclang_rt.fuzzer-x86_64.a)")
endif()

# Given to every qtrain target through qtrain_flags (cmake/Warnings.cmake). The fuzz executables add
# -fsanitize=fuzzer at link time (libFuzzer's main).
add_library(qtrain_fuzz_instrumentation INTERFACE)
target_compile_options(qtrain_fuzz_instrumentation INTERFACE
  -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
target_link_options(qtrain_fuzz_instrumentation INTERFACE -fsanitize=address,undefined)
message(STATUS "qtrain: fuzzing build (libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer; targets in tests/fuzz)")
