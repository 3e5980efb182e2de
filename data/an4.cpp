// AN4 reader, character vocabulary and the feature cache (see an4.h).
#include "data/an4.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "data/dataset_info.h"
#include "framework/core/check.h"

namespace qtrain {
namespace {

namespace fs = std::filesystem;

struct Utterance {
  std::string id;     // e.g. an251-fash-b
  std::string audio;  // path of the audio file
  std::string text;   // "YES", "RUBOUT G M E F THREE NINE"
  int line = 0;       // line in the transcription file
};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    input_error(
        "{}: cannot open ({}); an AN4 folder holds etc/an4_train.fileids, etc/an4_train.transcription, "
        "etc/an4_test.fileids, etc/an4_test.transcription and the audio under wav/",
        path, std::strerror(errno));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  // A folder opens as an empty stream and only fails on reading: it must not pass for an empty list.
  if (in.bad()) input_error("{}: cannot read ({}); expected a text file", path, std::strerror(errno));
  // A trailing empty line is a final newline, not an utterance.
  while (!lines.empty() && lines.back().find_first_not_of(" \t") == std::string::npos) lines.pop_back();
  return lines;
}

std::string split_name(Split split) { return split == Split::train ? "train" : "test"; }

// "<s> YES </s> (an251-fash-b)" -> text "YES", id "an251-fash-b".
void parse_transcription(const std::string& path, int line_no, const std::string& line, std::string* text,
                         std::string* id) {
  const size_t open = line.rfind('(');
  const size_t close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open ||
      close + 1 != line.find_last_not_of(" \t") + 1)
    input_error("{}:{}: expected 'WORDS (utterance-id)', got '{}'", path, line_no, line);
  *id = line.substr(open + 1, close - open - 1);
  std::istringstream words(line.substr(0, open));
  std::string word;
  text->clear();
  while (words >> word) {
    if (word == "<s>" || word == "</s>" || word == "<sil>") continue;
    if (!text->empty()) *text += ' ';
    *text += word;
  }
  if (text->empty()) input_error("{}:{}: utterance {} has an empty transcription", path, line_no, *id);
}

std::vector<Utterance> read_split(const std::string& folder, Split split) {
  const std::string name = split_name(split);
  const std::string ids_path = (fs::path(folder) / "etc" / ("an4_" + name + ".fileids")).string();
  const std::string text_path = (fs::path(folder) / "etc" / ("an4_" + name + ".transcription")).string();
  const std::vector<std::string> ids = read_lines(ids_path);
  const std::vector<std::string> texts = read_lines(text_path);
  if (ids.size() != texts.size())
    input_error("{} lists {} utterances but {} has {} lines; they must match line by line", ids_path, ids.size(),
                text_path, texts.size());
  if (ids.empty()) input_error("{} lists no utterances", ids_path);
  std::vector<Utterance> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    Utterance& u = out[i];
    u.line = static_cast<int>(i) + 1;
    parse_transcription(text_path, u.line, texts[i], &u.text, &u.id);
    std::string fileid = ids[i];
    fileid.erase(0, fileid.find_first_not_of(" \t"));
    fileid.erase(fileid.find_last_not_of(" \t") + 1);
    if (fs::path(fileid).filename().string() != u.id)
      input_error(
          "{}:{} names utterance '{}' but {}:{} is '{}'; the two files must list the same utterances in "
          "the same order",
          text_path, u.line, u.id, ids_path, u.line, fileid);
    const fs::path base = fs::path(folder) / "wav" / fileid;
    u.audio.clear();
    for (const char* ext : {".raw", ".sph", ".wav"}) {
      std::error_code ec;
      const fs::path p = fs::path(base.string() + ext);
      if (fs::is_regular_file(p, ec)) {
        u.audio = p.string();
        break;
      }
    }
    if (u.audio.empty())
      input_error("{}:{}: no audio for utterance '{}': none of {}.raw, .sph, .wav exists", ids_path, u.line, fileid,
                  base.string());
  }
  return out;
}

// The cache file: magic, a length-prefixed description of everything the features depend on (feature
// parameters, audio options, each source's path and size), the frame count of each utterance, then the
// float frames and a CRC-32 of them. Any difference or damage means the cache is rebuilt.
constexpr char kCacheMagic[8] = {'Q', 'T', 'F', 'E', 'A', 'T', '0', '1'};

