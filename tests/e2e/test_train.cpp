// End-to-end training: exact resume (bit for bit on the CPU, also with CIFAR augmentation on worker
// threads), checkpoint contents, and an MNIST subset that must reach a stated accuracy (the CTest entry
// test_e2e_train_mnist, "Skipped" when data/mnist is absent).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "framework/core/file_io.h"
#include "train/metrics.h"
#include "framework/core/safetensors.h"
#include "train/trainer.h"
#include "layers/registry.h"
#include "tests/support/idx_files.h"
#include "tests/support/image_files.h"
#include "tests/support/real_data.h"
#include "tests/support/temp_dir.h"

using namespace qtrain;
using qtrain::testing::TempDir;

namespace {

// 320 training and 64 test images of synthetic MNIST-format data in dir/data, as small_config reads them.
void write_small_mnist(const TempDir& dir) {
  std::filesystem::create_directories(dir.file("data"));
  qtrain::testing::write_synthetic_mnist(dir.file("data"), 320, 64);
}

std::string small_config(const TempDir& dir, const std::string& optimizer) {
  return dir.write("run.yaml", R"(name: e2e
device: cpu
data: {dataset: mnist, path: )" + dir.file("data") +
                                   R"(, batch_size: 32, eval_batch_size: 64}
model:
  input: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: dropout, p: 0.2}
    - {type: dense, units: 32}
    - {type: relu}
    - {type: dropout, p: 0.3}
    - {type: dense, units: 10}
  loss: softmax_cross_entropy
optimizer: )" + optimizer + R"(
train: {epochs: 3, threads: 1}
output: {progress: none}
)");
}

std::vector<float> checkpoint_values(const std::string& path) {
  SafetensorsFile f(path);
  std::vector<float> all;
  for (const std::string& name : f.names()) {
    Tensor t = f.read(name);
    if (t.dtype() == DType::f32) all.insert(all.end(), t.data<float>(), t.data<float>() + t.numel());
    if (t.dtype() == DType::f64) all.insert(all.end(), t.data<double>(), t.data<double>() + t.numel());
  }
  return all;
}

TrainSummary train(const std::string& config, std::vector<std::string> overrides, const std::string& resume = "") {
  RunConfig rc = parse_run_config(config, overrides);
  TrainOptions options;
  options.resume_dir = resume;
  Trainer trainer(std::move(rc), options);
  return trainer.run();
}

}  // namespace

TEST_CASE("N steps equal N/2 steps + resume + N/2 steps, bit for bit", "[e2e][resume]") {
  // 320 samples / batch 32 = 10 steps per epoch: the split at step 7 is mid-epoch and the run
  // crosses an epoch boundary after it (new shuffle, same dropout keys by step).
  for (const std::string& optimizer :
       {std::string("{type: rmsprop, lr: 0.003, schedule: {type: cosine, warmup_steps: 3}}"),
        std::string("{type: adam, lr: 0.001, weight_decay: 0.0001}"),
        std::string("{type: sgd, lr: 0.05, momentum: 0.9, nesterov: true}")}) {
    TempDir dir;
    write_small_mnist(dir);
    const std::string config = small_config(dir, optimizer);
    train(config, {"train.max_steps=14", "output.dir=" + dir.file("full")});
    train(config, {"train.max_steps=7", "output.dir=" + dir.file("split")});
    REQUIRE(SafetensorsFile(dir.file("split/checkpoint.safetensors")).metadata_value("step") == "7");
    const TrainSummary resumed = train(config, {"train.max_steps=14"}, dir.file("split"));
    REQUIRE(resumed.steps == 14);
    const auto a = checkpoint_values(dir.file("full/checkpoint.safetensors"));
    const auto b = checkpoint_values(dir.file("split/checkpoint.safetensors"));
    REQUIRE(a.size() == b.size());
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    // And a different seed really gives different parameters (the comparison can fail).
    train(config, {"train.max_steps=14", "seed=2", "output.dir=" + dir.file("other")});
    REQUIRE(checkpoint_values(dir.file("other/checkpoint.safetensors")) != a);
  }
}

