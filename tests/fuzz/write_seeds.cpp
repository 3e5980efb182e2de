// Writes the seed corpus of the fuzz targets, tests/fuzz/corpus/<target>/seed_*: small valid inputs
// of each format, made by qtrain's own writers (encode, save_safetensors) and the tests' file
// builders, so that the fuzzer starts from inputs that pass the readers' first checks. Run it after
// a format changes: build/tests/fuzz/fuzz_write_seeds tests/fuzz/corpus (it replaces seed_* files
// only; the regression inputs of findings, named after the finding, stay).
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "framework/core/context.h"
#include "framework/core/safetensors.h"
#include "quant/method.h"
#include "quant/policy.h"
#include "quant/quantizer.h"
#include "tests/support/image_files.h"
#include "train/sync/demo_codec.h"

using namespace qtrain;
using namespace qtrain::testing;
namespace fs = std::filesystem;

namespace {

fs::path corpus;

void seed(const std::string& target, const std::string& name, const Bytes& bytes) {
  const fs::path dir = corpus / target;
  fs::create_directories(dir);
  write_file((dir / ("seed_" + name)).string(), bytes);
}

Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

Bytes read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Bytes gzipped(const Bytes& plain, const fs::path& scratch) {
  gzFile f = gzopen(scratch.c_str(), "wb");
  gzwrite(f, plain.data(), static_cast<unsigned>(plain.size()));
  gzclose(f);
  return read_bytes(scratch);
}

std::string file_name_of(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

// quant_payload: [variant, rows (2 bytes), column - 1, step, error feedback] + a payload encode wrote
// for rows x column values, an empty span (n = 0) included: its payloads are the regression inputs of
// the null pointers an empty span passed to memcpy and memset (docs/fuzzing.md).
void quant_payload_seeds() {
  Context ctx = Context::cpu(1, 1);
  uint8_t index = 0;  // of the variant among payload_method_variants(), which lists them in this order
  for (const QuantMethodInfo* method : quant_methods()) {
    if (!method->payload) continue;
    for (const std::string& variant : method->variants) {
      const std::unique_ptr<Quantizer> q = make_quantizer(parse_method_entry(variant));
      for (const auto& [rows, column] : {std::pair<int64_t, int64_t>{4, 8}, {3, 5}, {0, 1}}) {
        const int64_t n = rows * column;
        std::vector<float> x(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          x[static_cast<size_t>(i)] = static_cast<float>(std::sin(1.7 * i + 0.3) * (1 + i % 3));
        QuantState state(5, 0, 1);
        Bytes payload(q->max_encoded_bytes(n, column));
        payload.resize(q->encode(ctx, x, column, state, payload));
        Bytes input(6 + payload.size());
        input[0] = index;
        input[1] = static_cast<uint8_t>(rows);
        input[3] = static_cast<uint8_t>(column - 1);
        input[4] = 3;
        input[5] = static_cast<uint8_t>(q->error_feedback());
        std::copy(payload.begin(), payload.end(), input.begin() + 6);
        seed("quant_payload", file_name_of(variant) + "_n" + std::to_string(n), input);
      }
      ++index;
    }
  }
}

// demo_payload: [chunk (2 bytes), topk - 1, sign | (ranks - 1) << 1, tensor sizes (2 + 1 bytes)] + the
// payloads encode wrote for every rank: fp32 values with one-byte indices, signs with two-byte
// indices over 2 ranks, and every coefficient of chunks of 7.
void demo_payload_seeds() {
  Context ctx = Context::cpu(1, 1);
  struct Case {
    const char* name;
    int64_t chunk, topk;
    bool sign;
    int ranks;
  };
  for (const Case& c : {Case{"values_u8", 64, 4, false, 1}, Case{"signs_u16_two_ranks", 300, 10, true, 2},
                        Case{"every_coefficient", 7, 7, false, 1}}) {
    const int64_t a = 200, b = 37;
    const std::vector<demo::ArenaSpan> tensors = {{0, a}, {a + 3, b}};
    demo::Codec codec(tensors, {.chunk = c.chunk, .topk = c.topk, .sign = c.sign, .beta = 0.5f}, Device::cpu());
    Bytes input = {static_cast<uint8_t>((c.chunk - 1) & 0xff),
                   static_cast<uint8_t>((c.chunk - 1) >> 8),
                   static_cast<uint8_t>(c.topk - 1),
                   static_cast<uint8_t>((c.sign ? 1 : 0) | (c.ranks - 1) << 1),
                   static_cast<uint8_t>(a),
                   0,
                   static_cast<uint8_t>(b)};
    for (int r = 0; r < c.ranks; ++r) {
      std::vector<float> m(a + 3 + b, 0.0f), g(a + 3 + b);
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + r));
      Bytes payload(codec.payload_bytes());
      codec.encode(ctx, m.data(), g.data(), payload.data());
      input.insert(input.end(), payload.begin(), payload.end());
    }
    seed("demo_payload", c.name, input);
  }
}

void safetensors_seeds(const fs::path& scratch) {
  Tensor a = Tensor::zeros({2, 3}, DType::f32);
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = 0.5f * static_cast<float>(i) - 1;
  Tensor b = Tensor::zeros({4}, DType::u8);
  Tensor c = Tensor::zeros({0, 5}, DType::i32);
  Tensor d = Tensor::zeros({}, DType::f64);
  const fs::path file = scratch / "seed.safetensors";
  save_safetensors(file.string(), {{"w", a}, {"b", b}}, {{"step", "12"}, {"config", "name: x"}});
  seed("safetensors", "two_tensors", read_bytes(file));
  save_safetensors(file.string(), {{"empty", c}, {"scalar", d}, {"w", a}}, {});
  seed("safetensors", "empty_and_scalar", read_bytes(file));
  // Without qtrain's CRC entries, as other writers (PyTorch's safetensors) produce them.
  const std::string json = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  Bytes plain(8, 0);
  plain[0] = static_cast<uint8_t>(json.size());
  plain.insert(plain.end(), json.begin(), json.end());
  plain.insert(plain.end(), 8, 0x3f);
  seed("safetensors", "no_crc", plain);
}

// config: the shipped configs, and some with --set assignments after NUL bytes.
void config_seeds(const fs::path& configs) {
  for (const auto& entry : fs::directory_iterator(configs))
    if (entry.path().extension() == ".yaml") seed("config", entry.path().stem().string(), read_bytes(entry.path()));
  const Bytes mnist = read_bytes(configs / "mnist_mlp.yaml");
  auto with_sets = [&](const std::vector<std::string>& sets) {
    Bytes b = mnist;
    for (const std::string& s : sets) {
      b.push_back(0);
      b.insert(b.end(), s.begin(), s.end());
    }
    return b;
  };
  seed("config", "mnist_mlp_sets", with_sets({"train.epochs=2", "quantization.method=qsgd", "quantization.bits=4"}));
  seed("config", "mnist_mlp_set_list", with_sets({"model.layers.0.units=8", "data.augment={horizontal_flip: true}"}));
  seed("config", "minimal", bytes_of("optimizer: {type: sgd, lr: 0.1}\n"));
}

void idx_seeds(const fs::path& scratch) {
  const Bytes images = idx_images_bytes(Bytes(2 * 3 * 4, 17), 2, 3, 4);
  const Bytes labels = idx_labels_bytes({3, 1, 4});
  seed("idx", "images", images);
  seed("idx", "labels", labels);
  seed("idx", "images_gz", gzipped(images, scratch / "i.gz"));
  seed("idx", "labels_gz", gzipped(labels, scratch / "l.gz"));
}

// cifar: [options, side, padding, limit] + records.
void cifar_seeds() {
  Bytes ten{0x0c, 31, 4, 0};  // cifar10, random_crop 32 with padding 4, flip
  append_cifar_record(ten, {7}, cifar_pixels(0));
  seed("cifar", "cifar10_crop_flip", ten);
  Bytes hundred{0x01, 0, 0, 0};  // cifar100, fine labels
  append_cifar_record(hundred, {19, 99}, cifar_pixels(1));
  seed("cifar", "cifar100", hundred);
  Bytes coarse{0x07, 23, 2, 1};  // cifar100 coarse labels, crop 24 with padding 2, limit 1
  append_cifar_record(coarse, {3, 42}, cifar_pixels(2));
  seed("cifar", "cifar100_coarse_crop", coarse);
}

// an4: [options] transcription NUL fileids NUL audio (wav/r.raw, s.sph and w.wav hold the audio).
Bytes pcm(int samples, bool big_endian) {
  Bytes b;
  for (int i = 0; i < samples; ++i) {
    const auto v = static_cast<uint16_t>(static_cast<int16_t>(std::lround(6000 * std::sin(0.11 * i))));
    if (big_endian)
      b.insert(b.end(), {static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)});
    else
      b.insert(b.end(), {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8)});
  }
  return b;
}

