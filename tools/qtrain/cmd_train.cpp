// `qtrain train CONFIG [--set key=value ...] [--resume RUN_DIR]`
#include <filesystem>

#include "train/trainer.h"
#include "tools/qtrain/commands.h"

namespace qtrain::cli {

void add_train_command(CLI::App& app, const MpiRuntime& mpi) {
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    std::string resume;
    int64_t check_replicas = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model from a YAML config");
  cmd->add_option("config", args->config,
                  "YAML config (e.g. configs/mnist_mlp.yaml); with --resume, defaults to RUN_DIR/config.resolved.yaml");
  cmd->add_option("--set", args->overrides, "Override a config key, e.g. --set train.epochs=2 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);  // one value per --set; repeat the flag for more
  cmd->add_option("--resume", args->resume, "Continue the run in RUN_DIR from its checkpoint")->type_name("RUN_DIR");
  cmd->add_option("--debug-check-replicas", args->check_replicas,
                  "Every N steps, verify that all ranks hold bit-identical parameters (a checksum allgather)")
      ->type_name("N")
      ->check(kNonNegative);
  cmd->callback([args, &mpi] {
    std::string config = args->config;
    if (config.empty()) {
      if (args->resume.empty()) input_error("train: give a CONFIG file, or --resume RUN_DIR");
      config = (std::filesystem::path(args->resume) / "config.resolved.yaml").string();
    }
    RunConfig rc = parse_run_config(config, args->overrides);
    TrainOptions options;
    options.resume_dir = args->resume;
    options.rank = mpi.rank();
    options.world_size = mpi.size();
    options.local_rank = mpi.local_rank();
    options.local_size = mpi.local_size();
    options.host = mpi.host();
    options.check_replicas_every = args->check_replicas;
    Trainer trainer(std::move(rc), options);
    trainer.run();
  });
}

}  // namespace qtrain::cli