std::string cache_key(const std::vector<Utterance>& utts, const An4Options& o) {
  std::string key = describe(o.features);
  key += fmt::format(" byte_order={} rate={}\n", o.audio.raw_byte_order == ByteOrder::big ? "big" : "little",
                     o.audio.raw_sample_rate);
  for (const Utterance& u : utts) {
    std::error_code ec;
    const auto size = fs::file_size(u.audio, ec);
    key += fmt::format("{} {}\n", u.audio, ec ? -1 : static_cast<int64_t>(size));
  }
  return key;
}

template <typename T>
bool read_pod(std::istream& in, T* v) {
  return static_cast<bool>(in.read(reinterpret_cast<char*>(v), sizeof(T)));
}

// Returns true and fills frames/features when `path` holds a valid cache for `key`.
bool load_cache(const std::string& path, const std::string& key, size_t count, int mels, std::vector<int64_t>* frames,
                std::vector<float>* features, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = "absent";
    return false;
  }
  char magic[8];
  uint64_t key_size = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kCacheMagic, 8) != 0 || !read_pod(in, &key_size) ||
      key_size > (1u << 28)) {
    *why = "not a qtrain feature cache";
    return false;
  }
  std::string stored(key_size, '\0');
  if (!in.read(stored.data(), static_cast<std::streamsize>(key_size))) {
    *why = "truncated header";
    return false;
  }
  if (stored != key) {
    *why = "stale (feature parameters or audio files changed)";
    return false;
  }
  frames->assign(count, 0);
  if (!in.read(reinterpret_cast<char*>(frames->data()), static_cast<std::streamsize>(count * sizeof(int64_t)))) {
    *why = "truncated frame counts";
    return false;
  }
  int64_t total = 0;
  for (int64_t f : *frames) {
    if (f <= 0 || f > (1 << 24)) {
      *why = "corrupt frame counts";
      return false;
    }
    total += f;
  }
  // The frame counts are outside the checksum: damaged ones could ask for gigabytes, so they must
  // match the bytes the file still holds before anything is allocated.
  const std::streamoff at = in.tellg();
  in.seekg(0, std::ios::end);
  const std::streamoff left = in.tellg() - at;
  in.seekg(at);
  if (!in || left != static_cast<std::streamoff>(total * mels * static_cast<int64_t>(sizeof(float)) + 4)) {
    *why = "frame counts do not match the file size";
    return false;
  }
  features->resize(static_cast<size_t>(total) * mels);
  uint32_t crc = 0;
  if (!in.read(reinterpret_cast<char*>(features->data()),
               static_cast<std::streamsize>(features->size() * sizeof(float))) ||
      !read_pod(in, &crc)) {
    *why = "truncated features";
    return false;
  }
  const uint32_t actual = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(features->data()), static_cast<uInt>(features->size() * sizeof(float))));
  if (crc != actual) {
    *why = "checksum mismatch";
    return false;
  }
  return true;
}

// Written to a temporary name in the same folder and renamed, so a reader never sees a partial file.
void write_cache(const std::string& path, const std::string& key, const std::vector<int64_t>& frames,
                 const std::vector<float>& features) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      input_error("cannot write the feature cache {}: {} (set data.cache_dir to a writable folder)", tmp,
                  std::strerror(errno));
    const uint64_t key_size = key.size();
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(features.data()), static_cast<uInt>(features.size() * sizeof(float))));
    out.write(kCacheMagic, 8);
    out.write(reinterpret_cast<const char*>(&key_size), sizeof key_size);
    out.write(key.data(), static_cast<std::streamsize>(key.size()));
    out.write(reinterpret_cast<const char*>(frames.data()),
              static_cast<std::streamsize>(frames.size() * sizeof(int64_t)));
    out.write(reinterpret_cast<const char*>(features.data()),
              static_cast<std::streamsize>(features.size() * sizeof(float)));
    out.write(reinterpret_cast<const char*>(&crc), sizeof crc);
    out.flush();
    if (!out) input_error("cannot write the feature cache {} (disk full?)", tmp);
  }
  fs::rename(tmp, path, ec);
  if (ec) input_error("cannot rename {} to {}: {}", tmp, path, ec.message());
}

