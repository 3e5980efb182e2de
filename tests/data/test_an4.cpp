// data/: audio reading (raw PCM in both byte orders, NIST SPHERE, WAV, and their errors), the log-mel
// filterbank against a direct DFT computed here in double, the AN4 reader on a corpus the test writes
// (vocabulary, error cases, the feature cache), sequence batches from the Loader, and the real corpus
// in the shared data (the CTest entry test_an4_an4, "Skipped" without it).
#include <catch2/catch.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <filesystem>
#include <fstream>

#include "data/an4.h"
#include "data/audio_features.h"
#include "data/loader.h"
#include "framework/core/check.h"
#include "tests/support/real_data.h"
#include "tests/support/temp_dir.h"

using namespace qtrain;
namespace fs = std::filesystem;
using qtrain::testing::TempDir;

namespace {

std::vector<int16_t> sine(double hz, int n, double amplitude = 8000.0, int rate = 16000) {
  std::vector<int16_t> s(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    s[static_cast<size_t>(i)] = static_cast<int16_t>(std::lround(amplitude * std::sin(2 * M_PI * hz * i / rate)));
  return s;
}

std::string pcm_bytes(const std::vector<int16_t>& s, ByteOrder order) {
  std::string b;
  for (int16_t v : s) {
    const uint16_t u = static_cast<uint16_t>(v);
    const char hi = static_cast<char>(u >> 8), lo = static_cast<char>(u & 0xFF);
    if (order == ByteOrder::big) {
      b += hi;
      b += lo;
    } else {
      b += lo;
      b += hi;
    }
  }
  return b;
}

std::string sphere_bytes(const std::vector<int16_t>& s, ByteOrder order, const std::string& coding = "pcm",
                         int rate = 16000) {
  std::string h = "NIST_1A\n   1024\n";
  h += "sample_count -i " + std::to_string(s.size()) + "\n";
  h += "sample_rate -i " + std::to_string(rate) + "\n";
  h += "channel_count -i 1\nsample_n_bytes -i 2\n";
  h += std::string("sample_byte_format -s2 ") + (order == ByteOrder::big ? "10" : "01") + "\n";
  h += "sample_coding -s" + std::to_string(coding.size()) + " " + coding + "\nend_head\n";
  h.resize(1024, ' ');
  return h + pcm_bytes(s, order);
}

void put32(std::string& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b += static_cast<char>(v >> (8 * i));
}
void put16(std::string& b, uint16_t v) {
  for (int i = 0; i < 2; ++i) b += static_cast<char>(v >> (8 * i));
}

std::string wav_bytes(const std::vector<int16_t>& s, uint16_t channels = 1) {
  const std::string data = pcm_bytes(s, ByteOrder::little);
  std::string b = "RIFF";
  put32(b, static_cast<uint32_t>(36 + data.size()));
  b += "WAVEfmt ";
  put32(b, 16);
  put16(b, 1);
  put16(b, channels);
  put32(b, 16000);
  put32(b, 16000 * 2 * channels);
  put16(b, static_cast<uint16_t>(2 * channels));
  put16(b, 16);
  b += "data";
  put32(b, static_cast<uint32_t>(data.size()));
  return b + data;
}

void require_same(const std::vector<float>& a, const std::vector<int16_t>& s) {
  REQUIRE(a.size() == s.size());
  for (size_t i = 0; i < s.size(); ++i) REQUIRE(a[i] == static_cast<float>(s[i]) / 32768.0f);
}

}  // namespace

TEST_CASE("read_audio: raw PCM in both byte orders, SPHERE and WAV", "[an4][audio]") {
  TempDir dir;
  std::vector<int16_t> s = sine(440, 1000);
  s[3] = -32768;
  s[4] = 32767;
  s[5] = 0x0102;  // distinguishes the byte orders
  AudioOptions big, little;
  little.raw_byte_order = ByteOrder::little;
  require_same(read_audio(dir.write("a.raw", pcm_bytes(s, ByteOrder::big)), big), s);
  require_same(read_audio(dir.write("b.raw", pcm_bytes(s, ByteOrder::little)), little), s);
  // The wrong byte order reads other values (0x0102 becomes 0x0201).
  CHECK(read_audio(dir.file("a.raw"), little)[5] == static_cast<float>(0x0201) / 32768.0f);
  require_same(read_audio(dir.write("c.sph", sphere_bytes(s, ByteOrder::big)), little), s);
  require_same(read_audio(dir.write("d.sph", sphere_bytes(s, ByteOrder::little)), big), s);
  require_same(read_audio(dir.write("e.wav", wav_bytes(s)), big), s);
}

TEST_CASE("read_audio: errors name the file and the problem", "[an4][audio]") {
  TempDir dir;
  const AudioOptions o;
  const std::vector<int16_t> s = sine(440, 100);
  CHECK_THROWS_WITH(read_audio(dir.file("missing.raw"), o),
                    Catch::Contains("missing.raw") && Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(read_audio(dir.write("odd.raw", "abc"), o), Catch::Contains("odd count"));
  CHECK_THROWS_WITH(read_audio(dir.write("s.sph", sphere_bytes(s, ByteOrder::big, "pcm,embedded-shorten-v2.00")), o),
                    Catch::Contains("s.sph") && Catch::Contains("shorten"));
  CHECK_THROWS_WITH(read_audio(dir.write("u.sph", sphere_bytes(s, ByteOrder::big, "ulaw")), o),
                    Catch::Contains("only uncompressed pcm"));
  CHECK_THROWS_WITH(read_audio(dir.write("r.sph", sphere_bytes(s, ByteOrder::big, "pcm", 8000)), o),
                    Catch::Contains("sample_rate is 8000"));
  CHECK_THROWS_WITH(read_audio(dir.write("bad.sph", "NIST_1B\n"), o), Catch::Contains("NIST_1A"));
  std::string truncated = sphere_bytes(s, ByteOrder::big);
  truncated.resize(1024 + 50);
  CHECK_THROWS_WITH(read_audio(dir.write("t.sph", truncated), o), Catch::Contains("sample_count 100"));
  CHECK_THROWS_WITH(read_audio(dir.write("st.wav", wav_bytes(s, 2)), o), Catch::Contains("2 channels"));
  CHECK_THROWS_WITH(read_audio(dir.write("x.wav", "RIFFxxxxWAVX"), o), Catch::Contains("RIFF....WAVE"));
}

TEST_CASE("log-mel filterbank: against a direct DFT, and a sine lands in its band", "[an4][features]") {
  FilterbankOptions o;
  o.normalize = false;
  const LogMelFilterbank fb(o);
  REQUIRE(fb.window_length() == 400);
  REQUIRE(fb.hop_length() == 160);
  CHECK(fb.num_frames(399) == 0);
  CHECK(fb.num_frames(400) == 1);
  CHECK(fb.num_frames(16000) == 98);
  // Every filter is a triangle peaking near its center: its weights sum > 0 and lie in [0, 1].
  for (int m = 0; m < 40; ++m) {
    double sum = 0;
    for (int k = 0; k < 257; ++k) {
      const float w = fb.filters()[static_cast<size_t>(m) * 257 + k];
      REQUIRE(w >= 0.0f);
      REQUIRE(w <= 1.0f);
      sum += w;
    }
    REQUIRE(sum > 0);
  }

  for (double hz : {300.0, 1000.0, 2500.0, 6000.0}) {
    const std::vector<int16_t> s = sine(hz, 4000);
    std::vector<float> x(s.size());
    for (size_t i = 0; i < s.size(); ++i) x[i] = s[i] / 32768.0f;
    const std::vector<float> f = fb.compute(x);
    REQUIRE(f.size() == static_cast<size_t>(fb.num_frames(4000)) * 40);
    // Reference for frame 2: Hann-windowed direct DFT in double, the same triangles, log.
    const int t = 2;
    std::vector<double> power(257);
    for (int k = 0; k < 257; ++k) {
      std::complex<double> acc = 0;
      for (int i = 0; i < 400; ++i) {
        const double w = 0.5 - 0.5 * std::cos(2 * M_PI * i / 400.0);
        acc += w * x[static_cast<size_t>(t * 160 + i)] * std::polar(1.0, -2 * M_PI * k * i / 512.0);
      }
      power[static_cast<size_t>(k)] = std::norm(acc);
    }
    std::vector<double> energy(40);
    for (int m = 0; m < 40; ++m)
      for (int k = 0; k < 257; ++k)
        energy[static_cast<size_t>(m)] +=
            fb.filters()[static_cast<size_t>(m) * 257 + k] * power[static_cast<size_t>(k)];
    const double peak = *std::max_element(energy.begin(), energy.end());
    int best = 0;
    for (int m = 0; m < 40; ++m) {
      // float FFT: each energy to 1e-4 relative, or 1e-7 of the loudest band (leakage far from the tone).
      const double e = energy[static_cast<size_t>(m)];
      CHECK(std::exp(static_cast<double>(f[static_cast<size_t>(t * 40 + m)])) - 1e-10 ==
            Approx(e).epsilon(1e-4).margin(1e-7 * peak));
      if (f[static_cast<size_t>(t * 40 + m)] > f[static_cast<size_t>(t * 40 + best)]) best = m;
    }
    // The loudest band is the one whose center is nearest the tone (or its neighbour, the filters overlap).
    int nearest = 0;
    for (int m = 1; m < 40; ++m)
      if (std::fabs(fb.band_center_hz(m) - hz) < std::fabs(fb.band_center_hz(nearest) - hz)) nearest = m;
    INFO("tone " << hz << " Hz: loudest band " << best << " nearest band " << nearest);
    CHECK(std::abs(best - nearest) <= 1);
  }
}

TEST_CASE("log-mel filterbank: per-utterance normalization gives zero mean, unit variance", "[an4][features]") {
  const LogMelFilterbank fb(FilterbankOptions{});
  std::vector<float> x(8000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(0.3 * std::sin(0.05 * i) + 0.1 * std::sin(0.0007 * i * i));
  const std::vector<float> f = fb.compute(x);
  const int64_t frames = fb.num_frames(8000);
  for (int m = 0; m < 40; m += 7) {
    double sum = 0, sq = 0;
    for (int64_t t = 0; t < frames; ++t) sum += f[static_cast<size_t>(t * 40 + m)];
    for (int64_t t = 0; t < frames; ++t) sq += std::pow(f[static_cast<size_t>(t * 40 + m)] - sum / frames, 2);
    CHECK(std::fabs(sum / frames) < 1e-4);
    CHECK(std::sqrt(sq / frames) == Approx(1.0).epsilon(1e-3));
  }
}

namespace {

// A tiny AN4-layout corpus: 3 training and 2 test utterances of raw big-endian PCM.
void write_corpus(const TempDir& dir, int train_samples = 3200) {
  fs::create_directories(dir.path() / "etc");
  fs::create_directories(dir.path() / "wav" / "an4_clstk" / "spk1");
  fs::create_directories(dir.path() / "wav" / "an4test_clstk" / "spk2");
  dir.write("etc/an4_train.fileids", "an4_clstk/spk1/a1\nan4_clstk/spk1/a2\nan4_clstk/spk1/a3\n");
  dir.write("etc/an4_train.transcription", "<s> YES </s> (a1)\n<s> TWO B </s> (a2)\n<s> GO </s> (a3)\n");
  dir.write("etc/an4_test.fileids", "an4test_clstk/spk2/t1\nan4test_clstk/spk2/t2\n");
  dir.write("etc/an4_test.transcription", "BY SET (t1)\nGO (t2)\n");
  const int lengths[] = {train_samples, 4000, 2400};
  for (int i = 0; i < 3; ++i)
    dir.write("wav/an4_clstk/spk1/a" + std::to_string(i + 1) + ".raw",
              pcm_bytes(sine(300 + 200 * i, lengths[i]), ByteOrder::big));
  dir.write("wav/an4test_clstk/spk2/t1.raw", pcm_bytes(sine(700, 1600), ByteOrder::big));
  dir.write("wav/an4test_clstk/spk2/t2.sph", sphere_bytes(sine(900, 2000), ByteOrder::big));
}

std::vector<float> sequence_of(const Dataset& d, int64_t i, std::vector<int32_t>* targets) {
  std::vector<float> x(static_cast<size_t>(d.sequence_length(i) * shape_numel(d.sample_shape())));
  d.read_sequence(i, x.data(), targets);
  return x;
}

}  // namespace

TEST_CASE("an4: vocabulary, targets and frames on a corpus written here", "[an4]") {
  TempDir dir;
  write_corpus(dir);
  const std::vector<std::string> vocab = an4_vocabulary(dir.path().string());
  // blank, space, then the letters of YES TWO B GO in byte order.
  CHECK(vocab == std::vector<std::string>{"", " ", "B", "E", "G", "O", "S", "T", "W", "Y"});
  const auto train = open_an4(dir.path().string(), Split::train, An4Options{});
  REQUIRE(train->is_sequence());
  REQUIRE(train->size() == 3);
  CHECK(train->num_classes() == 10);
  CHECK(train->sample_shape() == Shape{40});
  CHECK(train->sequence_length(0) == 1 + (3200 - 400) / 160);
  CHECK(train->sequence_length(1) == 1 + (4000 - 400) / 160);
  std::vector<int32_t> targets;
  sequence_of(*train, 1, &targets);
  CHECK(targets == std::vector<int32_t>{7, 8, 5, 1, 2});  // "TWO B"
  const auto test = open_an4(dir.path().string(), Split::test, An4Options{});
  REQUIRE(test->size() == 2);
  sequence_of(*test, 1, &targets);  // the .sph file
  CHECK(targets == std::vector<int32_t>{4, 5});
  CHECK_THROWS_WITH(train->read(0, nullptr, nullptr), Catch::Contains("read_sequence"));
}

TEST_CASE("an4: stacked frames are consecutive frames side by side, the leftover dropped", "[an4]") {
  TempDir dir;
  write_corpus(dir);
  const std::string root = dir.path().string();
  const auto plain = open_an4(root, Split::train, An4Options{});
  An4Options o;
  o.stack = 3;
  const auto stacked = open_an4(root, Split::train, o);
  CHECK(stacked->sample_shape() == Shape{120});
  std::vector<int32_t> targets, stacked_targets;
  for (int64_t i = 0; i < plain->size(); ++i) {
    const int64_t frames = plain->sequence_length(i);  // 18, 23, 13: none a multiple of 3
    REQUIRE(stacked->sequence_length(i) == frames / 3);
    const std::vector<float> x = sequence_of(*plain, i, &targets);
    const std::vector<float> y = sequence_of(*stacked, i, &stacked_targets);
    CHECK(stacked_targets == targets);
    // Step t holds frames 3t, 3t+1, 3t+2, each of 40 bands.
    for (int64_t t = 0; t < frames / 3; ++t)
      for (int64_t k = 0; k < 3; ++k)
        for (int64_t m = 0; m < 40; ++m)
          REQUIRE(y[static_cast<size_t>(t * 120 + k * 40 + m)] == x[static_cast<size_t>((3 * t + k) * 40 + m)]);
  }
  // An utterance shorter than one step is an error naming it (a3 has 13 frames).
  o.stack = 14;
  CHECK_THROWS_WITH(open_an4(root, Split::train, o),
                    Catch::Contains("a3.raw") && Catch::Contains("13 frames, fewer than the 14 stacked"));
}

TEST_CASE("an4: clear errors for broken corpora", "[an4]") {
  TempDir dir;
  write_corpus(dir);
  const std::string root = dir.path().string();
  SECTION("missing audio") {
    fs::remove(dir.path() / "wav/an4_clstk/spk1/a2.raw");
    CHECK_THROWS_WITH(open_an4(root, Split::train, {}),
                      Catch::Contains("an4_train.fileids:2") && Catch::Contains("a2"));
  }
  SECTION("unreadable audio") {
    fs::remove(dir.path() / "wav/an4_clstk/spk1/a2.raw");
    dir.write("wav/an4_clstk/spk1/a2.wav", "RIFF");
    CHECK_THROWS_WITH(open_an4(root, Split::train, {}), Catch::Contains("a2.wav") && Catch::Contains("RIFF"));
  }
  SECTION("count mismatch") {
    dir.write("etc/an4_train.fileids", "an4_clstk/spk1/a1\nan4_clstk/spk1/a2\n");
    CHECK_THROWS_WITH(open_an4(root, Split::train, {}),
                      Catch::Contains("lists 2 utterances") && Catch::Contains("3 lines"));
  }
  SECTION("id mismatch names both lines") {
    dir.write("etc/an4_train.fileids", "an4_clstk/spk1/a1\nan4_clstk/spk1/a3\nan4_clstk/spk1/a2\n");
    CHECK_THROWS_WITH(open_an4(root, Split::train, {}),
                      Catch::Contains("an4_train.transcription:2") && Catch::Contains("an4_train.fileids:2"));
  }
  SECTION("empty transcription") {
    dir.write("etc/an4_train.transcription", "<s> YES </s> (a1)\n<s> </s> (a2)\n<s> GO </s> (a3)\n");
    CHECK_THROWS_WITH(open_an4(root, Split::train, {}),
                      Catch::Contains(":2") && Catch::Contains("empty transcription"));
  }
  SECTION("malformed transcription line") {
    dir.write("etc/an4_train.transcription", "<s> YES </s> (a1)\nTWO B\n<s> GO </s> (a3)\n");
    CHECK_THROWS_WITH(open_an4(root, Split::train, {}), Catch::Contains("an4_train.transcription:2"));
  }
  SECTION("empty utterance audio") {
    dir.write("wav/an4_clstk/spk1/a3.raw", "");
    CHECK_THROWS_WITH(open_an4(root, Split::train, {}), Catch::Contains("a3.raw") && Catch::Contains("fewer than one"));
  }
  SECTION("test character outside the training vocabulary") {
    dir.write("etc/an4_test.transcription", "BY SET (t1)\nZ (t2)\n");
    CHECK_THROWS_WITH(open_an4(root, Split::test, {}),
                      Catch::Contains("an4_test.transcription:2") && Catch::Contains("'Z'"));
  }
  SECTION("a folder where a list is expected") {
    // Not an empty list: the error says it is a folder (not "lists 0 utterances but ... has 3 lines").
    fs::remove(dir.path() / "etc/an4_train.fileids");
    fs::create_directories(dir.path() / "etc/an4_train.fileids");
    CHECK_THROWS_WITH(open_an4(root, Split::train, {}),
                      Catch::Contains("an4_train.fileids: cannot read (Is a directory); expected a text file"));
  }
  SECTION("missing folder") {
    CHECK_THROWS_WITH(open_an4(root + "/nope", Split::train, {}), Catch::Contains("not a folder"));
  }
}

TEST_CASE("an4: the feature cache is reused, and rebuilt when stale or corrupt", "[an4][cache]") {
  TempDir dir, cache;
  write_corpus(dir);
  An4Options o;
  o.cache_dir = cache.file("features");
  const std::string root = dir.path().string();
  std::vector<int32_t> targets;
  const std::vector<float> fresh = sequence_of(*open_an4(root, Split::train, o), 0, &targets);
  const fs::path file = fs::path(o.cache_dir) / "an4_train.features";
  REQUIRE(fs::exists(file));
  const auto written = fs::last_write_time(file);
  // Loaded from the cache: same values, file untouched.
  CHECK(sequence_of(*open_an4(root, Split::train, o), 0, &targets) == fresh);
  CHECK(fs::last_write_time(file) == written);
  SECTION("corrupt payload is detected by the checksum and rebuilt") {
    {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 20));
      f.put('\x55');
    }
    CHECK(sequence_of(*open_an4(root, Split::train, o), 0, &targets) == fresh);
  }
  SECTION("damaged frame counts are rebuilt without allocating what they claim") {
    // The counts precede the checksummed features: 2^24 frames per utterance claimed 8 GB, which was
    // allocated and cleared before the read fell short (a std::bad_alloc under a memory limit).
    uint64_t key_size = 0;
    {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(8);
      f.read(reinterpret_cast<char*>(&key_size), sizeof key_size);
      f.seekp(static_cast<std::streamoff>(16 + key_size));
      const int64_t huge = int64_t{1} << 24;
      for (int i = 0; i < 3; ++i) f.write(reinterpret_cast<const char*>(&huge), sizeof huge);
    }
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    CHECK(sequence_of(*open_an4(root, Split::train, o), 0, &targets) == fresh);
    rusage after{};
    ::getrusage(RUSAGE_SELF, &after);
    CHECK(after.ru_maxrss - before.ru_maxrss < 512 * 1024);  // kilobytes
  }
  SECTION("truncated file is rebuilt") {
    fs::resize_file(file, 30);
    CHECK(sequence_of(*open_an4(root, Split::train, o), 0, &targets) == fresh);
    CHECK(fs::file_size(file) > 30);
  }
  SECTION("changed audio makes it stale") {
    write_corpus(dir, 4800);
    const auto d = open_an4(root, Split::train, o);
    CHECK(d->sequence_length(0) == 1 + (4800 - 400) / 160);
  }
  SECTION("changed parameters make it stale") {
    o.features.num_mels = 20;
    const auto d = open_an4(root, Split::train, o);
    CHECK(d->sample_shape() == Shape{20});
  }
}

TEST_CASE("loader: sequence batches are zero-padded with lengths and concatenated targets", "[an4][loader]") {
  TempDir dir;
  write_corpus(dir);
  const auto train = open_an4(dir.path().string(), Split::train, An4Options{});
  LoaderOptions lo;
  lo.batch_size = 3;
  lo.shuffle = false;
  Loader loader(*train, lo);
  loader.start_epoch(0);
  auto batch = loader.next();
  REQUIRE(batch);
  const int64_t t_max = train->sequence_length(1);
  REQUIRE(batch->x.shape() == Shape{3, t_max, 40});
  std::vector<int32_t> targets;
  for (int64_t r = 0; r < 3; ++r) {
    const int64_t n = train->sequence_length(r);
    CHECK(batch->lengths.data<int32_t>()[r] == n);
    const std::vector<float> x = sequence_of(*train, r, &targets);
    const float* row = batch->x.data<float>() + r * t_max * 40;
    CHECK(std::equal(x.begin(), x.end(), row));
    for (int64_t i = n * 40; i < t_max * 40; ++i) REQUIRE(row[i] == 0.0f);
  }
  CHECK(std::vector<int32_t>(batch->target_lengths.data<int32_t>(), batch->target_lengths.data<int32_t>() + 3) ==
        std::vector<int32_t>{3, 5, 2});
  CHECK(std::vector<int32_t>(batch->targets.data<int32_t>(), batch->targets.data<int32_t>() + 10) ==
        std::vector<int32_t>{9, 3, 6, 7, 8, 5, 1, 2, 4, 5});
  CHECK_FALSE(loader.next());
}

TEST_CASE("an4: the real corpus in the shared data", "[an4][real][real:an4]") {
  const fs::path folder = qtrain::testing::require_real_data("an4");
  const std::vector<std::string> vocab = an4_vocabulary(folder.string());
  // blank, space, apostrophe-free A-Z: AN4's words are spelled letters, digits as words, commands.
  REQUIRE(vocab.size() >= 27);
  CHECK(vocab[0].empty());
  CHECK(vocab[1] == " ");
  An4Options o;
  o.limit = 0;
  TempDir cache;
  o.cache_dir = cache.file("c");
  const auto test = open_an4(folder.string(), Split::test, o);
  CHECK(test->size() == 130);
  const auto train = open_an4(folder.string(), Split::train, o);
  CHECK(train->size() == 948);
  // 16 kHz utterances of about 1-10 s: 100 frames per second.
  for (int64_t i = 0; i < train->size(); ++i) {
    REQUIRE(train->sequence_length(i) > 30);
    REQUIRE(train->sequence_length(i) < 2000);
  }
}
