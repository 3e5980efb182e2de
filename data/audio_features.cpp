// PCM / SPHERE / WAV reading and the log-mel filterbank (see audio_features.h).
#include "data/audio_features.h"

#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "framework/core/check.h"

namespace qtrain {
namespace {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) input_error("cannot open audio file {}: {}", path, std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) input_error("cannot read audio file {}", path);
  return bytes;
}

std::vector<float> decode_pcm16(const std::string& path, const uint8_t* p, size_t nbytes, ByteOrder order) {
  if (nbytes % 2 != 0) input_error("audio file {}: {} bytes of 16-bit samples is an odd count", path, nbytes);
  std::vector<float> out(nbytes / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t a = p[2 * i], b = p[2 * i + 1];
    const uint16_t u = order == ByteOrder::big ? static_cast<uint16_t>(a << 8 | b) : static_cast<uint16_t>(b << 8 | a);
    out[i] = static_cast<float>(static_cast<int16_t>(u)) / 32768.0f;
  }
  return out;
}

// NIST SPHERE: "NIST_1A\n", the header size in bytes on the second line (normally 1024), then
// "name -type value" lines up to "end_head". We read 16-bit PCM, mono only.
std::vector<float> read_sphere(const std::string& path, const std::vector<uint8_t>& bytes, int rate) {
  auto bad = [&](const std::string& why) -> std::vector<float> { input_error("SPHERE file {}: {}", path, why); };
  if (bytes.size() < 16 || std::memcmp(bytes.data(), "NIST_1A\n", 8) != 0)
    return bad("does not start with the NIST_1A header magic");
  const std::string head(bytes.begin(),
                         bytes.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(bytes.size(), 1 << 16)));
  std::istringstream lines(head);
  std::string line;
  std::getline(lines, line);  // NIST_1A
  std::getline(lines, line);
  long header_size = 0;
  try {
    header_size = std::stol(line);
  } catch (const std::exception&) {
    return bad("the second header line must be the header size, got '" + line + "'");
  }
  if (header_size < 16 || static_cast<size_t>(header_size) > bytes.size())
    return bad(fmt::format("header size {} is outside the file of {} bytes", header_size, bytes.size()));
  std::map<std::string, std::string> fields;
  bool ended = false;
  while (std::getline(lines, line) && lines.tellg() <= header_size) {
    if (line.rfind("end_head", 0) == 0) {
      ended = true;
      break;
    }
    std::istringstream f(line);
    std::string name, type, value;
    f >> name >> type;
    std::getline(f, value);
    value.erase(0, value.find_first_not_of(' '));
    if (!name.empty()) fields[name] = value;
  }
  if (!ended) return bad("no end_head line within the header");
  auto field_int = [&](const char* name, long fallback) {
    auto it = fields.find(name);
    if (it == fields.end()) return fallback;
    try {
      return std::stol(it->second);
    } catch (const std::exception&) {
      input_error("SPHERE file {}: field {} must be an integer, got '{}'", path, name, it->second);
    }
  };
  if (auto it = fields.find("sample_coding"); it != fields.end() && it->second.rfind("pcm", 0) != 0)
    return bad("sample_coding is '" + it->second + "'; only uncompressed pcm is supported");
  if (auto it = fields.find("sample_coding"); it != fields.end() && it->second.find("shorten") != std::string::npos)
    return bad("is shorten-compressed ('" + it->second + "'); decompress it first (e.g. sph2pipe)");
  if (field_int("sample_n_bytes", 2) != 2) return bad("sample_n_bytes must be 2 (16-bit PCM)");
  if (field_int("channel_count", 1) != 1) return bad("channel_count must be 1 (mono)");
  if (const long r = field_int("sample_rate", rate); r != rate)
    return bad(fmt::format("sample_rate is {}, expected {}", r, rate));
  ByteOrder order = ByteOrder::little;
  if (auto it = fields.find("sample_byte_format"); it != fields.end()) {
    if (it->second == "10")
      order = ByteOrder::big;
    else if (it->second != "01")
      return bad("sample_byte_format must be 01 or 10, got '" + it->second + "'");
  }
  size_t data_bytes = bytes.size() - static_cast<size_t>(header_size);
  if (const long count = field_int("sample_count", -1); count >= 0) {
    if (static_cast<size_t>(count) * 2 > data_bytes)
      return bad(
          fmt::format("sample_count {} needs {} bytes but only {} follow the header", count, count * 2, data_bytes));
    data_bytes = static_cast<size_t>(count) * 2;
  }
  return decode_pcm16(path, bytes.data() + header_size, data_bytes, order);
}

uint32_t le32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