TEST_CASE("powersgd: N steps equal N/2 steps + resume + N/2 steps, bit for bit", "[e2e][resume][powersgd]") {
  // A world of one still compresses. From step 3 on, each weight's Q (the warm start) and residual
  // change every step; the resume at step 7 must read them back from the rank file.
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.05, momentum: 0.9}");
  const std::vector<std::string> psgd = {"quantization.method=powersgd", "quantization.rank=2",
                                         "quantization.start_iter=3", "quantization.min_numel=0"};
  auto with = [&](std::vector<std::string> o) {
    o.insert(o.end(), psgd.begin(), psgd.end());
    return o;
  };
  train(config, with({"train.max_steps=14", "output.dir=" + dir.file("full")}));
  train(config, with({"train.max_steps=7", "output.dir=" + dir.file("split")}));
  const SafetensorsFile rank_file(dir.file("split/checkpoint.rank0.step7.safetensors"));
  const std::vector<std::string> names = rank_file.names();
  CHECK(std::count(names.begin(), names.end(), "exchange/dense1.weight/powersgd/q") == 1);
  CHECK(std::count(names.begin(), names.end(), "exchange/dense1.weight/powersgd/residual") == 1);
  // A rank file of a version before sync strategies, whose names had no "exchange/" prefix, resumes too.
  std::filesystem::copy(dir.file("split"), dir.file("legacy"));
  {
    std::vector<NamedTensor> unprefixed;
    for (const std::string& name : names) unprefixed.push_back({name.substr(name.find('/') + 1), rank_file.read(name)});
    save_safetensors(dir.file("legacy/checkpoint.rank0.step7.safetensors"), unprefixed, rank_file.metadata());
  }
  const TrainSummary resumed = train(config, with({"train.max_steps=14"}), dir.file("split"));
  REQUIRE(resumed.steps == 14);
  const auto a = checkpoint_values(dir.file("full/checkpoint.safetensors"));
  const auto b = checkpoint_values(dir.file("split/checkpoint.safetensors"));
  REQUIRE(a.size() == b.size());
  REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  train(config, with({"train.max_steps=14"}), dir.file("legacy"));
  REQUIRE(checkpoint_values(dir.file("legacy/checkpoint.safetensors")) == a);
  // The compression changes the training (the comparison above is not of fp32 runs).
  train(config, {"train.max_steps=14", "output.dir=" + dir.file("fp32")});
  REQUIRE(checkpoint_values(dir.file("fp32/checkpoint.safetensors")) != a);
}

TEST_CASE("demo: a resume at a step continues bit for bit, with the momentum in the rank file", "[e2e][demo][resume]") {
  // DeMo in a world of one still compresses: the momentum keeps what its top-k did not send, and a
  // resume at step 7 must read it back from the rank file. Both payload variants, weight decay on.
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.002, weight_decay: 0.001}");
  for (const std::string sign : {"false", "true"}) {
    INFO("sync.sign " << sign);
    const std::vector<std::string> demo = {"sync.type=demo", "sync.topk=3", "sync.chunk=40", "sync.momentum=0.9",
                                           "sync.sign=" + sign};
    auto with = [&](std::vector<std::string> o) {
      o.insert(o.end(), demo.begin(), demo.end());
      return o;
    };
    const std::string full = dir.file("full" + sign), split = dir.file("split" + sign);
    train(config, with({"train.max_steps=14", "output.dir=" + full}));
    train(config, with({"train.max_steps=7", "output.dir=" + split}));
    const SafetensorsFile rank_file(split + "/checkpoint.rank0.step7.safetensors");
    REQUIRE(rank_file.names() == std::vector<std::string>{"demo/momentum"});
    // The same checkpoint with the momentum zeroed: its resume must differ (the comparison can fail).
    const std::string zeroed = dir.file("zeroed" + sign);
    std::filesystem::copy(split, zeroed);
    {
      Tensor m = rank_file.read("demo/momentum");
      REQUIRE(checkpoint_values(split + "/checkpoint.rank0.step7.safetensors") != std::vector<float>(m.numel(), 0.0f));
      m.zero_();
      save_safetensors(zeroed + "/checkpoint.rank0.step7.safetensors", {{"demo/momentum", m}}, rank_file.metadata());
    }
    const TrainSummary resumed = train(config, with({"train.max_steps=14"}), split);
    REQUIRE(resumed.steps == 14);
    REQUIRE(checkpoint_values(split + "/checkpoint.safetensors") ==
            checkpoint_values(full + "/checkpoint.safetensors"));
    REQUIRE(checkpoint_values(split + "/checkpoint.rank0.step14.safetensors") ==
            checkpoint_values(full + "/checkpoint.rank0.step14.safetensors"));
    train(config, with({"train.max_steps=14"}), zeroed);
    REQUIRE(checkpoint_values(zeroed + "/checkpoint.safetensors") !=
            checkpoint_values(full + "/checkpoint.safetensors"));
  }
}

