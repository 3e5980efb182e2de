// RunConfig: the whole YAML config of a training run as typed structs, validated at start-up.
// Each section has one parser; sections owned by other folders (data/, optim/) are parsed by their
// own parse functions. Unknown keys anywhere are errors naming the key, file and line.
#pragma once

#include <string>
#include <vector>

#include "comm/transport_config.h"
#include "exchange/exchange_config.h"
#include "data/dataset.h"
#include "framework/core/config_node.h"
#include "framework/core/tensor.h"
#include "framework/model/model_config.h"
#include "quant/policy.h"

namespace qtrain {

struct TrainConfig {
  int64_t epochs = 1;
  int64_t max_steps = 0;          // stop after this many optimizer steps in total (0 = no limit)
  int64_t log_every_steps = 100;  // plain-text progress lines when stderr is not a terminal
  int threads = 0;                // CPU threads for BLAS (0 = all cores)
  bool eval_every_epoch = true;
};

struct OutputConfig {
  std::string dir;  // run directory (default runs/<name>)
  int64_t checkpoint_every_epochs = 1;
  int64_t checkpoint_every_steps = 0;  // 0 = only at epoch ends and at the end
  std::string progress = "auto";       // auto | bar | lines | none
};

// The `sync` section: how replicas synchronize (train/sync/).
// Read when the trainer builds the strategy (the registry of strategies stands above the config).
struct SyncConfig {
  std::string type = "every_step";  // filled in by the trainer from `options`
  ConfigNode options;
};

struct RunConfig {
  std::string name;
  uint64_t seed = 1;
  std::string device = "auto";  // cpu | cuda | auto
  DataConfig data;
  ModelConfig model;
  ConfigNode optimizer;  // parsed by make_optimizer / make_schedule
  TrainConfig train;
  OutputConfig output;
  QuantizationConfig quantization;  // fp32 everywhere when the section is absent
  // The `communication` section: the transport's keys and the exchange's.
  TransportConfig transport;
  ExchangeConfig exchange;
  SyncConfig sync;
  YAML::Node resolved;  // the config after --set overrides, written to config.resolved.yaml
  std::string file;     // where it came from
};

// Loads `file`, applies `overrides` ("a.b=value"), and validates every section except the layer
// blocks and the optimizer (validated when the Net and Optimizer are built, still before training).
RunConfig parse_run_config(const std::string& file, const std::vector<std::string>& overrides);

}  // namespace qtrain
