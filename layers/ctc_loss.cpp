// ctc: argument checks, the CPU reference of the forward-backward recursion in double (whatever the
// logits' dtype: the log-space sums lose nothing that way), greedy decoding and edit distances.
#include "layers/ctc_loss.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>

#include "framework/core/cpu_pool.h"
#include "layers/dispatch.h"

namespace qtrain {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

inline double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::fabs(a - b)));
}

}  // namespace

std::vector<int32_t> ctc_collapse(const int32_t* best, int64_t frames) {
  std::vector<int32_t> out;
  int32_t previous = -1;
  for (int64_t t = 0; t < frames; ++t) {
    if (best[t] != previous && best[t] != 0) out.push_back(best[t]);
    previous = best[t];
  }
  return out;
}

template <typename T>
std::vector<int32_t> ctc_greedy_decode(const T* scores, int64_t frames, int64_t classes) {
  std::vector<int32_t> best(static_cast<size_t>(frames));
  for (int64_t t = 0; t < frames; ++t) {
    const T* row = scores + t * classes;
    int32_t b = 0;  // the first arg-max: ties go to the lower class
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > row[b]) b = static_cast<int32_t>(c);
    best[static_cast<size_t>(t)] = b;
  }
  return ctc_collapse(best.data(), frames);
}
template std::vector<int32_t> ctc_greedy_decode<float>(const float*, int64_t, int64_t);
template std::vector<int32_t> ctc_greedy_decode<double>(const double*, int64_t, int64_t);

