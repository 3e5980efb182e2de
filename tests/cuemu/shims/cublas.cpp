// cuBLAS over OpenBLAS. cuBLAS is column-major, as is cblas with CblasColMajor, so the arguments pass
// through unchanged; the checks are cuBLAS's documented CUBLAS_STATUS_INVALID_VALUE conditions, and
// every matrix must lie in device memory (a host pointer passed to cuBLAS is a bug a GPU would fault
// on). The products are OpenBLAS's: equal to a GPU's to rounding, not bit for bit (docs/gpu-checklist.md).
#include <cblas.h>
#include <cublas_v2.h>

#include <algorithm>

#include "tests/cuemu/emu/memory.h"
#include "tests/cuemu/emu/scheduler.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

bool valid(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// The bytes a column-major rows x cols matrix with leading dimension ld spans.
size_t span_bytes(int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return 0;
  return (static_cast<size_t>(cols - 1) * static_cast<size_t>(ld) + static_cast<size_t>(rows)) * sizeof(float);
}

void require_device(const char* call, const char* what, const void* p, size_t bytes) {
  if (bytes == 0) return;
  if (cuemu::kind_of(p, bytes) != cuemu::MemoryKind::Device)
    cuemu::fail("%s: matrix %s [%p, +%zu bytes) is not inside one device allocation", call, what, p, bytes);
}

CBLAS_TRANSPOSE as_cblas(cublasOperation_t op) { return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

cublasStatus_t check_gemm(const char* call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                          int k, const float* alpha, int lda, int ldb, const float* beta, int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid(ta) || !valid(tb) || m < 0 || n < 0 || k < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  const int a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
  if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  (void)call;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t status) { return cublasGetStatusName(status); }

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta, float* C, int ldc,
                                         long long sc, int batch) {
  const char* call = "cublasSgemmStridedBatched";
  const cublasStatus_t s = check_gemm(call, h, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  for (int i = 0; i < batch; ++i) {
    const float* a = A + sa * i;
    const float* b = B + sb * i;
    float* c = C + sc * i;
    if (k > 0) {
      require_device(call, "A", a, span_bytes(a_rows, a_cols, lda));
      require_device(call, "B", b, span_bytes(b_rows, b_cols, ldb));
    }
    require_device(call, "C", c, span_bytes(m, n, ldc));
    cblas_sgemm(CblasColMajor, as_cblas(ta), as_cblas(tb), m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc);
  }
  return CUBLAS_STATUS_SUCCESS;
}