TEST_CASE("demo: each step moves every parameter by the learning rate times the sign of the decoded update",
          "[e2e][demo]") {
  // The optimizer-free step of the paper, through plain SGD: theta - lr * sign(Q), Q in {-1, 0, +1}.
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.0625}");
  train(config, {"train.max_steps=1", "output.dir=" + dir.file("one"), "sync.type=demo", "sync.topk=2"});
  RunConfig rc = parse_run_config(config, {});
  Net net(rc.model, DType::f32, Device::cpu(), layer_registry(), loss_registry());
  net.init_parameters(rc.seed);
  const SafetensorsFile f(dir.file("one/checkpoint.safetensors"));
  int64_t moved = 0, total = 0;
  for (const ParamEntry& e : net.param_entries()) {
    const Tensor after = f.read(e.name);
    const float* before = net.params().data<float>() + e.offset;
    for (int64_t i = 0; i < e.numel; ++i) {
      const float step = before[i] - after.data<float>()[i];
      // lr is a power of two: theta -/+ lr rounds once, to within half an ulp of theta.
      const float expected = std::abs(step) < 0.03125f ? 0.0f : (step > 0 ? 0.0625f : -0.0625f);
      REQUIRE(std::abs(step - expected) <= std::max(std::abs(before[i]), 0.0625f) * 1.2e-7f);
      moved += expected != 0.0f;
      ++total;
    }
  }
  CHECK(moved > total / 2);  // almost every value gets a sign: the summed chunks' inverse DCT is dense
}

TEST_CASE("demo: bad settings are refused naming the key", "[e2e][demo]") {
  TempDir dir;
  write_small_mnist(dir);
  const std::string sgd = "{type: sgd, lr: 0.01}";
  auto refused = [&](const std::string& optimizer, std::vector<std::string> overrides, const std::string& key) {
    overrides.push_back("sync.type=demo");
    overrides.push_back("output.dir=" + dir.file("bad"));
    INFO(key);
    REQUIRE_THROWS_WITH(train(small_config(dir, optimizer), overrides), Catch::Contains(key));
  };
  refused(sgd, {"sync.chunk=0"}, "sync.chunk");
  refused(sgd, {"sync.chunk=2000"}, "sync.chunk");
  refused(sgd, {"sync.topk=0"}, "sync.topk");
  refused(sgd, {"sync.chunk=16", "sync.topk=17"}, "sync.topk");
  refused(sgd, {"sync.momentum=1"}, "sync.momentum");
  refused(sgd, {"sync.momentum=-0.1"}, "sync.momentum");
  refused(sgd, {"sync.signs=true"}, "sync.signs");
  refused("{type: adam, lr: 0.001}", {}, "optimizer.type");
  refused("{type: sgd, lr: 0.01, momentum: 0.9}", {}, "optimizer.momentum");
  refused("{type: sgd, lr: 0.01, clip_norm: 1}", {}, "optimizer.clip_norm");
  refused(sgd, {"quantization.method=qsgd"}, "quantization.method");
}

TEST_CASE("resuming mid-epoch with fewer batches per epoch is an error naming the checkpoint", "[e2e][resume]") {
  // 320 samples / batch 32: the checkpoint stops after batch 7 of epoch 1. With batch 128 an epoch
  // has 3 batches; the loader's internal check used to fire instead.
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.05}");
  train(config, {"train.max_steps=7", "output.dir=" + dir.file("split")});
  // Another batch size is refused by name: the position counts batches of the old size. The refused
  // run must leave the run's config alone (it used to overwrite config.resolved.yaml, which the next
  // --resume reads).
  const std::string resolved = dir.file("split/config.resolved.yaml");
  const auto before = read_whole_file(resolved);
  REQUIRE_THROWS_WITH(train(config, {"data.batch_size=128"}, dir.file("split")),
                      Catch::Contains("the checkpoint was written with data.batch_size 32, this run has 128"));
  REQUIRE(read_whole_file(resolved) == before);
  REQUIRE_THROWS_WITH(train(config, {"seed=5"}, dir.file("split")),
                      Catch::Contains("the checkpoint was written with seed 1, this run has 5"));
  REQUIRE_THROWS_WITH(train(config, {"model.layers.1.p=0.5"}, dir.file("split")),
                      Catch::Contains("a resume continues exactly only with the same model"));
  // The same batch size on a smaller dataset (64 samples: 2 batches) still reaches the position check.
  std::filesystem::create_directories(dir.file("small"));
  qtrain::testing::write_synthetic_mnist(dir.file("small"), 64, 64);
  REQUIRE_THROWS_WITH(train(config, {"data.path=" + dir.file("small")}, dir.file("split")),
                      Catch::Contains("split/checkpoint.safetensors: the checkpoint stopped after batch 7 of epoch 1, "
                                      "but an epoch now has 2 batches"));
}

