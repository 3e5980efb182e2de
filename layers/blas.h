// blas: the row-major OpenBLAS GEMM in the element type of a templated CPU path (sgemm for float,
// dgemm for double), shared by the CPU layers that lower onto matrix products (dense, lstm, conv).
#pragma once

#include <cblas.h>

#include <cstdint>
#include <type_traits>

namespace qtrain {

// C (m, n) = op(A) op(B) + beta C, row-major.
template <typename T>
void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
               int64_t ldb, T beta, T* c, int64_t ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f,
                a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0,
                a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  }
}

// While alive, OpenBLAS runs each call on the calling thread: for code that runs its own GEMMs on
// every lane of the context's CpuPool, where OpenBLAS's threads would compete with the lanes for the
// same cores (and spin-wait for work). Restores `threads` (the context's count) at the end; setting
// OpenBLAS's count costs tens of nanoseconds. With threads <= 1 it does nothing.
class SerialBlas {
 public:
  explicit SerialBlas(int threads) : threads_(threads) {
    if (threads_ > 1) openblas_set_num_threads(1);
  }
  ~SerialBlas() {
    if (threads_ > 1) openblas_set_num_threads(threads_);
  }
  SerialBlas(const SerialBlas&) = delete;
  SerialBlas& operator=(const SerialBlas&) = delete;

 private:
  int threads_;
};

}  // namespace qtrain
