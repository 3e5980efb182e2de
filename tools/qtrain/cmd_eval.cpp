// `qtrain eval RUN_DIR [--checkpoint FILE] [--set key=value ...]`: test loss and accuracy of a trained run
// (and the character / word error rates of a speech run).
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "train/trainer.h"
#include "layers/registry.h"
#include "tools/qtrain/commands.h"

namespace qtrain::cli {

void add_eval_command(CLI::App& app) {
  struct Args {
    std::string run_dir, checkpoint;
    std::vector<std::string> overrides;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a trained run on its test set");
  cmd->add_option("run_dir", args->run_dir, "Run directory (holds config.resolved.yaml and checkpoint.safetensors)")
      ->required();
  cmd->add_option("--checkpoint", args->checkpoint, "Checkpoint file (default RUN_DIR/checkpoint.safetensors)");
  cmd->add_option("--set", args->overrides, "Override a config key, e.g. --set data.path=... (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);  // one value per --set; repeat the flag for more
  cmd->callback([args] {
    namespace fs = std::filesystem;
    const std::string config = (fs::path(args->run_dir) / "config.resolved.yaml").string();
    if (!fs::exists(config))
      input_error("eval: {} has no config.resolved.yaml; is it a qtrain run directory?", args->run_dir);
    const std::string checkpoint =
        args->checkpoint.empty() ? (fs::path(args->run_dir) / "checkpoint.safetensors").string() : args->checkpoint;
    RunConfig rc = parse_run_config(config, args->overrides);
    const Device device = select_device(rc.device, 0);
    Net net(rc.model, DType::f32, device, layer_registry(), loss_registry());
    const TrainingPosition pos = load_checkpoint(checkpoint, net, nullptr);
    std::unique_ptr<Dataset> test = open_dataset(rc.data, Split::test);
    // train's check, so that a run whose config was edited gets its clear error instead of the net's
    // internal shape check.
    check_net_fits_dataset(net, *test, rc.data.dataset, config);
    net.loss_function().set_vocabulary(test->vocabulary());
    LoaderOptions lo;
    lo.batch_size = rc.data.eval_batch_size;
    lo.shuffle = false;
    lo.workers = loader_workers(rc.data);
    Loader loader(*test, lo);
    Context ctx = make_context(device, rc.seed, rc.train.threads);
    const EvalResult r = evaluate(net, ctx, loader);
    std::printf("%s: step %lld%s, %lld test samples, loss %.4f, accuracy %.2f%%\n", checkpoint.c_str(),
                static_cast<long long>(pos.step),
                pos.global_parameters ? " (the sync strategy's global parameters)" : "",
                static_cast<long long>(r.samples), r.loss, 100 * r.accuracy);
    if (!std::isnan(r.cer))
      std::printf("character error rate %.2f%%, word error rate %.2f%%\n", 100 * r.cer, 100 * r.wer);
  });
}

}  // namespace qtrain::cli
