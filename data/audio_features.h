// Audio for the speech datasets: reading 16-bit PCM from headerless files (either byte order), NIST
// SPHERE (.sph) and RIFF WAV, and turning it into normalized log-mel filterbank frames with FFTW.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct fftwf_plan_s;

namespace qtrain {

enum class ByteOrder { big, little };
// raw: headerless 16-bit signed mono PCM; auto: by extension (.sph, .wav, anything else raw).
enum class AudioFormat { automatic, raw, sphere, wav };

struct AudioOptions {
  AudioFormat format = AudioFormat::automatic;
  ByteOrder raw_byte_order = ByteOrder::big;  // of raw files only (SPHERE and WAV say theirs)
  int raw_sample_rate = 16000;                // of raw files; SPHERE and WAV files must match it
};

// Samples of `path` scaled to [-1, 1). Throws InputError naming the file for a missing or unreadable
// file, an odd byte count, a header that is malformed, compressed (SPHERE shorten), not 16-bit PCM,
// not mono, or at a sample rate other than options.raw_sample_rate.
std::vector<float> read_audio(const std::string& path, const AudioOptions& options);

enum class WindowType { hann, hamming };

struct FilterbankOptions {
  int sample_rate = 16000;
  int num_mels = 40;
  double window_ms = 25.0;
  double hop_ms = 10.0;
  int fft_size = 512;  // >= the window length in samples
  WindowType window = WindowType::hann;
  double f_min = 0.0;
  double f_max = 0.0;     // 0: sample_rate / 2
  bool normalize = true;  // per-utterance mean/variance normalization of every band
};

// Log-mel filterbank: frames of window_ms every hop_ms (no padding: a signal of n samples gives
// 1 + (n - window) / hop frames, none if shorter than one window), a periodic Hann or Hamming window,
// the power spectrum |FFT|^2 of fft_size points (FFTW, real to complex), triangular filters evenly
// spaced on the HTK mel scale (2595 log10(1 + f/700)) between f_min and f_max (torchaudio's
// melscale_fbanks with norm=None), log(energy + 1e-10); then, when normalize is on, each band minus its
// mean over the utterance divided by its standard deviation (+1e-5).
// The FFTW plan is made once here (planning is not thread-safe); compute() is safe to call from several
// threads at once (it executes the plan on per-call arrays with fftwf_execute_dft_r2c).
class LogMelFilterbank {
 public:
  explicit LogMelFilterbank(const FilterbankOptions& options);
  ~LogMelFilterbank();
  LogMelFilterbank(const LogMelFilterbank&) = delete;
  LogMelFilterbank& operator=(const LogMelFilterbank&) = delete;

  int window_length() const { return window_length_; }
  int hop_length() const { return hop_length_; }
  int num_mels() const { return options_.num_mels; }
  int64_t num_frames(int64_t num_samples) const;
  // The filter weights, (num_mels, fft_size/2 + 1) row-major; exposed for tests.
  const std::vector<float>& filters() const { return filters_; }
  // Center frequency in Hz of band m.
  double band_center_hz(int m) const;

  // Writes num_frames(samples.size()) x num_mels values, frame-major.
  std::vector<float> compute(const std::vector<float>& samples) const;

 private:
  FilterbankOptions options_;
  int window_length_ = 0, hop_length_ = 0, bins_ = 0;
  std::vector<float> window_;
  std::vector<float> filters_;
  std::vector<double> mel_points_hz_;
  fftwf_plan_s* plan_ = nullptr;
};

// The parameters as a string, for cache headers: any change of a parameter invalidates a cache.
std::string describe(const FilterbankOptions& options);

}  // namespace qtrain