TEST_CASE("a residual batch-norm net resumes bit for bit, with its running statistics", "[e2e][resume][graph]") {
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = dir.write("res.yaml", R"(name: e2e-res
device: cpu
data: {dataset: mnist, path: )" + dir.file("data") + R"(, batch_size: 32, eval_batch_size: 64}
model:
  input: [1, 28, 28]
  layers:
    - {type: batchnorm2d, name: bn0}
    - {type: flatten}
    - {type: dense, units: 16, name: stem}
    - repeat: 2
      name: block
      layers:
        - {type: dense, units: 16, name: fc}
        - {type: batchnorm1d, name: bn}
        - {type: relu}
        - {type: add, inputs: [relu1, input]}
    - {type: dense, units: 10}
  loss: softmax_cross_entropy
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 3, threads: 1}
output: {progress: none}
)");
  train(config, {"train.max_steps=14", "output.dir=" + dir.file("full")});
  train(config, {"train.max_steps=7", "output.dir=" + dir.file("split")});
  train(config, {"train.max_steps=14"}, dir.file("split"));
  const auto a = checkpoint_values(dir.file("full/checkpoint.safetensors"));
  const auto b = checkpoint_values(dir.file("split/checkpoint.safetensors"));
  REQUIRE(a.size() == b.size());
  REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);

  // The running statistics are in the checkpoint under PyTorch's names, have moved away from their
  // initial values, and load back into a net.
  SafetensorsFile f(dir.file("full/checkpoint.safetensors"));
  const std::vector<std::string> names = f.names();
  for (const char* name :
       {"bn0.running_mean", "bn0.running_var", "block1.bn.running_mean", "block2.bn.running_var", "block2.bn.weight"})
    REQUIRE(std::count(names.begin(), names.end(), std::string(name)) == 1);
  const Tensor mean = f.read("block1.bn.running_mean");
  REQUIRE(mean.numel() == 16);
  double moved = 0;
  for (int i = 0; i < 16; ++i) moved += std::abs(mean.data<float>()[i]);
  REQUIRE(moved > 0);
  RunConfig rc = parse_run_config(config, {});
  Net net(rc.model, DType::f32, Device::cpu(), layer_registry(), loss_registry());
  load_checkpoint(dir.file("full/checkpoint.safetensors"), net, nullptr);
  const ParamEntry& e = net.buffer_entries()[2];
  REQUIRE(e.name == "block1.bn.running_mean");
  REQUIRE(std::memcmp(net.buffers().data<float>() + e.offset, mean.data<float>(), 16 * sizeof(float)) == 0);
}

TEST_CASE("augmented CIFAR training resumes bit for bit (augmentation keyed by seed, epoch, sample)",
          "[e2e][resume][augment]") {
  // 5 batch files of 16 records = 80 samples / batch 16 = 5 steps per epoch; the split at step 6 is
  // mid-epoch. The resumed run reads its config back from config.resolved.yaml.
  TempDir dir;
  std::filesystem::create_directories(dir.file("data"));
  for (uint32_t b = 1; b <= 5; ++b) {
    qtrain::testing::Bytes file;
    for (uint32_t i = 16 * (b - 1); i < 16 * b; ++i)
      qtrain::testing::append_cifar_record(file, {static_cast<uint8_t>(i % 10)}, qtrain::testing::cifar_pixels(i));
    qtrain::testing::write_file(dir.file("data/data_batch_" + std::to_string(b) + ".bin"), file);
  }
  qtrain::testing::Bytes test;
  for (uint32_t i = 0; i < 8; ++i)
    qtrain::testing::append_cifar_record(test, {static_cast<uint8_t>(i % 10)}, qtrain::testing::cifar_pixels(200 + i));
  qtrain::testing::write_file(dir.file("data/test_batch.bin"), test);
  const std::string config = dir.write("run.yaml", R"(name: e2e-cifar
device: cpu
data:
  dataset: cifar10
  path: )" + dir.file("data") + R"(
  batch_size: 16
  workers: 2
  augment: {random_crop: {size: 28, padding: 4}, horizontal_flip: true}
model:
  input: [3, 28, 28]
  layers: [{type: flatten}, {type: dense, units: 10}]
optimizer: {type: sgd, lr: 0.01, momentum: 0.9}
train: {epochs: 3, threads: 1}
output: {progress: none}
)");
  train(config, {"train.max_steps=12", "output.dir=" + dir.file("full")});
  train(config, {"train.max_steps=6", "output.dir=" + dir.file("split")});
  train(dir.file("split/config.resolved.yaml"), {"train.max_steps=12"}, dir.file("split"));
  const auto a = checkpoint_values(dir.file("full/checkpoint.safetensors"));
  const auto b = checkpoint_values(dir.file("split/checkpoint.safetensors"));
  REQUIRE(a.size() == b.size());
  REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  // One worker gives the same run; other augmentation settings give another (the comparison can fail).
  train(config, {"train.max_steps=12", "data.workers=1", "output.dir=" + dir.file("one")});
  REQUIRE(checkpoint_values(dir.file("one/checkpoint.safetensors")) == a);
  train(config, {"train.max_steps=12", "data.augment.horizontal_flip=false", "data.augment.random_crop.padding=0",
                 "output.dir=" + dir.file("less")});
  REQUIRE(checkpoint_values(dir.file("less/checkpoint.safetensors")) != a);
}

