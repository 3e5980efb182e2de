// The main of every CUDA test executable: without a GPU it prints why and exits with 77, which CTest
// reports as "Skipped" (SKIP_RETURN_CODE), so CPU-only machines stay green without hiding the skip.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "framework/core/device.h"
#include "framework/core/float_env.h"

int main(int argc, char** argv) {
  // The tests compute as qtrain's programs do: subnormals flushed (framework/core/float_env.h).
  qtrain::flush_subnormals();
  if (!qtrain::cuda_available()) {
    std::printf("SKIPPED: no CUDA GPU on this machine (QTRAIN_HAS_CUDA=%d); CUDA tests need one\n", QTRAIN_HAS_CUDA);
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
