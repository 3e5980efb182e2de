// lane_gemm: the product split over a context's lanes is one OpenBLAS call's product (the bits on one
// lane; within rounding on several, whose blocks OpenBLAS may sum in another order) and the same bits
// call after call, for every transpose, both split directions (columns when C is wide, rows when it
// is tall), block edges that are not multiples of the 16-value alignment, beta 0 and 1, and products
// too small to split.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "framework/core/context.h"
#include "layers/lane_gemm.h"

using namespace qtrain;

namespace {

template <typename T>
std::vector<T> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(u(rng));
  return v;
}

template <typename T>
void check_shapes(Context& ctx) {
  struct Shape {
    int64_t m, n, k;
  };
  // wide (split by columns), tall (split by rows), ragged edges, and one too small to split
  const Shape shapes[] = {{128, 1024, 784}, {1024, 128, 300}, {77, 1000, 129}, {1003, 45, 200}, {8, 10, 6}};
  for (const Shape& s : shapes) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (T beta : {T(0), T(1)}) {
          const int64_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
          const std::vector<T> a = random_values<T>(static_cast<size_t>(s.m * s.k), 1);
          const std::vector<T> b = random_values<T>(static_cast<size_t>(s.k * s.n), 2);
          std::vector<T> expected = random_values<T>(static_cast<size_t>(s.m * s.n), 3);
          std::vector<T> got = expected, again = expected;
          {
            const SerialBlas serial(ctx.cpu_threads());  // the reference: one call on one thread
            blas_gemm<T>(ta != 0, tb != 0, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, beta, expected.data(), s.n);
          }
          lane_gemm<T>(ctx, ta != 0, tb != 0, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, beta, got.data(), s.n);
          lane_gemm<T>(ctx, ta != 0, tb != 0, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, beta, again.data(), s.n);
          INFO("m " << s.m << " n " << s.n << " k " << s.k << " trans_a " << ta << " trans_b " << tb << " beta " << beta
                    << " lanes " << ctx.cpu_pool().lanes());
          REQUIRE(std::memcmp(got.data(), again.data(), got.size() * sizeof(T)) == 0);
          if (ctx.cpu_pool().lanes() == 1) {
            REQUIRE(std::memcmp(got.data(), expected.data(), got.size() * sizeof(T)) == 0);
          } else {
            // |error| of a k-term sum of products of values in [-1, 1], in units of the type's epsilon
            const double bound = 4.0 * static_cast<double>(s.k) * std::numeric_limits<T>::epsilon();
            double worst = 0;
            for (size_t i = 0; i < got.size(); ++i)
              worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - static_cast<double>(expected[i])));
            REQUIRE(worst <= bound);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("lane_gemm gives one OpenBLAS call's product on any number of lanes, the same bits every call",
          "[layers][lane_gemm]") {
  for (int threads : {1, 2, 3}) {
    Context ctx = Context::cpu(1, threads);
    check_shapes<float>(ctx);
    check_shapes<double>(ctx);
  }
}