TEST_CASE("run directory holds metrics, resolved config, log and checkpoint", "[e2e]") {
  TempDir dir;
  write_small_mnist(dir);
  const TrainSummary s =
      train(small_config(dir, "{type: sgd, lr: 0.05}"), {"train.epochs=2", "output.dir=" + dir.file("run")});
  REQUIRE(s.epochs_completed == 2);
  for (const char* f : {"metrics.csv", "config.resolved.yaml", "train.log", "checkpoint.safetensors"})
    REQUIRE(std::filesystem::exists(dir.file(std::string("run/") + f)));
  std::ifstream metrics(dir.file("run/metrics.csv"));
  std::string line;
  int rows = 0;
  while (std::getline(metrics, line)) ++rows;
  REQUIRE(rows == 3);  // header + one row per epoch
  // The synthetic classes are separable: the pipeline must learn them.
  REQUIRE(s.test.accuracy > 0.9);
  // A corrupt checkpoint stops --resume with a clear message.
  std::ofstream(dir.file("run/checkpoint.safetensors"), std::ios::binary | std::ios::trunc) << "garbage!";
  REQUIRE_THROWS_WITH(train(small_config(dir, "{type: sgd, lr: 0.05}"), {"train.epochs=3"}, dir.file("run")),
                      Catch::Contains("checkpoint.safetensors") && Catch::Contains("corrupt checkpoint"));
}

TEST_CASE("resuming with another number of ranks is an error naming both", "[e2e][resume]") {
  // The checkpoint of one rank, relabelled as written by 4: resuming used to continue at its position
  // in the epoch (which means other samples for another world size) and ignore the residuals of the
  // missing ranks.
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.05}");
  train(config, {"train.max_steps=7", "output.dir=" + dir.file("run")});
  const std::string path = dir.file("run/checkpoint.safetensors");
  std::vector<NamedTensor> tensors;
  std::map<std::string, std::string> meta;
  {
    SafetensorsFile f(path);
    REQUIRE(f.metadata_value("world_size") == "1");
    for (const std::string& name : f.names()) tensors.push_back({name, f.read(name)});
    meta = f.metadata();
  }
  meta["world_size"] = "4";
  save_safetensors(path, tensors, meta);
  REQUIRE_THROWS_WITH(train(config, {"train.max_steps=14"}, dir.file("run")),
                      Catch::Contains(path + ": the checkpoint was written by 4 rank(s) but this run has 1"));
  // Checkpoints of earlier versions have no world_size and still resume.
  meta.erase("world_size");
  save_safetensors(path, tensors, meta);
  REQUIRE(train(config, {"train.max_steps=14"}, dir.file("run")).steps == 14);
}

TEST_CASE("rank files are committed with the checkpoint: uncommitted ones are ignored, mismatched ones refused",
          "[e2e][resume]") {
  // Error-feedback residuals (onebit) live in per-rank files named by their step, and a resume reads
  // the files of the checkpoint's step: a crash between the writes must never resume with residuals
  // of another step.
  namespace fs = std::filesystem;
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.05, momentum: 0.9}");
  auto run = [&](const std::string& name, int steps, const std::string& resume = "") {
    std::vector<std::string> overrides{"quantization.method=onebit", "train.max_steps=" + std::to_string(steps)};
    if (resume.empty()) overrides.push_back("output.dir=" + dir.file(name));
    return train(config, overrides, resume);
  };
  auto files = [&](const std::string& name) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir.file(name))) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::vector<std::string> at7{"checkpoint.rank0.step7.safetensors", "checkpoint.safetensors",
                                     "config.resolved.yaml", "metrics.csv", "train.log"};
  run("full", 14);
  run("later", 10);  // a rank file of step 10, to play one written before a crash prevented its commit
  const std::string step10 = dir.file("later/checkpoint.rank0.step10.safetensors");
  REQUIRE(fs::exists(step10));

  // A crash after the rank files of step 10 but before the commit: the resume reads step 7's file and
  // continues bit for bit, and its own checkpoint then removes the rank files of other steps.
  run("split", 7);
  REQUIRE(files("split") == at7);
  fs::copy_file(step10, dir.file("split/checkpoint.rank0.step10.safetensors"));
  REQUIRE(run("split", 14, dir.file("split")).steps == 14);
  REQUIRE(checkpoint_values(dir.file("split/checkpoint.safetensors")) ==
          checkpoint_values(dir.file("full/checkpoint.safetensors")));
  REQUIRE(checkpoint_values(dir.file("split/checkpoint.rank0.step14.safetensors")) ==
          checkpoint_values(dir.file("full/checkpoint.rank0.step14.safetensors")));
  REQUIRE(!fs::exists(dir.file("split/checkpoint.rank0.step7.safetensors")));
  REQUIRE(!fs::exists(dir.file("split/checkpoint.rank0.step10.safetensors")));

  // The file of the checkpoint's step is missing.
  run("missing", 7);
  fs::remove(dir.file("missing/checkpoint.rank0.step7.safetensors"));
  REQUIRE_THROWS_WITH(run("missing", 14, dir.file("missing")),
                      Catch::Contains("checkpoint.rank0.step7.safetensors is missing"));

  // The single file per rank of earlier versions: read when it is of the checkpoint's step, refused when
  // it is of another (what a crash between the two writes of such a version left).
  run("old", 7);
  fs::rename(dir.file("old/checkpoint.rank0.step7.safetensors"), dir.file("old/checkpoint.rank0.safetensors"));
  REQUIRE(run("old", 14, dir.file("old")).steps == 14);
  REQUIRE(checkpoint_values(dir.file("old/checkpoint.safetensors")) ==
          checkpoint_values(dir.file("full/checkpoint.safetensors")));
  REQUIRE(!fs::exists(dir.file("old/checkpoint.rank0.safetensors")));
  run("torn", 7);
  fs::remove(dir.file("torn/checkpoint.rank0.step7.safetensors"));
  fs::copy_file(step10, dir.file("torn/checkpoint.rank0.safetensors"));
  REQUIRE_THROWS_WITH(run("torn", 14, dir.file("torn")),
                      Catch::Contains(dir.file("torn/checkpoint.rank0.safetensors")) &&
                          Catch::Contains("rank 0 at step 10, but rank 0 resumes the checkpoint of step 7"));
}

