// ctc's CUDA kernel (layers/ctc_loss_kernel.cuh) compiled as host code and run on the CPU: one
// std::thread per CUDA thread, a std::barrier for __syncthreads, blocks one after another. Every
// interleaving the barriers allow is a valid schedule, so this checks the kernel's parallel
// decomposition (barrier phases, thread-strided loops over states, frames and classes, the per-block
// shared value, the offsets of every utterance) against the CPU reference without a GPU, with block
// sizes below and above the number of states. CUDA's math functions and memory model are not
// exercised: that is test_sequence_cuda's job on a GPU.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "framework/core/context.h"
#include "layers/ctc_loss.h"
#include "tests/support/gradcheck.h"

// The CUDA built-ins the kernel uses, as host equivalents.
namespace {
struct EmulatedIndex {
  long long x = 0;
};
std::barrier<>* emulated_barrier = nullptr;
}  // namespace
thread_local EmulatedIndex threadIdx;
EmulatedIndex blockIdx, blockDim;  // one block runs at a time
inline void __syncthreads() { emulated_barrier->arrive_and_wait(); }
#define __global__
#define __device__
#define __restrict__ __restrict
#define __shared__ static  // one copy for all threads of the (single running) block
#include "layers/ctc_loss_kernel.cuh"
#undef __global__
#undef __device__
#undef __restrict__
#undef __shared__

using namespace qtrain;

namespace {

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(std::max<size_t>(v.size(), 1))}, DType::i32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

struct Batch {
  int64_t frames, classes;
  std::vector<int32_t> input_lengths, targets, target_lengths;
};

// Runs the kernel over the batch with `threads` threads per block, as ctc_loss_cuda lays out its
// buffers, and compares loss, decoding and gradient with CtcLoss on the CPU.
void compare_with_cpu(const Batch& c, int threads) {
  const int64_t batch = static_cast<int64_t>(c.input_lengths.size());
  const Tensor z = testing::random_tensor({batch, c.frames, c.classes}, 77, -4, 4, DType::f32);
  Context cpu = Context::cpu(1, 1);
  CtcLoss reference;
  Tensor dz = Tensor::empty({batch, c.frames, c.classes}, DType::f32);
  const LossStats s =
      reference.compute_sequence(cpu, z, {i32(c.input_lengths), i32(c.targets), i32(c.target_lengths)}, &dz);

  std::vector<long long> meta(static_cast<size_t>(kMetaFields * batch));
  long long target_total = 0, work_total = 0, log_prob_total = 0;
  for (int64_t b = 0; b < batch; ++b) {
    long long* m = meta.data() + kMetaFields * b;
    m[0] = c.input_lengths[b];
    m[1] = c.target_lengths[b];
    m[2] = target_total;
    m[3] = work_total;
    m[4] = log_prob_total;
    target_total += c.target_lengths[b];
    work_total += static_cast<long long>(c.input_lengths[b]) * (2 * c.target_lengths[b] + 1);
    log_prob_total += static_cast<long long>(c.input_lengths[b]) * c.classes;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> log_probs(static_cast<size_t>(log_prob_total), nan), alpha(static_cast<size_t>(work_total), nan),
      beta(static_cast<size_t>(work_total), nan), log_p(static_cast<size_t>(batch), nan);
  std::vector<int> best(static_cast<size_t>(batch * c.frames), -1);
  std::vector<float> dz_kernel(static_cast<size_t>(dz.numel()), std::numeric_limits<float>::quiet_NaN());
  blockDim.x = threads;
  for (int64_t b = 0; b < batch; ++b) {
    blockIdx.x = b;
    std::barrier<> barrier(threads);
    emulated_barrier = &barrier;
    std::vector<std::thread> block;
    for (int t = 0; t < threads; ++t)
      block.emplace_back([&, t] {
        threadIdx.x = t;
        ctc_kernel(z.data<float>(), c.frames, static_cast<int>(c.classes), meta.data(), c.targets.data(),
                   log_probs.data(), alpha.data(), beta.data(), log_p.data(), best.data(), dz_kernel.data(),
                   1.0 / static_cast<double>(batch));
      });
    for (std::thread& t : block) t.join();
  }

  // Same libm, same operation order: the loss agrees to the last bit.
  double loss = 0;
  for (int64_t b = 0; b < batch; ++b)
    if (log_p[static_cast<size_t>(b)] != kNegInf) loss += -log_p[static_cast<size_t>(b)];
  CHECK(loss == s.loss_sum);
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<int32_t> hyp = ctc_collapse(best.data() + b * c.frames, c.input_lengths[b]);
    CHECK(hyp == ctc_greedy_decode(z.data<float>() + b * c.frames * c.classes, c.input_lengths[b], c.classes));
  }
  // Every element written (no NaN left), within the rounding bound of test_sequence_cuda: the kernel
  // rounds once to f32, the CPU once per occurrence of the label plus once, each <= u / B.
  const int64_t longest = *std::max_element(c.target_lengths.begin(), c.target_lengths.end());
  const double atol = static_cast<double>(longest + 2) * 0x1p-24 / static_cast<double>(batch);
  int64_t bad = 0;
  for (int64_t i = 0; i < dz.numel(); ++i)
    if (!(std::fabs(static_cast<double>(dz_kernel[static_cast<size_t>(i)]) - dz.data<float>()[i]) <= atol)) ++bad;
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("ctc: the CUDA kernel, emulated on the CPU, matches the reference", "[ctc][cuda_kernel]") {
  const Batch mixed{12, 6, {12, 9, 5, 2, 12}, {1, 2, 2, 3, 4, 4, 4, 5, 1, 2, 3, 5, 5}, {3, 5, 0, 3, 2}};
  for (int threads : {1, 3, 32}) {
    INFO("threads " << threads);
    compare_with_cpu(mixed, threads);
  }
  std::vector<int32_t> long_targets;
  for (int i = 0; i < 40 + 31; ++i) long_targets.push_back(1 + (i * 7) % 28);
  INFO("2L + 1 = 81 states over 16 threads");
  compare_with_cpu({90, 29, {90, 80}, long_targets, {40, 31}}, 16);
}
