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
#include <type_traits>

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

// The real function of the same name and type as `Declared`, looked up once, or null where cuBLAS is
// missing or lacks it.
template <auto Declared>
auto real(const char* name) {
  using F = std::remove_pointer_t<decltype(Declared)>;
  static F* const found = [name]() -> F* {
    const Library& lib = library();
    return lib.handle != nullptr ? reinterpret_cast<F*>(dlsym(lib.handle, name)) : nullptr;
  }();
  return found;
}

// Calls the real `Declared` with `args`, or says cuBLAS is not there.
template <auto Declared, typename... Args>
cublasStatus_t forward(const char* name, Args... args) {
  auto* const f = real<Declared>(name);
  return f != nullptr ? f(args...) : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // namespace

// One definition per entry point: the signature as cublas_v2.h declares it, the body a forward.
#define QTRAIN_CUBLAS_FORWARD(fn, ...) return forward<&fn>(#fn, __VA_ARGS__)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) { QTRAIN_CUBLAS_FORWARD(cublasCreate_v2, handle); }

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) { QTRAIN_CUBLAS_FORWARD(cublasDestroy_v2, handle); }

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  QTRAIN_CUBLAS_FORWARD(cublasSetStream_v2, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  QTRAIN_CUBLAS_FORWARD(cublasGetStream_v2, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  QTRAIN_CUBLAS_FORWARD(cublasSetMathMode, handle, mode);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  QTRAIN_CUBLAS_FORWARD(cublasSgemm_v2, handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k, const float* alpha,
                                                      const float* A, int lda, long long int strideA, const float* B,
                                                      int ldb, long long int strideB, const float* beta, float* C,
                                                      int ldc, long long int strideC, int batchCount) {
  QTRAIN_CUBLAS_FORWARD(cublasSgemmStridedBatched, handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb,
                        strideB, beta, C, ldc, strideC, batchCount);
}

// Where cuBLAS could not be opened, the status of every call above is CUBLAS_STATUS_NOT_INITIALIZED and
// its string says why (the first call is cublasCreate, from a CUDA Context: CUBLAS_CHECK reports it).
const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  auto* const f = real<&cublasGetStatusName>("cublasGetStatusName");
  return f != nullptr ? f(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  auto* const f = real<&cublasGetStatusString>("cublasGetStatusString");
  return f != nullptr ? f(status) : library().error.c_str();
}

}  // extern "C"

#undef QTRAIN_CUBLAS_FORWARD
