// framework/core/cublas_on_demand.cpp: a program linked like qtrain does not load libcublas (nor
// libcublasLt, 0.37 s and 210 MB before main) until its first cuBLAS call, and that call reaches the
// real library. Built only with the CUDA toolkit; needs no GPU (a status string is a host call).
#include <catch2/catch.hpp>
#include <cublas_v2.h>
#include <link.h>

#include <string>

namespace {

// Whether an object whose path contains `name` is loaded in this process.
bool loaded(const char* name) {
  struct Search {
    const char* name;
    bool found;
  } search{name, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && std::string(info->dlpi_name).find(s->name) != std::string::npos)
          s->found = true;
        return 0;
      },
      &search);
  return search.found;
}

}  // namespace

TEST_CASE("cuBLAS is opened on its first call, not at start, and the call reaches it") {
  REQUIRE_FALSE(loaded("libcublas"));
  // The real library's words for the status, not the on-demand loader's message of a failed dlopen.
  const std::string success = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  CHECK(loaded("libcublas.so"));
  CHECK(loaded("libcublasLt.so"));
  CHECK(success.find("could not be loaded") == std::string::npos);
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE)) == "CUBLAS_STATUS_INVALID_VALUE");
}