void put_le(Bytes& b, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void an4_seeds() {
  auto input = [](uint8_t options, const std::string& transcription, const std::string& fileids, const Bytes& audio) {
    Bytes b{options};
    b.insert(b.end(), transcription.begin(), transcription.end());
    b.push_back(0);
    b.insert(b.end(), fileids.begin(), fileids.end());
    b.push_back(0);
    b.insert(b.end(), audio.begin(), audio.end());
    return b;
  };
  seed("an4", "raw", input(0, "<s> YES </s> (r)\n", "r\n", pcm(480, true)));
  std::string header =
      "NIST_1A\n   256\nsample_count -i 600\nsample_rate -i 16000\nchannel_count -i 1\n"
      "sample_n_bytes -i 2\nsample_byte_format -s2 10\nsample_coding -s3 pcm\nend_head\n";
  header.resize(256, ' ');
  Bytes sphere(header.begin(), header.end());
  const Bytes samples = pcm(600, true);
  sphere.insert(sphere.end(), samples.begin(), samples.end());
  seed("an4", "sphere_and_raw", input(2, "<s> TWO B </s> (s)\nGO (r)\n", "s\nr\n", sphere));
  Bytes wav{'R', 'I', 'F', 'F'};
  const Bytes data = pcm(450, false);
  put_le(wav, static_cast<uint32_t>(36 + data.size()), 4);
  for (char c : std::string("WAVEfmt ")) wav.push_back(static_cast<uint8_t>(c));
  put_le(wav, 16, 4);
  put_le(wav, 1, 2);
  put_le(wav, 1, 2);
  put_le(wav, 16000, 4);
  put_le(wav, 32000, 4);
  put_le(wav, 2, 2);
  put_le(wav, 16, 2);
  for (char c : std::string("data")) wav.push_back(static_cast<uint8_t>(c));
  put_le(wav, static_cast<uint32_t>(data.size()), 4);
  wav.insert(wav.end(), data.begin(), data.end());
  seed("an4", "wav", input(1, "<s> RUBOUT G M E F THREE NINE </s> (w)\n", "w\n", wav));
}

void jpeg_seeds() {
  Bytes gray(8 * 8);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i * 4);
  seed("jpeg", "gray_8x8", encode_jpeg(gray, 8, 8, 1, 90));
  Bytes rgb;
  for (int i = 0; i < 16 * 8; ++i) rgb.insert(rgb.end(), {static_cast<uint8_t>(i), static_cast<uint8_t>(255 - i), 90});
  seed("jpeg", "rgb_16x8", encode_jpeg(rgb, 16, 8, 3, 50));
  Bytes cmyk;
  for (int i = 0; i < 8 * 8; ++i)
    cmyk.insert(cmyk.end(), {static_cast<uint8_t>(i), 30, 200, static_cast<uint8_t>(i * 3)});
  seed("jpeg", "cmyk_8x8", encode_jpeg(cmyk, 8, 8, 4, 75));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_FOLDER (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  corpus = argv[1];
  const fs::path source = fs::path(QTRAIN_SOURCE_DIR);
  const fs::path scratch = fs::temp_directory_path() / ("qtrain_fuzz_seeds_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  quant_payload_seeds();
  demo_payload_seeds();
  safetensors_seeds(scratch);
  config_seeds(source / "configs");
  idx_seeds(scratch);
  cifar_seeds();
  an4_seeds();
  jpeg_seeds();
  fs::remove_all(scratch);
  std::printf("seed corpus written to %s\n", corpus.c_str());
  return 0;
}
