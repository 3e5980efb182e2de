// Parsing of the top-level config sections (name, seed, device, model, train, output).
#include "train/run_config.h"

#include <filesystem>

namespace qtrain {

namespace {

TrainConfig parse_train(ConfigNode section) {
  TrainConfig t;
  t.epochs = section.get_int("epochs", t.epochs, 1, 1000000);
  t.max_steps = section.get_int("max_steps", t.max_steps, 0, INT64_MAX);
  t.log_every_steps = section.get_int("log_every_steps", t.log_every_steps, 1, INT64_MAX);
  t.threads = static_cast<int>(section.get_int("threads", t.threads, 0, 1024));
  t.eval_every_epoch = section.get<bool>("eval_every_epoch", t.eval_every_epoch);
  section.finish();
  return t;
}

OutputConfig parse_output(ConfigNode section, const std::string& name) {
  OutputConfig o;
  o.dir = section.get<std::string>("dir", "runs/" + name);
  if (o.dir.empty()) section.fail("dir", "must not be empty");
  o.checkpoint_every_epochs = section.get_int("checkpoint_every_epochs", o.checkpoint_every_epochs, 0, INT64_MAX);
  o.checkpoint_every_steps = section.get_int("checkpoint_every_steps", o.checkpoint_every_steps, 0, INT64_MAX);
  o.progress = section.get_choice("progress", o.progress, {"auto", "bar", "lines", "none"});
  section.finish();
  return o;
}

}  // namespace

RunConfig parse_run_config(const std::string& file, const std::vector<std::string>& overrides) {
  LoadedConfig loaded = load_config_file(file, overrides);
  RunConfig rc;
  rc.file = file;
  rc.resolved = loaded.root;
  ConfigNode root(loaded.root, "", loaded.source);
  rc.name = root.get<std::string>("name", std::filesystem::path(file).stem().string());
  // The default run directory is runs/<name>: "." or ".." would put a run's files into runs/ or the
  // working directory.
  if (rc.name.empty() || rc.name.find('/') != std::string::npos || rc.name == "." || rc.name == "..")
    root.fail("name", fmt::format("must be a non-empty name without '/', and not '.' or '..', got '{}'", rc.name));
  rc.seed = static_cast<uint64_t>(root.get_int("seed", 1, 0, INT64_MAX));
  rc.device = root.get_choice("device", rc.device, {"cpu", "cuda", "auto"});
  ConfigNode data = root.child("data");
  rc.data = parse_data_config(data);
  rc.model = parse_model_config(root.child("model"));
  rc.optimizer = root.child("optimizer");
  rc.train = parse_train(root.child("train"));
  rc.output = parse_output(root.child("output"), rc.name);
  ConfigNode quantization = root.child("quantization");
  rc.quantization = QuantizationConfig::parse(quantization);
  ConfigNode communication = root.child("communication");
  rc.transport = TransportConfig::parse(communication);
  rc.exchange = ExchangeConfig::parse(communication);
  communication.finish();
  rc.sync.options = root.child("sync");
  root.finish();  // before the required-section check, so that a misspelt section is named as such
  if (!root.has("optimizer")) root.fail("optimizer", "is required, e.g. optimizer: {type: sgd, lr: 0.1}");
  return rc;
}

}  // namespace qtrain
