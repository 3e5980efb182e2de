// lane_gemm: one GEMM split over the context's CpuPool lanes, each lane a serial OpenBLAS call on its
// block of C's columns (or rows, where C has more rows than columns).
//
// Why not OpenBLAS's own threads: a step of a small model is a chain of GEMMs and elementwise
// passes. With OpenBLAS threading the GEMMs and the pool the rest, every pass hands work to a
// thread of the other kind, and each hand-off wakes a sleeping thread through the kernel (on a
// guest whose system calls are costly, a few percent of the step each way). OpenBLAS's threads can
// spin instead (OPENBLAS_THREAD_TIMEOUT), but they then spin through the pool's passes on the cores
// those need. Running the GEMMs on the pool's lanes leaves one kind of thread to hand work to.
//
// Each element of C is computed by one lane over the whole inner dimension, as OpenBLAS's own threads
// split a product. The split depends only on the shapes and the lane count, so a product gives the
// same bits call after call; over another lane count OpenBLAS may block a lane's smaller product
// differently and round its sums differently (as it does over another number of its own threads).
#pragma once

#include <algorithm>
#include <cstdint>

#include "framework/core/context.h"
#include "layers/blas.h"

namespace qtrain {

// C (m, n) = op(A) op(B) + beta C, row-major, as blas_gemm, on ctx's lanes. Products too small to
// pay a hand-off (under about a million multiply-adds per lane) run as one serial call on the caller.
template <typename T>
void lane_gemm(Context& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  constexpr int64_t kMinWorkPerLane = int64_t{1} << 20;  // multiply-adds
  constexpr int64_t kAlign = 16;                         // a block edge in values: whole cache lines of C
  const bool by_columns = n >= m;
  const int64_t split = by_columns ? n : m;
  // parallel_for splits whole units of kAlign values, so that lanes never share a cache line of C,
  // and leaves a product of under kMinWorkPerLane multiply-adds per lane to fewer lanes (one: the caller).
  const int64_t units = (split + kAlign - 1) / kAlign;
  const int64_t work_per_unit = std::max<int64_t>(1, m * n * k / std::max<int64_t>(1, units));
  const int64_t grain = std::max<int64_t>(1, kMinWorkPerLane / work_per_unit);
  const SerialBlas serial(ctx.cpu_threads());
  ctx.cpu_pool().parallel_for(units, grain, [&](int64_t first, int64_t last) {
    const int64_t lo = first * kAlign, hi = std::min(split, last * kAlign);
    if (by_columns) {
      // Columns [lo, hi) of C come from columns [lo, hi) of op(B).
      const T* b_block = trans_b ? b + lo * ldb : b + lo;
      blas_gemm<T>(trans_a, trans_b, m, hi - lo, k, a, lda, b_block, ldb, beta, c + lo, ldc);
    } else {
      // Rows [lo, hi) of C come from rows [lo, hi) of op(A).
      const T* a_block = trans_a ? a + lo : a + lo * lda;
      blas_gemm<T>(trans_a, trans_b, hi - lo, n, k, a_block, lda, b, ldb, beta, c + lo * ldc, ldc);
    }
  });
}

}  // namespace qtrain
