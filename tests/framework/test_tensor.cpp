// Tensor: shapes, views sharing storage, copies, dtype checks.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "framework/core/tensor.h"

using namespace qtrain;

TEST_CASE("tensor views share storage and check bounds", "[tensor]") {
  Tensor t = Tensor::zeros({4, 3}, DType::f32);
  REQUIRE(t.numel() == 12);
  REQUIRE(t.nbytes() == 48);
  Tensor row = t.view(3, {3});
  row.data<float>()[1] = 5.0f;
  REQUIRE(t.data<float>()[4] == 5.0f);
  REQUIRE(t.narrow_rows(2).shape() == Shape{2, 3});
  REQUIRE_THROWS_AS(t.view(10, {3}), Error);
  REQUIRE_THROWS_AS(t.data<double>(), Error);
  REQUIRE(t.dim(-1) == 3);
}

TEST_CASE("tensor copies are deep", "[tensor]") {
  Tensor a = Tensor::empty({5}, DType::f64);
  a.fill_(2.5);
  Tensor b = a.clone();
  a.fill_(1.0);
  REQUIRE(b.data<double>()[4] == 2.5);
  Tensor c = Tensor::empty({5}, DType::f64);
  c.copy_from(b);
  REQUIRE(c.data<double>()[0] == 2.5);
  REQUIRE_THROWS_AS(c.copy_from(Tensor::empty({4}, DType::f64)), Error);
}

TEST_CASE("CUDA tensors without a GPU are a clear error", "[tensor]") {
  if (cuda_available()) return;  // covered by the cuda label on GPU machines
  REQUIRE_THROWS_WITH(Tensor::empty({4}, DType::f32, Device::cuda(0)), Catch::Contains("CUDA"));
}

TEST_CASE("large host tensors ask for transparent huge pages", "[tensor]") {
  // The VMA that holds the middle of a 16 MiB tensor carries the madvise(MADV_HUGEPAGE) flag ("hg" in
  // /proc/self/smaps): whether the kernel then grants huge pages depends on its free memory, the flag
  // does not. Kernels without THP have no /sys/kernel/mm/transparent_hugepage and reject the call.
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    SUCCEED("this kernel has no transparent huge pages");
    return;
  }
  if (const char* off = std::getenv("QTRAIN_HUGE_PAGES"); off && std::strcmp(off, "0") == 0) {
    SUCCEED("QTRAIN_HUGE_PAGES=0 turns them off");
    return;
  }
  Tensor big = Tensor::empty({4 << 20}, DType::f32);
  const auto middle = reinterpret_cast<uintptr_t>(big.data<float>() + (2 << 20));
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false, flagged = false, found = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo <= middle && middle < hi;
      found = found || inside;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      flagged = line.find(" hg") != std::string::npos;
    }
  }
  REQUIRE(found);
  CHECK(flagged);
}