int64_t edit_distance(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int64_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int64_t diagonal = row[0];
    row[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int64_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::vector<std::vector<int32_t>> split_words(const std::vector<int32_t>& s, int space) {
  std::vector<std::vector<int32_t>> words(1);
  for (int32_t c : s) {
    if (c == space) {
      if (!words.back().empty()) words.emplace_back();
    } else {
      words.back().push_back(c);
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

int64_t word_edit_distance(const std::vector<int32_t>& hyp, const std::vector<int32_t>& ref, int space,
                           int64_t* ref_words) {
  const auto h = split_words(hyp, space), r = split_words(ref, space);
  // Number the distinct words so the character-level distance function compares word ids.
  std::map<std::vector<int32_t>, int32_t> ids;
  auto to_ids = [&](const std::vector<std::vector<int32_t>>& words) {
    std::vector<int32_t> out;
    for (const auto& w : words) out.push_back(ids.emplace(w, static_cast<int32_t>(ids.size())).first->second);
    return out;
  };
  *ref_words = static_cast<int64_t>(r.size());
  return edit_distance(to_ids(h), to_ids(r));
}

LossStats CtcLoss::compute(Context&, const Tensor&, const Tensor&, Tensor*) {
  input_error("loss ctc needs sequence targets (a speech dataset such as an4), not class labels");
}

void CtcLoss::add_sample(LossStats& stats, int64_t b, double log_p, int64_t frames, int64_t target_length,
                         const std::vector<int32_t>& hyp, const int32_t* target) const {
  const bool impossible = log_p == kNegInf;
  if (impossible && !options_.zero_infinity)
    input_error(
        "ctc: sample {} cannot be aligned: {} frames for a target of {} classes (set zero_infinity: true "
        "to ignore such samples)",
        b, frames, target_length);
  if (!impossible) stats.loss_sum += -log_p;
  const std::vector<int32_t> ref(target, target + target_length);
  stats.char_errors += edit_distance(hyp, ref);
  stats.chars += target_length;
  int64_t words = 0;
  stats.word_errors += word_edit_distance(hyp, ref, space_class_, &words);
  stats.words += words;
  stats.correct += hyp == ref ? 1 : 0;
}

void CtcLoss::set_vocabulary(const std::vector<std::string>& vocabulary) {
  space_class_ = -1;
  for (size_t i = 1; i < vocabulary.size(); ++i)
    if (vocabulary[i] == " ") space_class_ = static_cast<int>(i);
}

LossStats CtcLoss::compute_sequence(Context& ctx, const Tensor& logits, const SequenceTargets& st, Tensor* dlogits) {
  const char* who = "ctc";
  layer_detail::check_float(who, "logits", logits, ctx);
  QT_CHECK(logits.ndim() == 3 && logits.dim(2) >= 2, "{}: logits must be (batch, time, classes >= 2), got {}", who,
           shape_str(logits.shape()));
  const int64_t batch = logits.dim(0), frames = logits.dim(1), classes = logits.dim(2);
  auto check_i32 = [&](const Tensor& t, const char* what, int64_t min_numel) {
    QT_CHECK(t.defined() && t.dtype() == DType::i32 && t.device().is_cpu() && t.numel() >= min_numel,
             "{}: {} must be at least {} i32 values on the CPU", who, what, min_numel);
  };
  check_i32(st.input_lengths, "input_lengths", batch);
  check_i32(st.target_lengths, "target_lengths", batch);
  const int32_t* in_len = st.input_lengths.data<int32_t>();
  const int32_t* tgt_len = st.target_lengths.data<int32_t>();
  target_at_.assign(1, 0);  // sample b's target starts at target_at_[b]; the last entry is the total
  for (int64_t b = 0; b < batch; ++b) {
    if (in_len[b] < 1 || in_len[b] > frames)
      input_error("ctc: sample {} has input length {}, outside [1, {}]", b, in_len[b], frames);
    if (tgt_len[b] < 0) input_error("ctc: sample {} has a negative target length {}", b, tgt_len[b]);
    target_at_.push_back(target_at_.back() + tgt_len[b]);
  }
  const int64_t total = target_at_.back();
  check_i32(st.targets, "targets", total);
  const int32_t* targets = st.targets.data<int32_t>();
  for (int64_t i = 0; i < total; ++i)
    if (targets[i] < 1 || targets[i] >= classes)
      input_error("ctc: target {} is class {}, outside [1, {}) (class 0 is the blank)", i, targets[i], classes);
  if (dlogits) {
    layer_detail::check_float(who, "dlogits", *dlogits, ctx);
    const int64_t dims[] = {frames, classes};
    layer_detail::check_batch(who, "dlogits", *dlogits, batch, dims, 2, logits.dtype());
  }

  LossStats stats;
  stats.count = batch;
  if (batch == 0) return stats;
#if QTRAIN_HAS_CUDA  // a CUDA tensor exists only in builds with the toolkit
  if (logits.device().is_cuda()) {
    ctc_loss_cuda(ctx, logits, in_len, tgt_len, targets, dlogits, cuda_);
    for (int64_t b = 0; b < batch; ++b) {
      const auto i = static_cast<size_t>(b);
      const std::vector<int32_t> hyp = ctc_collapse(cuda_.host_best.data() + b * frames, in_len[b]);
      add_sample(stats, b, cuda_.host_log_p[i], in_len[b], tgt_len[b], hyp, targets + target_at_[i]);
    }
    return stats;
  }
#endif
  CpuPool& pool = ctx.cpu_pool();
  if (lanes_.size() < static_cast<size_t>(pool.lanes())) lanes_.resize(static_cast<size_t>(pool.lanes()));
  log_p_.resize(static_cast<size_t>(batch));
  hyps_.resize(static_cast<size_t>(batch));
  layer_detail::dispatch_float(logits.dtype(), [&]<typename T>() {
    const T* z_all = logits.data<T>();
    T* dz_all = dlogits ? dlogits->data<T>() : nullptr;
    const double inv_batch = 1.0 / static_cast<double>(batch);
    std::atomic<int64_t> next{0};
    pool.run([&](int lane) {
      for (int64_t b = next.fetch_add(1, std::memory_order_relaxed); b < batch;
           b = next.fetch_add(1, std::memory_order_relaxed)) {
        const T* z = z_all + b * frames * classes;
        const auto i = static_cast<size_t>(b);
        log_p_[i] = sample_cpu(z, in_len[b], frames, classes, targets + target_at_[i], tgt_len[b], inv_batch,
                               dz_all ? dz_all + b * frames * classes : nullptr, lanes_[static_cast<size_t>(lane)]);
        hyps_[i] = ctc_greedy_decode(z, in_len[b], classes);
      }
    });
  });
  // Loss (or the impossible-alignment error) and error counts, in sample order.
  for (int64_t b = 0; b < batch; ++b) {
    const auto i = static_cast<size_t>(b);
    add_sample(stats, b, log_p_[i], in_len[b], tgt_len[b], hyps_[i], targets + target_at_[i]);
  }
  return stats;
}

template <typename T>
double CtcLoss::sample_cpu(const T* z, int64_t tb, int64_t frames, int64_t classes, const int32_t* tgt, int64_t len,
                           double inv_batch, T* dz, LaneScratch& scratch) {
  const int64_t states = 2 * len + 1;
  auto ext = [&](int64_t s) -> int32_t { return (s & 1) ? tgt[s / 2] : 0; };

  // Log-softmax of the valid frames.
  scratch.log_probs.resize(static_cast<size_t>(tb * classes));
  for (int64_t t = 0; t < tb; ++t) {
    const T* row = z + t * classes;
    double* lp = scratch.log_probs.data() + t * classes;
    double max = row[0];
    for (int64_t c = 1; c < classes; ++c) max = std::max(max, static_cast<double>(row[c]));
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c]) - max);
    const double log_sum = max + std::log(sum);
    for (int64_t c = 0; c < classes; ++c) lp[c] = static_cast<double>(row[c]) - log_sum;
  }
  const double* lp = scratch.log_probs.data();

  // alpha_t(s): log probability of the prefixes ending in state s at frame t (emission included).
  scratch.alpha.assign(static_cast<size_t>(tb * states), kNegInf);
  double* alpha = scratch.alpha.data();
  alpha[0] = lp[0];
  if (states > 1) alpha[1] = lp[ext(1)];
  for (int64_t t = 1; t < tb; ++t) {
    const double* prev = alpha + (t - 1) * states;
    double* cur = alpha + t * states;
    for (int64_t s = 0; s < states; ++s) {
      double a = prev[s];
      if (s >= 1) a = log_add(a, prev[s - 1]);
      if (s >= 2 && ext(s) != 0 && ext(s) != ext(s - 2)) a = log_add(a, prev[s - 2]);
      cur[s] = a == kNegInf ? kNegInf : a + lp[t * classes + ext(s)];
    }
  }
  const double* last = alpha + (tb - 1) * states;
  const double log_p = states > 1 ? log_add(last[states - 1], last[states - 2]) : last[0];
  if (dz == nullptr) return log_p;

  std::fill(dz, dz + frames * classes, T(0));
  if (log_p == kNegInf) return log_p;  // impossible: no gradient
  // beta_t(s): log probability of completing the target from state s at frame t (emission at t
  // excluded), so alpha_t(s) + beta_t(s) is the log mass of the alignments through (t, s).
  scratch.beta.assign(static_cast<size_t>(tb * states), kNegInf);
  double* beta = scratch.beta.data();
  beta[(tb - 1) * states + states - 1] = 0;
  if (states > 1) beta[(tb - 1) * states + states - 2] = 0;
  for (int64_t t = tb - 2; t >= 0; --t) {
    const double* next = beta + (t + 1) * states;
    const double* lpn = lp + (t + 1) * classes;
    double* cur = beta + t * states;
    for (int64_t s = 0; s < states; ++s) {
      double v = next[s] + lpn[ext(s)];
      if (s + 1 < states) v = log_add(v, next[s + 1] + lpn[ext(s + 1)]);
      if (s + 2 < states && ext(s + 2) != 0 && ext(s + 2) != ext(s)) v = log_add(v, next[s + 2] + lpn[ext(s + 2)]);
      cur[s] = v;
    }
  }
  for (int64_t t = 0; t < tb; ++t) {
    T* g = dz + t * classes;
    const double* lpt = lp + t * classes;
    // Accumulate the occupation in double before one rounding to T.
    double occupation_blank = 0;
    for (int64_t c = 0; c < classes; ++c) g[c] = static_cast<T>(std::exp(lpt[c]) * inv_batch);
    for (int64_t s = 0; s < states; s += 2)
      occupation_blank += std::exp(alpha[t * states + s] + beta[t * states + s] - log_p);
    g[0] = static_cast<T>((std::exp(lpt[0]) - occupation_blank) * inv_batch);
    for (int64_t s = 1; s < states; s += 2) {
      const double occ = std::exp(alpha[t * states + s] + beta[t * states + s] - log_p);
      g[ext(s)] = static_cast<T>(static_cast<double>(g[ext(s)]) - occ * inv_batch);
    }
  }
  return log_p;
}

std::unique_ptr<Loss> make_ctc(ConfigNode& cfg) {
  CtcOptions o;
  o.zero_infinity = cfg.get<bool>("zero_infinity", o.zero_infinity);
  cfg.finish();
  return std::make_unique<CtcLoss>(o);
}

}  // namespace qtrain