TEST_CASE("a resumed run rewrites metrics.csv from its checkpoint: no cut line, no repeated row", "[e2e][resume]") {
  // 320 samples / batch 32: rows at steps 10, 20, 30. The run is stopped at step 20, continued to 30,
  // then set back to its step-20 checkpoint with the last row cut in half: a crash after writing
  // (part of) the row of step 30 but before its checkpoint. Resuming used to append the new row to
  // the cut one (a line of 38 cells that compare and predict refuse) and would repeat rows.
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.05}");
  const std::string run = dir.file("run");
  train(config, {"train.max_steps=20", "output.dir=" + run});
  std::filesystem::copy_file(run + "/checkpoint.safetensors", dir.file("step20.safetensors"));
  train(config, {"train.max_steps=30"}, run);
  std::filesystem::copy_file(dir.file("step20.safetensors"), run + "/checkpoint.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(run + "/metrics.csv", std::filesystem::file_size(run + "/metrics.csv") - 40);
  train(config, {"train.max_steps=30"}, run);
  std::ifstream in(run + "/metrics.csv");
  std::string line;
  std::getline(in, line);
  REQUIRE(line == MetricsWriter::header());
  std::vector<std::string> steps;
  while (std::getline(in, line)) {
    REQUIRE(std::count(line.begin(), line.end(), ',') == 22);
    steps.push_back(line.substr(line.find(',') + 1, line.find(',', line.find(',') + 1) - line.find(',') - 1));
  }
  REQUIRE(steps == std::vector<std::string>{"10", "20", "30"});
  // A fresh run in the same directory starts a new file rather than appending to the old rows.
  train(config, {"train.max_steps=10", "output.dir=" + run});
  std::ifstream again(run + "/metrics.csv");
  int rows = -1;
  while (std::getline(again, line)) ++rows;
  REQUIRE(rows == 1);
}

TEST_CASE("a quantization override that matches no layer is an error naming it", "[e2e]") {
  // A typo in a glob (here a type the MLP does not have) used to leave those gradients at the section's
  // method without a word.
  TempDir dir;
  std::filesystem::create_directories(dir.file("data"));
  qtrain::testing::write_synthetic_mnist(dir.file("data"), 64, 64);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.05}");
  const std::vector<std::string> common{"output.dir=" + dir.file("run"), "train.max_steps=1",
                                        "quantization.method=fp32"};
  std::vector<std::string> typo = common;
  typo.push_back("quantization.overrides=[{match: {type: dens}, method: fp16}]");
  REQUIRE_THROWS_WITH(train(config, typo),
                      Catch::Contains("quantization.overrides.0 (match name '', type 'dens') matches no layer"));
  std::vector<std::string> good = common;
  good.push_back("quantization.overrides=[{match: {type: dense, name: dense2}, method: fp16}]");
  REQUIRE(train(config, good).steps == 1);
}

