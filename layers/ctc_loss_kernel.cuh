// The CTC forward-backward kernel of ctc_loss.cu (see there for what it computes). It lives in its own
// header so that a CPU-only test (tests/layers/test_ctc_kernel_emulation.cpp) can compile it as host
// code, one std::thread per CUDA thread and a std::barrier for __syncthreads, and check its parallel
// decomposition (barrier phases, strided loops, indexing) against the CPU reference without a GPU.
// Unnamed namespace: every includer gets its own internal copy.
#pragma once

#include <cmath>
#include <limits>

namespace qtrain {
namespace {

constexpr int kMetaFields = 5;  // T_b, L_b, target offset, alpha/beta offset, log-prob offset
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

__device__ inline double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = a < b ? b : a;  // std::max, as on the CPU
  return m + log1p(exp(-fabs(a - b)));
}

// Blank-extended target l': blank (0) at even states, target[s / 2] at odd ones.
__device__ inline int extended(const int* __restrict__ target, long long s) { return (s & 1) ? target[s / 2] : 0; }

// One block per utterance b = blockIdx.x. meta holds kMetaFields values per utterance: its valid frames
// T_b, its target length L_b and its offsets into targets, alpha/beta (T_b (2 L_b + 1) doubles each)
// and log_probs (T_b C doubles). Writes log p (-inf when impossible) to log_p_out[b], the arg-max class
// of every frame to best_out (B, T), and when dlogits is non-null the gradient (B, T, C) with beta.
__global__ void ctc_kernel(const float* __restrict__ logits, long long frames, int classes,
                           const long long* __restrict__ meta, const int* __restrict__ targets,
                           double* __restrict__ log_probs_all, double* __restrict__ alpha_all,
                           double* __restrict__ beta_all, double* __restrict__ log_p_out, int* __restrict__ best_out,
                           float* __restrict__ dlogits, double inv_batch) {
  __shared__ double shared_log_p;
  const long long b = blockIdx.x;
  const long long* m = meta + kMetaFields * b;
  const long long tb = m[0], states = 2 * m[1] + 1;
  const int* __restrict__ tgt = targets + m[2];
  double* __restrict__ alpha = alpha_all + m[3];
  double* __restrict__ beta = beta_all + m[3];
  double* __restrict__ lp = log_probs_all + m[4];
  const float* __restrict__ z = logits + b * frames * classes;

  // Log-softmax of the valid frames (the CPU's max, sum and subtraction, in double) and the first
  // arg-max of every frame, compared in f32 as ctc_greedy_decode does.
  for (long long t = threadIdx.x; t < frames; t += blockDim.x) {
    int best = 0;
    if (t < tb) {
      const float* row = z + t * classes;
      double max = row[0];
      for (int c = 1; c < classes; ++c) {
        const double v = row[c];
        max = max < v ? v : max;
      }
      double sum = 0;
      for (int c = 0; c < classes; ++c) sum += exp(static_cast<double>(row[c]) - max);
      const double log_sum = max + log(sum);
      for (int c = 0; c < classes; ++c) lp[t * classes + c] = static_cast<double>(row[c]) - log_sum;
      for (int c = 1; c < classes; ++c)
        if (row[c] > row[best]) best = c;
    }
    best_out[b * frames + t] = best;
  }
  __syncthreads();

  // alpha_t(s): log probability of the prefixes ending in state s at frame t (emission included).
  for (long long s = threadIdx.x; s < states; s += blockDim.x)
    alpha[s] = s == 0 ? lp[0] : s == 1 ? lp[extended(tgt, 1)] : kNegInf;
  __syncthreads();
  for (long long t = 1; t < tb; ++t) {
    const double* prev = alpha + (t - 1) * states;
    double* cur = alpha + t * states;
    const double* lpt = lp + t * classes;
    for (long long s = threadIdx.x; s < states; s += blockDim.x) {
      const int e = extended(tgt, s);
      double a = prev[s];
      if (s >= 1) a = log_add(a, prev[s - 1]);
      if (s >= 2 && e != 0 && e != extended(tgt, s - 2)) a = log_add(a, prev[s - 2]);
      cur[s] = a == kNegInf ? kNegInf : a + lpt[e];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double* last = alpha + (tb - 1) * states;
    const double log_p = states > 1 ? log_add(last[states - 1], last[states - 2]) : last[0];
    shared_log_p = log_p;
    log_p_out[b] = log_p;
  }
  __syncthreads();
  if (!dlogits) return;

  // Padded frames get no gradient, and neither does an impossible sample (zero_infinity; without it
  // the host raises an error).
  const double log_p = shared_log_p;
  const bool impossible = log_p == kNegInf;
  float* __restrict__ dz = dlogits + b * frames * classes;
  for (long long i = (impossible ? 0 : tb) * classes + threadIdx.x; i < frames * classes; i += blockDim.x) dz[i] = 0.0f;
  if (impossible) return;  // uniform over the block: no barrier is skipped by only some threads

  // beta_t(s): log probability of completing the target from state s at frame t (emission at t excluded).
  for (long long s = threadIdx.x; s < states; s += blockDim.x)
    beta[(tb - 1) * states + s] = s >= states - 2 ? 0.0 : kNegInf;
  __syncthreads();
  for (long long t = tb - 2; t >= 0; --t) {
    const double* next = beta + (t + 1) * states;
    const double* lpn = lp + (t + 1) * classes;
    double* cur = beta + t * states;
    for (long long s = threadIdx.x; s < states; s += blockDim.x) {
      const int e = extended(tgt, s);
      double v = next[s] + lpn[e];
      if (s + 1 < states) v = log_add(v, next[s + 1] + lpn[extended(tgt, s + 1)]);
      if (s + 2 < states) {
        const int e2 = extended(tgt, s + 2);
        if (e2 != 0 && e2 != e) v = log_add(v, next[s + 2] + lpn[e2]);
      }
      cur[s] = v;
    }
    __syncthreads();
  }

  // dL/dz[t, c] = (softmax[t, c] - sum over states s with l'_s = c of exp(alpha + beta - log p)) / B,
  // the occupation summed in double in increasing state order, one rounding to f32 at the end.
  for (long long i = threadIdx.x; i < tb * classes; i += blockDim.x) {
    const long long t = i / classes;
    const int c = static_cast<int>(i % classes);
    const double* at = alpha + t * states;
    const double* bt = beta + t * states;
    double occupation = 0;
    if (c == 0) {
      for (long long s = 0; s < states; s += 2) occupation += exp(at[s] + bt[s] - log_p);
    } else {
      for (long long s = 1; s < states; s += 2)
        if (tgt[s / 2] == c) occupation += exp(at[s] + bt[s] - log_p);
    }
    dz[i] = static_cast<float>((exp(lp[i]) - occupation) * inv_batch);
  }
}

}  // namespace
}  // namespace qtrain
