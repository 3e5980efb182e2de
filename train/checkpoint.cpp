// Training checkpoints over safetensors.
#include "train/checkpoint.h"

#include <set>

#include "framework/core/safetensors.h"

namespace qtrain {
namespace {
constexpr const char* kFormat = "qtrain-checkpoint-1";

int64_t parse_count(const SafetensorsFile& f, const std::string& path, const std::string& key) {
  const std::string v = f.metadata_value(key);
  try {
    size_t used = 0;
    const long long n = std::stoll(v, &used);
    if (used == v.size() && n >= 0) return n;
  } catch (const std::exception&) {
  }
  input_error("{}: corrupt checkpoint: metadata '{}' = '{}' is not a non-negative integer", path, key, v);
}
}  // namespace

void save_checkpoint(const std::string& path, Net& net, Optimizer& optimizer,
                     const std::vector<NamedTensor>& sync_state, const TrainingPosition& position, uint64_t seed,
                     const std::string& resolved_config, const std::string& evaluate) {
  std::vector<NamedTensor> tensors;
  for (const ParamEntry& e : net.param_entries()) tensors.push_back({e.name, net.params().view(e.offset, e.shape)});
  for (const ParamEntry& e : net.buffer_entries()) tensors.push_back({e.name, net.buffers().view(e.offset, e.shape)});
  for (auto& [name, t] : optimizer.state()) tensors.push_back({"optimizer/" + name, t});
  for (const NamedTensor& s : sync_state) tensors.push_back({"sync/" + s.name, s.tensor});
  std::map<std::string, std::string> meta{
      {"format", kFormat},
      {"step", std::to_string(position.step)},
      {"epoch", std::to_string(position.epoch)},
      {"batch_in_epoch", std::to_string(position.batch_in_epoch)},
      {"world_size", std::to_string(position.world_size)},
      {"seed", std::to_string(seed)},
      {"optimizer", optimizer.type()},
      {"config", resolved_config},
  };
  if (!evaluate.empty()) meta["evaluate"] = "sync/" + evaluate;
  save_safetensors(path, tensors, meta);
}

TrainingPosition load_checkpoint(const std::string& path, Net& net, Optimizer* optimizer,
                                 const std::vector<NamedTensor>& sync_state) {
  SafetensorsFile f(path);
  if (f.metadata_value("format") != kFormat)
    input_error("{}: not a qtrain checkpoint (format '{}', expected '{}')", path, f.metadata_value("format"), kFormat);
  for (const ParamEntry& e : net.param_entries()) {
    Tensor view = net.params().view(e.offset, e.shape);
    f.read_into(e.name, view);
  }
  for (const ParamEntry& e : net.buffer_entries()) {
    Tensor view = net.buffers().view(e.offset, e.shape);
    f.read_into(e.name, view);
  }
  if (optimizer) {
    if (f.metadata_value("optimizer") != optimizer->type())
      input_error("{}: checkpoint was written by optimizer '{}' but the config uses '{}'", path,
                  f.metadata_value("optimizer"), optimizer->type());
    for (auto& [name, t] : optimizer->state()) f.read_into("optimizer/" + name, t);
    for (const NamedTensor& s : sync_state) {
      Tensor t = s.tensor;
      f.read_into("sync/" + s.name, t);
    }
  }
  // A tensor nobody read means a checkpoint of another model (or optimizer configuration) whose
  // shared names happen to fit: loading only those would give a silently different network.
  std::set<std::string> read;
  for (const ParamEntry& e : net.param_entries()) read.insert(e.name);
  for (const ParamEntry& e : net.buffer_entries()) read.insert(e.name);
  if (optimizer) {
    for (auto& [name, t] : optimizer->state()) read.insert("optimizer/" + name);
    for (const NamedTensor& s : sync_state) read.insert("sync/" + s.name);
  }
  for (const std::string& name : f.names()) {
    const bool optimizer_state = name.rfind("optimizer/", 0) == 0 || name.rfind("sync/", 0) == 0;
    if (read.count(name) == 0 && !(optimizer_state && optimizer == nullptr))
      input_error(
          "{}: the checkpoint holds tensor '{}', which this {} does not have; it was written by another "
          "model or configuration",
          path, name, optimizer_state ? "optimizer configuration" : "model");
  }
  TrainingPosition p;
  if (optimizer == nullptr && f.metadata().count("evaluate")) {
    Tensor params = net.params();
    f.read_into(f.metadata_value("evaluate"), params);
    p.global_parameters = true;
  }
  p.step = parse_count(f, path, "step");
  p.epoch = parse_count(f, path, "epoch");
  p.batch_in_epoch = parse_count(f, path, "batch_in_epoch");
  if (f.metadata().count("world_size")) p.world_size = parse_count(f, path, "world_size");
  if (f.metadata().count("config")) p.config = f.metadata_value("config");
  return p;
}

}  // namespace qtrain