TEST_CASE("an unusable output.dir is an error naming it, before training", "[e2e]") {
  // These escaped as std::filesystem::filesystem_error ("qtrain: unexpected error"), and a folder
  // named checkpoint.safetensors failed only after the whole training.
  TempDir dir;
  std::filesystem::create_directories(dir.file("data"));
  qtrain::testing::write_synthetic_mnist(dir.file("data"), 64, 64);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.05}");
  std::ofstream(dir.file("a_file")) << "x";
  REQUIRE_THROWS_WITH(train(config, {"output.dir=" + dir.file("a_file/run")}),
                      Catch::Contains(dir.file("a_file/run") + ": cannot create the run directory (output.dir)"));
  for (const char* name : {"metrics.csv", "train.log", "checkpoint.safetensors"}) {
    const std::string run = dir.file(std::string("run_") + name);
    std::filesystem::create_directories(run + "/" + name);
    REQUIRE_THROWS_WITH(train(config, {"output.dir=" + run}), Catch::Contains(run + "/" + name + ": is not a file"));
  }
}

TEST_CASE("MNIST subset reaches 95% test accuracy in 2 epochs", "[e2e][mnist][real][real:mnist]") {
  const std::string mnist = qtrain::testing::require_real_data("mnist");
  TempDir dir;
  const TrainSummary s =
      train(std::string(QTRAIN_SOURCE_DIR) + "/configs/mnist_mlp.yaml",
            {"data.path=" + mnist, "data.limit_train=25600", "data.limit_test=2000", "train.epochs=2",
             "output.dir=" + dir.file("run"), "output.progress=none", "device=cpu"});
  INFO("test accuracy " << s.test.accuracy);
  REQUIRE(s.test.samples == 2000);
  REQUIRE(s.test.accuracy >= 0.95);
}

TEST_CASE("resuming a run that is already finished reports its accuracy, not 0", "[e2e][resume]") {
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.05}");
  const TrainSummary first = train(config, {"train.max_steps=7", "output.dir=" + dir.file("run")});
  REQUIRE(first.test.accuracy > 0);
  const TrainSummary again = train(config, {"train.max_steps=7"}, dir.file("run"));
  REQUIRE(again.steps == 7);
  REQUIRE(again.test.accuracy == first.test.accuracy);
  REQUIRE(again.test.loss == first.test.loss);
}

TEST_CASE("diloco with H = 1, outer lr 1 and no momentum follows the per-step exchange", "[e2e][diloco]") {
  // DiLoCo in this setting is SGD on the exchange's mean: theta_global - (theta_global - theta_local) is
  // theta_local wherever the difference is exact, which Sterbenz's lemma guarantees when a step changes
  // a parameter by less than half its magnitude (so in this world of one, bit for bit). With several
  // ranks the mean of differences and the mean of gradients round differently: close, not identical.
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: sgd, lr: 0.05}");
  train(config, {"train.max_steps=10", "output.dir=" + dir.file("step")});
  train(config, {"train.max_steps=10", "output.dir=" + dir.file("diloco"), "sync.type=diloco", "sync.inner_steps=1",
                 "sync.outer.lr=1", "sync.outer.momentum=0", "sync.outer.nesterov=false"});
  const SafetensorsFile a(dir.file("step/checkpoint.safetensors")), b(dir.file("diloco/checkpoint.safetensors"));
  double worst = 0;
  for (const std::string& name : a.names()) {
    const Tensor x = a.read(name), y = b.read(name);
    for (int64_t i = 0; i < x.numel(); ++i)
      worst = std::max(worst, static_cast<double>(std::abs(x.data<float>()[i] - y.data<float>()[i])));
  }
  REQUIRE(worst == 0);
  // After an outer step the replica continues from the global parameters (an arena whose first tensor
  // is dense1.weight).
  const Tensor global = b.read("sync/diloco/global"), first = b.read("dense1.weight");
  REQUIRE(global.numel() > first.numel());
  REQUIRE(std::memcmp(global.raw(), first.raw(), first.nbytes()) == 0);
}

