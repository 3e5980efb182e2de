// `qtrain bench-data CONFIG [--set data.key=value ...] [--batches N] [--split train|test]`: the input
// pipeline alone. Opens the config's data section, runs the loader (with the training augmentation on
// the train split, and data.workers threads) for N batches after one warm-up batch, and prints
// samples/s plus a checksum of the batches (identical for any worker count: a determinism check).
#include <chrono>
#include <cstdio>

#include "data/dataset.h"
#include "data/loader.h"
#include "tools/qtrain/commands.h"

namespace qtrain::cli {

void add_bench_data_command(CLI::App& app) {
  struct Args {
    std::string config, split = "train";
    std::vector<std::string> overrides;
    int64_t batches = 20;
    uint64_t seed = 1;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench-data", "Measure the data loader alone (reading, decoding, augmentation)");
  cmd->add_option("config", args->config, "Config file; only its data section is read")->required();
  cmd->add_option("--set", args->overrides, "Override a config key, e.g. --set data.workers=4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--batches", args->batches, "Timed batches (after one warm-up batch)")->check(CLI::Range(1, 1000000));
  cmd->add_option("--split", args->split, "train (augmented) or test")->check(CLI::IsMember({"train", "test"}));
  cmd->add_option("--seed", args->seed, "Seed of the shuffle and augmentation")->check(kNonNegative);
  cmd->callback([args] {
    LoadedConfig loaded = load_config_file(args->config, args->overrides);
    ConfigNode root(loaded.root, "", loaded.source);
    ConfigNode section = root.child("data");
    const DataConfig config = parse_data_config(section);
    const Split split = args->split == "train" ? Split::train : Split::test;
    const std::unique_ptr<Dataset> dataset = open_dataset(config, split);
    LoaderOptions o;
    o.batch_size = split == Split::train ? config.batch_size : config.eval_batch_size;
    o.shuffle = split == Split::train && config.shuffle;
    o.seed = args->seed;
    o.prefetch = config.prefetch;
    o.augment = split == Split::train;
    o.workers = loader_workers(config);
    Loader loader(*dataset, o);
    if (loader.batches_per_epoch() < 1)
      input_error("bench-data: no batch of {} in {} samples", o.batch_size, dataset->size());
    double checksum = 0;
    int64_t batches = 0, samples = 0, epoch = 0;
    auto next = [&]() {
      std::optional<Batch> b = loader.next();
      if (!b) {
        loader.start_epoch(++epoch);
        b = loader.next();
      }
      const float* x = b->x.data<float>();
      for (int64_t i = 0; i < b->x.numel(); ++i) checksum += x[i];
      return b->x.dim(0);
    };
    loader.start_epoch(0);
    next();  // warm-up: threads started, files cached
    const auto t0 = std::chrono::steady_clock::now();
    for (; batches < args->batches; ++batches) samples += next();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "bench-data: %s %s, %d worker(s), %lld batches of %lld: %.1f samples/s (%.2f ms per batch), "
        "checksum %.6e\n",
        config.dataset.c_str(), args->split.c_str(), o.workers, static_cast<long long>(batches),
        static_cast<long long>(o.batch_size), static_cast<double>(samples) / seconds,
        1000 * seconds / static_cast<double>(batches), checksum);
  });
}

}  // namespace qtrain::cli