class An4Dataset final : public Dataset {
 public:
  // `frames` are the unstacked frame counts of the utterances in `features` ([frames, mels] each, one
  // after the other); a step is `stack` of them side by side, which in row-major order is the same
  // floats read as [frames / stack, stack * mels].
  An4Dataset(std::vector<std::string> vocab, std::vector<std::vector<int32_t>> targets, std::vector<int64_t> frames,
             std::vector<float> features, int mels, int64_t stack)
      : vocab_(std::move(vocab)), targets_(std::move(targets)), features_(std::move(features)), step_(mels * stack) {
    offsets_.resize(frames.size());
    steps_.resize(frames.size());
    int64_t off = 0;
    for (size_t i = 0; i < frames.size(); ++i) {
      offsets_[i] = off;
      steps_[i] = frames[i] / stack;
      off += frames[i] * mels;
    }
  }
  int64_t size() const override { return static_cast<int64_t>(steps_.size()); }
  Shape sample_shape() const override { return {step_}; }
  int num_classes() const override { return static_cast<int>(vocab_.size()); }
  void read(int64_t /*index*/, float* /*x*/, int32_t* /*label*/) const override {
    QT_FAIL("an4 holds sequences; read it with read_sequence (the loader does so for sequence datasets)");
  }
  bool is_sequence() const override { return true; }
  int64_t sequence_length(int64_t index) const override { return steps_.at(static_cast<size_t>(index)); }
  void read_sequence(int64_t index, float* x, std::vector<int32_t>* targets) const override {
    QT_CHECK(index >= 0 && index < size(), "an4: utterance {} out of range [0, {})", index, size());
    const size_t i = static_cast<size_t>(index);
    std::copy_n(features_.data() + offsets_[i], steps_[i] * step_, x);
    *targets = targets_[i];
  }
  std::vector<std::string> vocabulary() const override { return vocab_; }

 private:
  std::vector<std::string> vocab_;
  std::vector<std::vector<int32_t>> targets_;
  std::vector<float> features_;
  std::vector<int64_t> offsets_;  // of each utterance in features_
  std::vector<int64_t> steps_;    // stacked steps of each utterance
  int64_t step_;                  // values per step: mels * stack
};

}  // namespace

std::vector<std::string> an4_vocabulary(const std::string& folder) {
  const std::string path = (fs::path(folder) / "etc" / "an4_train.transcription").string();
  std::set<unsigned char> chars;
  int line_no = 0;
  for (const std::string& line : read_lines(path)) {
    std::string text, id;
    parse_transcription(path, ++line_no, line, &text, &id);
    for (char c : text) chars.insert(static_cast<unsigned char>(c));
  }
  std::vector<std::string> vocab{""};
  for (unsigned char c : chars) vocab.emplace_back(1, static_cast<char>(c));
  return vocab;
}