TEST_CASE("diloco: a resume inside an inner period continues bit for bit", "[e2e][diloco][resume]") {
  // H = 4 with Nesterov outer momentum and Adam inside: a checkpoint at step 7 holds the replica's own
  // parameters and Adam state beside the global parameters and the outer momentum.
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: adam, lr: 0.001}");
  const std::vector<std::string> dl = {"sync.type=diloco", "sync.inner_steps=4"};
  auto with = [&](std::vector<std::string> o) {
    o.insert(o.end(), dl.begin(), dl.end());
    return o;
  };
  train(config, with({"train.max_steps=14", "output.dir=" + dir.file("full")}));
  train(config, with({"train.max_steps=7", "output.dir=" + dir.file("split")}));
  const SafetensorsFile rank_file(dir.file("split/checkpoint.rank0.step7.safetensors"));
  const std::vector<std::string> names = rank_file.names();
  CHECK(std::count(names.begin(), names.end(), "replica/dense1.weight") == 1);
  CHECK(std::count(names.begin(), names.end(), "replica/optimizer/adam.exp_avg") == 1);
  train(config, with({"train.max_steps=14"}), dir.file("split"));
  REQUIRE(checkpoint_values(dir.file("split/checkpoint.safetensors")) ==
          checkpoint_values(dir.file("full/checkpoint.safetensors")));
  REQUIRE(checkpoint_values(dir.file("split/checkpoint.rank0.step14.safetensors")) ==
          checkpoint_values(dir.file("full/checkpoint.rank0.step14.safetensors")));
  // An evaluation of the checkpoint (step 14, inside an inner period) loads the global parameters.
  {
    RunConfig rc = parse_run_config(config, with({}));
    Net net(rc.model, DType::f32, Device::cpu(), layer_registry(), loss_registry());
    const TrainingPosition pos = load_checkpoint(dir.file("full/checkpoint.safetensors"), net, nullptr);
    REQUIRE(pos.global_parameters);
    const SafetensorsFile f(dir.file("full/checkpoint.safetensors"));
    const Tensor global = f.read("sync/diloco/global"), own = f.read("dense1.weight");
    REQUIRE(std::memcmp(net.params().raw(), global.raw(), global.nbytes()) == 0);
    REQUIRE(std::memcmp(net.params().raw(), own.raw(), own.nbytes()) != 0);  // rank 0's replica differs
  }
  // A bad inner_steps is refused naming the key.
  REQUIRE_THROWS_WITH(train(config, {"sync.type=diloco", "sync.inner_steps=0", "output.dir=" + dir.file("bad")}),
                      Catch::Contains("sync.inner_steps"));
}

TEST_CASE("streaming diloco: a resume while a fragment's exchange is in flight continues bit for bit",
          "[e2e][diloco][resume]") {
  // Two fragments synced in turn every 4 steps (fragment 0 at steps 4, 8, ..., fragment 1 at 2, 6, ...),
  // each merged 2 steps after it is sent, into replicas that trained on meanwhile (mix 0.5). A checkpoint
  // at step 5 falls inside fragment 0's flight (sent at 4, merged at 6): it holds the flight's averaged
  // pseudo-gradient and its merge step, and the resumed run merges it at 6 as the uninterrupted one does.
  TempDir dir;
  write_small_mnist(dir);
  const std::string config = small_config(dir, "{type: adam, lr: 0.001}");
  const std::vector<std::string> st = {"sync.type=diloco", "sync.inner_steps=4", "sync.fragments=2", "sync.overlap=2"};
  auto with = [&](std::vector<std::string> o) {
    o.insert(o.end(), st.begin(), st.end());
    return o;
  };
  train(config, with({"train.max_steps=13", "output.dir=" + dir.file("full")}));
  train(config, with({"train.max_steps=5", "output.dir=" + dir.file("split")}));
  {
    const SafetensorsFile f(dir.file("split/checkpoint.safetensors"));
    const Tensor merge_at = f.read("sync/diloco/merge_at");
    REQUIRE(merge_at.numel() == 2);
    CHECK(merge_at.data<double>()[0] == 6);  // fragment 0, sent at step 4
    CHECK(merge_at.data<double>()[1] == 0);  // fragment 1 merged at step 4 (sent at 2)
  }
  train(config, with({"train.max_steps=13"}), dir.file("split"));
  REQUIRE(checkpoint_values(dir.file("split/checkpoint.safetensors")) ==
          checkpoint_values(dir.file("full/checkpoint.safetensors")));
  REQUIRE(checkpoint_values(dir.file("split/checkpoint.rank0.step13.safetensors")) ==
          checkpoint_values(dir.file("full/checkpoint.rank0.step13.safetensors")));
  // The streaming keys are checked at start, each error naming its key.
  REQUIRE_THROWS_WITH(
      train(config, {"sync.type=diloco", "sync.inner_steps=4", "sync.overlap=4", "output.dir=" + dir.file("bad")}),
      Catch::Contains("sync.overlap"));
  REQUIRE_THROWS_WITH(
      train(config, {"sync.type=diloco", "sync.inner_steps=4", "sync.fragments=99", "output.dir=" + dir.file("bad")}),
      Catch::Contains("sync.fragments"));
  // Fragments' exchanges share the communicator: one must land before the next begins.
  REQUIRE_THROWS_WITH(train(config, {"sync.type=diloco", "sync.inner_steps=20", "sync.fragments=4", "sync.overlap=6",
                                     "output.dir=" + dir.file("bad")}),
                      Catch::Contains("sync.overlap") && Catch::Contains("(20 / 4 = 5 steps), got 6"));
  REQUIRE_THROWS_WITH(
      train(config, {"sync.type=diloco", "sync.inner_steps=1", "sync.fragments=2", "output.dir=" + dir.file("bad")}),
      Catch::Contains("sync.fragments"));
  REQUIRE_THROWS_WITH(train(config, {"sync.type=diloco", "sync.mix=1.5", "output.dir=" + dir.file("bad")}),
                      Catch::Contains("sync.mix"));
}