// RIFF WAVE: a "fmt " chunk (PCM = 1, mono, 16 bits) and a "data" chunk; other chunks are skipped.
std::vector<float> read_wav(const std::string& path, const std::vector<uint8_t>& bytes, int rate) {
  auto bad = [&](const std::string& why) -> std::vector<float> { input_error("WAV file {}: {}", path, why); };
  if (bytes.size() < 12 || std::memcmp(bytes.data(), "RIFF", 4) != 0 || std::memcmp(bytes.data() + 8, "WAVE", 4) != 0)
    return bad("does not start with RIFF....WAVE");
  bool have_fmt = false;
  size_t pos = 12;
  while (pos + 8 <= bytes.size()) {
    const uint8_t* chunk = bytes.data() + pos;
    const size_t size = le32(chunk + 4);
    if (size > bytes.size() - pos - 8) return bad(fmt::format("chunk at byte {} runs past the end of the file", pos));
    if (std::memcmp(chunk, "fmt ", 4) == 0) {
      if (size < 16) return bad("fmt chunk is shorter than 16 bytes");
      if (le16(chunk + 8) != 1) return bad(fmt::format("audio format {} is not PCM (1)", le16(chunk + 8)));
      if (le16(chunk + 10) != 1) return bad(fmt::format("{} channels, expected mono", le16(chunk + 10)));
      if (le32(chunk + 12) != static_cast<uint32_t>(rate))
        return bad(fmt::format("sample rate {}, expected {}", le32(chunk + 12), rate));
      if (le16(chunk + 22) != 16) return bad(fmt::format("{} bits per sample, expected 16", le16(chunk + 22)));
      have_fmt = true;
    } else if (std::memcmp(chunk, "data", 4) == 0) {
      if (!have_fmt) return bad("data chunk before the fmt chunk");
      return decode_pcm16(path, chunk + 8, size, ByteOrder::little);
    }
    pos += 8 + size + (size & 1);
  }
  return bad("no data chunk");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  return std::equal(suffix.rbegin(), suffix.rend(), s.rbegin(),
                    [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
}

double hz_to_mel(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double mel_to_hz(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

// FFTW's planner is not thread-safe; plans are made under this lock.
std::mutex& fftw_planner_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

std::vector<float> read_audio(const std::string& path, const AudioOptions& options) {
  AudioFormat format = options.format;
  if (format == AudioFormat::automatic)
    format = ends_with(path, ".sph")   ? AudioFormat::sphere
             : ends_with(path, ".wav") ? AudioFormat::wav
                                       : AudioFormat::raw;
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  switch (format) {
    case AudioFormat::sphere: return read_sphere(path, bytes, options.raw_sample_rate);
    case AudioFormat::wav: return read_wav(path, bytes, options.raw_sample_rate);
    default: return decode_pcm16(path, bytes.data(), bytes.size(), options.raw_byte_order);
  }
}

LogMelFilterbank::LogMelFilterbank(const FilterbankOptions& options) : options_(options) {
  QT_CHECK(options.sample_rate > 0 && options.num_mels > 0 && options.fft_size > 0, "filterbank: bad options");
  window_length_ = static_cast<int>(std::lround(options.window_ms * options.sample_rate / 1000.0));
  hop_length_ = static_cast<int>(std::lround(options.hop_ms * options.sample_rate / 1000.0));
  if (window_length_ < 2 || hop_length_ < 1)
    input_error("filterbank: window {} ms and hop {} ms give {} and {} samples; need >= 2 and >= 1", options.window_ms,
                options.hop_ms, window_length_, hop_length_);
  if (options.fft_size < window_length_)
    input_error("filterbank: fft_size {} is shorter than the window of {} samples", options.fft_size, window_length_);
  const double f_max = options.f_max > 0 ? options.f_max : options.sample_rate / 2.0;
  if (!(options.f_min >= 0 && options.f_min < f_max && f_max <= options.sample_rate / 2.0))
    input_error("filterbank: need 0 <= f_min < f_max <= sample_rate/2, got {} and {}", options.f_min, f_max);
  bins_ = options.fft_size / 2 + 1;

  // Periodic window (torch.hann_window / hamming_window default), as for spectrograms.
  window_.resize(static_cast<size_t>(window_length_));
  const double a0 = options.window == WindowType::hann ? 0.5 : 0.54;
  for (int i = 0; i < window_length_; ++i)
    window_[static_cast<size_t>(i)] =
        static_cast<float>(a0 - (1 - a0) * std::cos(2 * M_PI * i / static_cast<double>(window_length_)));

  // Triangles between num_mels + 2 points equally spaced in mel; weights at each bin's frequency.
  const double mel_lo = hz_to_mel(options.f_min), mel_hi = hz_to_mel(f_max);
  mel_points_hz_.resize(static_cast<size_t>(options.num_mels) + 2);
  for (size_t i = 0; i < mel_points_hz_.size(); ++i)
    mel_points_hz_[i] = mel_to_hz(mel_lo + (mel_hi - mel_lo) * static_cast<double>(i) / (options.num_mels + 1));
  filters_.assign(static_cast<size_t>(options.num_mels) * bins_, 0.0f);
  for (int m = 0; m < options.num_mels; ++m) {
    const double lo = mel_points_hz_[m], mid = mel_points_hz_[m + 1], hi = mel_points_hz_[m + 2];
    for (int k = 0; k < bins_; ++k) {
      const double f = static_cast<double>(k) * options.sample_rate / options.fft_size;
      const double w = std::max(0.0, std::min((f - lo) / (mid - lo), (hi - f) / (hi - mid)));
      filters_[static_cast<size_t>(m) * bins_ + k] = static_cast<float>(w);
    }
  }

  std::vector<float> in(static_cast<size_t>(options.fft_size));
  std::vector<fftwf_complex> out(static_cast<size_t>(bins_));
  std::lock_guard<std::mutex> lock(fftw_planner_mutex());
  // FFTW_ESTIMATE: no measurement, so the plan (and every result) is the same on every run.
  plan_ = fftwf_plan_dft_r2c_1d(options.fft_size, in.data(), out.data(), FFTW_ESTIMATE | FFTW_UNALIGNED);
  QT_CHECK(plan_ != nullptr, "FFTW could not plan a real FFT of {} points", options.fft_size);
}

LogMelFilterbank::~LogMelFilterbank() {
  std::lock_guard<std::mutex> lock(fftw_planner_mutex());
  if (plan_) fftwf_destroy_plan(plan_);
}

double LogMelFilterbank::band_center_hz(int m) const { return mel_points_hz_.at(static_cast<size_t>(m) + 1); }

int64_t LogMelFilterbank::num_frames(int64_t num_samples) const {
  return num_samples < window_length_ ? 0 : 1 + (num_samples - window_length_) / hop_length_;
}

std::vector<float> LogMelFilterbank::compute(const std::vector<float>& samples) const {
  const int64_t frames = num_frames(static_cast<int64_t>(samples.size()));
  const int mels = options_.num_mels;
  std::vector<float> out(static_cast<size_t>(frames) * mels);
  std::vector<float> in(static_cast<size_t>(options_.fft_size), 0.0f);
  std::vector<fftwf_complex> spec(static_cast<size_t>(bins_));
  std::vector<float> power(static_cast<size_t>(bins_));
  for (int64_t t = 0; t < frames; ++t) {
    const float* s = samples.data() + t * hop_length_;
    for (int i = 0; i < window_length_; ++i) in[static_cast<size_t>(i)] = s[i] * window_[static_cast<size_t>(i)];
    fftwf_execute_dft_r2c(plan_, in.data(), spec.data());
    for (int k = 0; k < bins_; ++k) power[static_cast<size_t>(k)] = spec[k][0] * spec[k][0] + spec[k][1] * spec[k][1];
    float* o = out.data() + t * mels;
    for (int m = 0; m < mels; ++m) {
      const float* w = filters_.data() + static_cast<size_t>(m) * bins_;
      double e = 0;
      for (int k = 0; k < bins_; ++k) e += static_cast<double>(w[k]) * power[static_cast<size_t>(k)];
      o[m] = static_cast<float>(std::log(e + 1e-10));
    }
  }
  if (options_.normalize && frames > 0) {
    for (int m = 0; m < mels; ++m) {
      double sum = 0, sq = 0;
      for (int64_t t = 0; t < frames; ++t) sum += out[static_cast<size_t>(t * mels + m)];
      const double mean = sum / static_cast<double>(frames);
      for (int64_t t = 0; t < frames; ++t) {
        const double d = out[static_cast<size_t>(t * mels + m)] - mean;
        sq += d * d;
      }
      const double inv = 1.0 / (std::sqrt(sq / static_cast<double>(frames)) + 1e-5);
      for (int64_t t = 0; t < frames; ++t) {
        float& v = out[static_cast<size_t>(t * mels + m)];
        v = static_cast<float>((v - mean) * inv);
      }
    }
  }
  return out;
}

std::string describe(const FilterbankOptions& o) {
  return fmt::format("logmel sr={} mels={} win_ms={} hop_ms={} fft={} window={} fmin={} fmax={} norm={}", o.sample_rate,
                     o.num_mels, o.window_ms, o.hop_ms, o.fft_size, o.window == WindowType::hann ? "hann" : "hamming",
                     o.f_min, o.f_max, o.normalize ? 1 : 0);
}

}  // namespace qtrain
