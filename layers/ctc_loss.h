// ctc: Connectionist Temporal Classification (Graves et al. 2006) over (B, T, C) logits with blank
// class 0. Per utterance, loss = -log p(target | x), p summed over every alignment by the log-space
// forward-backward recursion on the blank-extended target (length 2L+1).
//
// Normalization: the reported and differentiated loss is the mean over the batch of the per-utterance
// loss, i.e. PyTorch's ctc_loss(reduction='sum') / B. (PyTorch's default 'mean' also divides each
// utterance by its target length; we do not, so long and short transcriptions weigh by their
// log-likelihood, as in DeepSpeech.) The gradient w.r.t. the logits goes through the log-softmax:
// dL/dz[t,k] = (softmax[t,k] - (1/p) sum_{s: l'_s = k} alpha_t(s) beta_t(s)) / B for t < T_b, 0 beyond.
// An impossible alignment (T_b < L + the number of repeated neighbours) has p = 0: with zero_infinity
// (the default) its loss and gradient are 0 (PyTorch's zero_infinity=True); otherwise it is an error.
//
// Decoding is greedy (best path): the arg-max class of every valid frame, repeats merged, blanks
// removed. Character errors are the Levenshtein distance between decoding and target (spaces count as
// characters); word errors the distance between their word sequences, words being split at the class
// whose text is " " (set_vocabulary); without one each utterance counts as one word.
//
// CPU path: the utterances of a batch are independent, so the context's lanes take them one at a
// time from a shared counter (their lengths differ by up to 10x, so a fixed split would leave lanes
// idle); each sample's arithmetic is the same whichever lane runs it, and the loss is summed in
// sample order afterwards, so the result is the same bits on any number of lanes.
//
// CUDA path (f32 logits, ctc_loss.cu): one thread block per utterance runs the same log-space recursion
// in double; the per-utterance log-likelihoods and the per-frame arg-max classes come back to the host,
// which sums the loss and decodes (greedy decoding is a few comparisons per frame, not worth a kernel).
#pragma once

#include <memory>
#include <vector>

#include "framework/core/loss.h"

namespace qtrain {

struct CtcOptions {
  bool zero_infinity = true;
};

// Buffers of the CUDA path, grown only when a larger batch arrives (ctc_loss.cu).
struct CtcCudaScratch {
  Tensor meta;                    // u8 on the GPU holding (5B) i64: per sample T_b, L_b and 3 offsets
  Tensor targets;                 // i32 on the GPU
  Tensor log_probs, alpha, beta;  // f64 on the GPU
  Tensor log_p;                   // (B) f64 on the GPU: log p(target | x), -inf when impossible
  Tensor best;                    // (B*T) i32 on the GPU: arg-max class per frame
  std::vector<int64_t> host_meta;
  std::vector<double> host_log_p;
  std::vector<int32_t> host_best;
};

class CtcLoss : public Loss {
 public:
  explicit CtcLoss(CtcOptions options = {}) : options_(options) {}
  const char* type() const override { return "ctc"; }
  // Classification labels make no sense for CTC.
  LossStats compute(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor* dlogits) override;
  bool is_sequence_loss() const override { return true; }
  LossStats compute_sequence(Context& ctx, const Tensor& logits, const SequenceTargets& targets,
                             Tensor* dlogits) override;
  void set_vocabulary(const std::vector<std::string>& vocabulary) override;
  int space_class() const { return space_class_; }

 private:
  // The loss and error counts of sample b once its log-likelihood is known (both paths).
  void add_sample(LossStats& stats, int64_t b, double log_p, int64_t frames, int64_t target_length,
                  const std::vector<int32_t>& hyp, const int32_t* target) const;

  // One lane's work space (log-probabilities, alpha, beta), grown on demand: no allocation per call.
  struct LaneScratch {
    std::vector<double> log_probs, alpha, beta;
  };
  // The CPU recursion for one utterance: returns log p(target | z) (-inf if impossible) and, when dz
  // is given, writes its frames x classes gradient rows (all `frames` of them, 0 beyond tb).
  template <typename T>
  static double sample_cpu(const T* z, int64_t tb, int64_t frames, int64_t classes, const int32_t* target,
                           int64_t length, double inv_batch, T* dz, LaneScratch& scratch);

  CtcOptions options_;
  int space_class_ = -1;
  std::vector<LaneScratch> lanes_;  // one per lane of the context's pool
  // Per sample of the current call: where its target starts (batch + 1 entries), its log-likelihood
  // and greedy decoding.
  std::vector<int64_t> target_at_;
  std::vector<double> log_p_;
  std::vector<std::vector<int32_t>> hyps_;
  CtcCudaScratch cuda_;
};

std::unique_ptr<Loss> make_ctc(ConfigNode& cfg);

// CUDA entry point (ctc_loss.cu; built with the CUDA toolkit only). logits (B, T, C) f32 on
// ctx's device; input_lengths (B, each in [1, T]), target_lengths (B) and targets (their sum, classes in
// [1, C)) on the host, already checked; dlogits (B, T, C) or null receives d(sum of losses / B)/dlogits
// (0 at padded frames and for impossible samples). Leaves log p per sample in scratch.host_log_p and
// the arg-max class of every frame in scratch.host_best (B*T), and synchronizes ctx's stream.
void ctc_loss_cuda(Context& ctx, const Tensor& logits, const int32_t* input_lengths, const int32_t* target_lengths,
                   const int32_t* targets, Tensor* dlogits, CtcCudaScratch& scratch);

// Best-path decoding of per-frame arg-max classes: repeats merged, blanks (0) removed.
std::vector<int32_t> ctc_collapse(const int32_t* best, int64_t frames);

// Greedy best-path decoding of one utterance: frames x classes row-major scores (logits or log
// probabilities: the arg-max is the same), the first `frames` rows valid.
template <typename T>
std::vector<int32_t> ctc_greedy_decode(const T* scores, int64_t frames, int64_t classes);

// Levenshtein distance (insertions, deletions, substitutions all cost 1).
int64_t edit_distance(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

// Word sequences of a class sequence split at `space` (-1: the whole sequence is one word); words are
// numbered by their content so that edit_distance compares them.
std::vector<std::vector<int32_t>> split_words(const std::vector<int32_t>& s, int space);
// Word-level edit distance of two class sequences; *ref_words receives the reference's word count.
int64_t word_edit_distance(const std::vector<int32_t>& hyp, const std::vector<int32_t>& ref, int space,
                           int64_t* ref_words);

}  // namespace qtrain