std::unique_ptr<Dataset> open_an4(const std::string& folder, Split split, const An4Options& options) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    input_error("data.path {} is not a folder; it should hold the AN4 corpus (etc/ and wav/)", folder);
  const std::vector<std::string> vocab = an4_vocabulary(folder);
  std::vector<Utterance> utts = read_split(folder, split);
  if (options.limit > 0 && static_cast<size_t>(options.limit) < utts.size())
    utts.resize(static_cast<size_t>(options.limit));

  const std::string text_path = (fs::path(folder) / "etc" / ("an4_" + split_name(split) + ".transcription")).string();
  std::vector<std::vector<int32_t>> targets(utts.size());
  for (size_t i = 0; i < utts.size(); ++i) {
    for (char c : utts[i].text) {
      auto it = std::find(vocab.begin() + 1, vocab.end(), std::string(1, c));
      if (it == vocab.end())
        input_error("{}:{}: character '{}' of utterance {} does not occur in the training transcriptions", text_path,
                    utts[i].line, c, utts[i].id);
      targets[i].push_back(static_cast<int32_t>(it - vocab.begin()));
    }
  }

  const int mels = options.features.num_mels;
  const std::string key = cache_key(utts, options);
  const std::string cache_path =
      options.cache_dir.empty() ? ""
                                : (fs::path(options.cache_dir) / ("an4_" + split_name(split) + ".features")).string();
  std::vector<int64_t> frames;
  std::vector<float> features;
  std::string why;
  if (cache_path.empty() || !load_cache(cache_path, key, utts.size(), mels, &frames, &features, &why)) {
    const LogMelFilterbank fbank(options.features);
    frames.assign(utts.size(), 0);
    features.clear();
    for (size_t i = 0; i < utts.size(); ++i) {
      const std::vector<float> samples = read_audio(utts[i].audio, options.audio);
      const int64_t n = fbank.num_frames(static_cast<int64_t>(samples.size()));
      if (n <= 0)
        input_error("{}: utterance {} has {} samples, fewer than one {}-sample analysis window", utts[i].audio,
                    utts[i].id, samples.size(), fbank.window_length());
      const std::vector<float> f = fbank.compute(samples);
      frames[i] = n;
      features.insert(features.end(), f.begin(), f.end());
    }
    if (!cache_path.empty()) write_cache(cache_path, key, frames, features);
  }
  QT_CHECK(options.stack >= 1, "an4: stack must be >= 1, got {}", options.stack);
  for (size_t i = 0; i < utts.size(); ++i)
    if (frames[i] < options.stack)
      input_error("{}: utterance {} has {} frames, fewer than the {} stacked into one step (data.features.stack)",
                  utts[i].audio, utts[i].id, frames[i], options.stack);
  return std::make_unique<An4Dataset>(vocab, std::move(targets), std::move(frames), std::move(features), mels,
                                      options.stack);
}

namespace {

// data.features: the filterbank and the frames stacked per step.
void parse_features(ConfigNode& f, An4Options* a) {
  FilterbankOptions& fb = a->features;
  fb.num_mels = static_cast<int>(f.get_int("num_mels", fb.num_mels, 1, 512));
  fb.window_ms = f.get_double("window_ms", fb.window_ms, 1.0, 1000.0);
  fb.hop_ms = f.get_double("hop_ms", fb.hop_ms, 0.1, 1000.0);
  fb.fft_size = static_cast<int>(f.get_int("fft_size", fb.fft_size, 16, 1 << 16));
  fb.window = f.get_choice("window", "hann", {"hann", "hamming"}) == "hamming" ? WindowType::hamming : WindowType::hann;
  a->stack = f.get_int("stack", a->stack, 1, 16);
  // The filterbank checks this too, but cannot name the key.
  const long window = std::lround(fb.window_ms * fb.sample_rate / 1000.0);
  if (fb.fft_size < window)
    f.fail("fft_size", fmt::format("must be >= the window of {} samples (window_ms {} at {} Hz), got {}", window,
                                   fb.window_ms, fb.sample_rate, fb.fft_size));
  f.finish();
}

// The reader's keys: the byte order of headerless audio, the feature cache and data.features.
An4Options parse_an4_keys(ConfigNode& section) {
  An4Options a;
  a.audio.raw_byte_order =
      section.get_choice("byte_order", "big", {"big", "little"}) == "little" ? ByteOrder::little : ByteOrder::big;
  a.cache_dir = section.get<std::string>("cache_dir", a.cache_dir);
  if (section.has("features")) {
    ConfigNode f = section.child("features");
    parse_features(f, &a);
  }
  return a;
}

std::unique_ptr<Dataset> open_an4_split(const DataConfig& config, Split split) {
  An4Options a = config.dataset_options_as<An4Options>();
  a.limit = config.limit(split);
  return open_an4(config.path, split, a);
}

}  // namespace

namespace data_detail {

const DatasetInfo& an4_dataset_info() {
  static const DatasetInfo info = [] {
    DatasetInfo d;
    d.name = "an4";
    d.no_mean_std = "its features are normalized per utterance";
    d.keys = {"byte_order", "cache_dir", "features"};
    d.parse = [](ConfigNode& section) { return std::any(parse_an4_keys(section)); };
    d.open = open_an4_split;
    return d;
  }();
  return info;
}

}  // namespace data_detail
}  // namespace qtrain
