// cuBLAS's entry points that qtrain calls, defined here and forwarded to libcublas, which is opened on
// the first call (dlopen) instead of being linked.
//
// Why: linking libcublas.so pulls in libcublasLt.so (540 MB), whose static initializers run in every
// process that merely loads it: 0.37 s and 210 MB of resident memory before main on a 2-core AMD EPYC
// guest, for a program that never touches a GPU (`int main() {}` linked against it). qtrain re-executes
// itself once at start (tools/qtrain/main.cpp), so every CPU rank, `qtrain --help` and each of the test
// suite's hundreds of runs paid it twice. Opened on demand, only a process that creates a cuBLAS handle
// (a CUDA device's Context) pays it. TensorFlow loads its CUDA libraries the same way (its dso_loader).
//
// The definitions carry the declarations of cublas_v2.h (the compiler checks every signature against
// them) with hidden visibility: they serve this binary's own calls only, and libcublas, once open,
// resolves its internal calls to itself, not to these. The CUDA emulator (tests/cuemu) never links
// this file: its twins replace qtrain_cuda_libs, and its cuBLAS is shims/cublas.cpp.
#pragma GCC visibility push(hidden)
#include <cublas_v2.h>
#pragma GCC visibility pop

#include <dlfcn.h>

#include <string>

namespace {

// The soname of the cuBLAS the code was compiled against (libcublas.so.13 for CUDA 13): another major
// version may differ in its ABI.
std::string library_name() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

struct Library {
  void* handle = nullptr;
  std::string error;  // why dlopen failed, for cublasGetStatusString
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    // RTLD_LOCAL: cuBLAS's symbols stay out of the global scope, where a later library (a PyTorch
    // loaded in the same Python process) would otherwise bind to them.
    l.handle = dlopen(library_name().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle == nullptr) {
      const char* why = dlerror();
      l.error = library_name() + " could not be loaded (" + (why != nullptr ? why : "unknown reason") +
                "): a CUDA device needs CUDA " + std::to_string(CUBLAS_VER_MAJOR) +
                "'s cuBLAS on the library path (LD_LIBRARY_PATH or ldconfig)";
    }
    return l;
  }();
  return lib;
}

// The real function of the same name and type as `declared`, or null where cuBLAS is missing or lacks it.
template <typename F>
F* resolve(F* /*declared*/, const char* name) {
  const Library& lib = library();
  return lib.handle != nullptr ? reinterpret_cast<F*>(dlsym(lib.handle, name)) : nullptr;
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  static auto* const real = resolve(&cublasCreate_v2, "cublasCreate_v2");
  return real != nullptr ? real(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  static auto* const real = resolve(&cublasDestroy_v2, "cublasDestroy_v2");
  return real != nullptr ? real(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  static auto* const real = resolve(&cublasSetStream_v2, "cublasSetStream_v2");
  return real != nullptr ? real(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  static auto* const real = resolve(&cublasGetStream_v2, "cublasGetStream_v2");
  return real != nullptr ? real(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  static auto* const real = resolve(&cublasSetMathMode, "cublasSetMathMode");
  return real != nullptr ? real(handle, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  static auto* const real = resolve(&cublasSgemm_v2, "cublasSgemm_v2");
  return real != nullptr ? real(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
                         : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k, const float* alpha,
                                                      const float* A, int lda, long long int strideA, const float* B,
                                                      int ldb, long long int strideB, const float* beta, float* C,
                                                      int ldc, long long int strideC, int batchCount) {
  static auto* const real = resolve(&cublasSgemmStridedBatched, "cublasSgemmStridedBatched");
  return real != nullptr ? real(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                                strideC, batchCount)
                         : CUBLAS_STATUS_NOT_INITIALIZED;
}

// Where cuBLAS could not be opened, the status of every call above is CUBLAS_STATUS_NOT_INITIALIZED and
// its string says why (the first call is cublasCreate, from a CUDA Context: CUBLAS_CHECK reports it).
const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  static auto* const real = resolve(&cublasGetStatusName, "cublasGetStatusName");
  return real != nullptr ? real(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static auto* const real = resolve(&cublasGetStatusString, "cublasGetStatusString");
  return real != nullptr ? real(status) : library().error.c_str();
}

}  // extern "C"
