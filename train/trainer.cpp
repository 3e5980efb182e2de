// The training loop of one replica (see trainer.h).
#include "train/trainer.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cblas.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "comm/watchdog.h"
#include "framework/core/file_io.h"
#include "framework/core/memory_budget.h"
#include "framework/core/pinned_buffer.h"
#include "train/progress.h"
#include "train/rank_state.h"
#include "framework/core/safetensors.h"
#include "layers/registry.h"
#include "optim/clip.h"

namespace qtrain {
namespace fs = std::filesystem;

// A batch moved to the net's device and dtype; CPU f32 batches are used in place.
struct DeviceBatch {
  Tensor x, labels;
  SequenceTargets sequence;  // sequence datasets: lengths and targets stay on the CPU
};

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// FNV-1a over bytes: the checksums ranks compare (config at start-up, parameters in replica checks).
uint64_t fnv1a64(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Batches on a GPU go through device buffers kept from batch to batch: Tensor::to would allocate
// two buffers per step, and every cudaFree waits for the whole device. The host copies each batch into
// pinned memory and queues the upload on the compute stream, so the host never waits for it:
// - the device buffer is overwritten after the previous step's kernels that read it (the same stream);
// - the pinned copy is rewritten only after the previous upload from it is done: every step and every
//   evaluation batch reads its loss back from this stream (LossStats are host values) after its
//   upload, before the next batch comes.
class BatchStaging {
 public:
  DeviceBatch put(const Batch& b, Context& ctx) {
    DeviceBatch out{b.x, b.labels, {b.lengths, b.targets, b.target_lengths}};
    if (ctx.device().is_cuda()) {
      out.x = stage(x_, x_host_, b.x, ctx);
      out.labels = stage(labels_, labels_host_, b.labels, ctx);
    }
    return out;
  }

 private:
  static Tensor stage(Tensor& buffer, PinnedBuffer& host, const Tensor& src, Context& ctx) {
    QT_CHECK(src.device().is_cpu(), "batches come from the host, not {}", src.device().str());
    if (!buffer.defined() || buffer.numel() < src.numel() || buffer.dtype() != src.dtype())
      buffer = Tensor::empty({std::max<int64_t>(src.numel(), 1)}, src.dtype(), ctx.device());
    Tensor view = buffer.view(0, src.shape());
    const size_t bytes = src.nbytes();
    uint8_t* pinned = host.reserve(std::max<size_t>(bytes, 1));
    if (bytes > 0) std::memcpy(pinned, src.raw(), bytes);
    copy_async(ctx, view.raw(), pinned, bytes);
    return view;
  }
  Tensor x_, labels_;
  PinnedBuffer x_host_, labels_host_;
};

// The strategy's state that is the same on every rank: rank 0's checkpoint holds it.
std::vector<NamedTensor> shared_sync_state(const std::vector<SyncState>& state) {
  std::vector<NamedTensor> out;
  for (const SyncState& s : state)
    if (!s.per_rank) out.push_back({s.name, s.tensor});
  return out;
}

// Forward and loss of one batch: classification through Net::forward/loss, sequence batches (a
// sequence loss such as ctc) through forward_sequence/loss_sequence.
LossStats forward_and_loss(Net& net, Context& ctx, const DeviceBatch& b, bool training, bool with_gradient) {
  if (!net.has_sequence_loss()) {
    net.forward(ctx, b.x, training);
    return net.loss(ctx, b.labels, with_gradient);
  }
  net.forward_sequence(ctx, b.x, b.sequence.input_lengths, training);
  return net.loss_sequence(ctx, b.sequence, with_gradient);
}
}  // namespace

void check_net_fits_dataset(Net& net, const Dataset& data, const std::string& dataset_name,
                            const std::string& config_file) {
  if (data.sample_shape() != net.input_shape())
    input_error("{}: model.input is {} but the {} samples are {}", config_file, shape_str(net.input_shape()),
                dataset_name, shape_str(data.sample_shape()));
  if (net.has_sequence_loss() != data.is_sequence())
    input_error("{}: loss {} {} but dataset {} {}", config_file, net.loss_function().type(),
                net.has_sequence_loss() ? "needs sequences" : "needs class labels", dataset_name,
                data.is_sequence() ? "holds sequences (use loss: ctc)" : "holds class labels");
}

MemoryFootprint training_footprint(const NetSizes& sizes, const Shape& input, int64_t batch,
                                   const std::string& optimizer_label, int64_t optimizer_arrays) {
  const int64_t value = static_cast<int64_t>(dtype_size(DType::f32));
  MemoryFootprint f;
  f.items.push_back({"parameters", sizes.parameters * value});
  f.items.push_back({"gradients", sizes.parameters * value});
  f.items.push_back({optimizer_label, optimizer_arrays * sizes.parameters * value});
  f.items.push_back({"buffers", sizes.buffers * value});
  // For sequences a row is a frame: the batch's frames are only known per batch.
  f.items.push_back({fmt::format("activations and input (batch {})", batch),
                     batch * (sizes.activations_per_sample + shape_numel(input)) * value});
  return f;
}

EvalResult evaluate(Net& net, Context& ctx, Loader& loader) {
  loader.start_epoch(0);
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  LossStats errors;  // sequence tasks: edit distances
  BatchStaging staging;
  while (auto batch = loader.next()) {
    DeviceBatch b = staging.put(*batch, ctx);
    const LossStats s = forward_and_loss(net, ctx, b, /*training=*/false, /*with_gradient=*/false);
    loss_sum += s.loss_sum;
    correct += s.correct;
    count += s.count;
    errors.char_errors += s.char_errors;
    errors.chars += s.chars;
    errors.word_errors += s.word_errors;
    errors.words += s.words;
  }
  EvalResult r;
  r.samples = count;
  if (count > 0) {
    r.loss = loss_sum / static_cast<double>(count);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(count);
  }
  if (net.has_sequence_loss()) {
    r.cer = static_cast<double>(errors.char_errors) / static_cast<double>(std::max<int64_t>(errors.chars, 1));
    r.wer = static_cast<double>(errors.word_errors) / static_cast<double>(std::max<int64_t>(errors.words, 1));
  }
  return r;
}

Trainer::Trainer(RunConfig config, TrainOptions options) : config_(std::move(config)), options_(std::move(options)) {
  run_dir_ = options_.resume_dir.empty() ? config_.output.dir : options_.resume_dir;
  checkpoint_path_ = (fs::path(run_dir_) / "checkpoint.safetensors").string();

  // Everything that can be validated without data is validated first: model, optimizer, schedule keys.
  device_ = select_device(config_.device, options_.local_rank);
  ConfigNode opt_section = config_.optimizer;
  optimizer_ = make_optimizer(opt_section);
  // The large allocations to come, checked before any is made (a model that cannot fit fails here
  // with its sizes instead of being killed by the OOM killer).
  auto check_memory = [&](const NetSizes& sizes) {
    const int64_t batch = std::max(config_.data.batch_size, config_.data.eval_batch_size);
    const MemoryFootprint f = training_footprint(
        sizes, config_.model.input, batch, fmt::format("{} state", optimizer_->type()), optimizer_->state_arrays());
    // Ranks on one host share its memory; on GPUs each rank has its own.
    const int processes = device_.is_cuda() ? 1 : options_.local_size;
    check_memory_fits(f, available_memory(device_), processes, device_, config_.file);
  };
  net_ = std::make_unique<Net>(config_.model, DType::f32, device_, layer_registry(), loss_registry(), check_memory);
  // The transport comes next: everything after it may need the other ranks (config check, errors).
  comm_ = make_communicator(config_.transport, device_);
  QT_CHECK_EQ(comm_->size(), options_.world_size, "communicator size and MPI world size differ");
  YAML::Emitter emitter;
  emitter << config_.resolved;
  resolved_yaml_ = std::string(emitter.c_str()) + "\n";
  check_same_config();

  optimizer_->init(net_->params().numel(), DType::f32, device_);

  open_data();
  const int64_t steps_per_epoch = train_loader_->batches_per_epoch();
  if (steps_per_epoch == 0)
    input_error("{}: data.batch_size {} leaves no batch in an epoch of {} samples", config_.file,
                config_.data.batch_size, train_loader_->samples_per_epoch());
  // The schedule spans the configured epochs; train.max_steps only stops early, so a run stopped at
  // step k and resumed follows the same learning rates as one that never stopped.
  ConfigNode sched_section = config_.optimizer.child("schedule");
  std::string schedule_note;  // logged below, once the log exists
  schedule_ = make_schedule(sched_section, steps_per_epoch, steps_per_epoch * config_.train.epochs, &schedule_note);

  ctx_ = std::make_unique<Context>(make_context(device_, config_.seed, config_.train.threads));
  net_->init_parameters(config_.seed);
  build_sync();  // strategies that keep global parameters start from the initial ones

  prepare_run_dir();
  open_log();
  if (!schedule_note.empty()) log_->info("note: {}", schedule_note);
  if (!options_.resume_dir.empty()) resume(steps_per_epoch);
  // Only now, with a resume's checkpoint accepted: the next --resume reads this file, so a refused
  // resume must not leave its settings here.
  if (options_.rank == 0) write_file_atomically((fs::path(run_dir_) / "config.resolved.yaml").string(), resolved_yaml_);
}

// The datasets, checked against the model, and their loaders.
void Trainer::open_data() {
  train_set_ = open_dataset(config_.data, Split::train);
  test_set_ = open_dataset(config_.data, Split::test);
  check_net_fits_dataset(*net_, *train_set_, config_.data.dataset, config_.file);
  for (int i = 0; i < net_->num_layers(); ++i) {
    const Layer& layer = net_->layer(i);
    if (layer.needs_sequence_batches() && !train_set_->is_sequence())
      input_error(
          "{}: layer '{}' ({}) runs on sequences, but dataset {} holds fixed-size samples; it needs a "
          "sequence dataset (an4) and a sequence loss (ctc)",
          config_.file, layer.name(), layer.type(), config_.data.dataset);
  }
  net_->loss_function().set_vocabulary(train_set_->vocabulary());
  if (net_->output_shape()[0] != train_set_->num_classes())
    input_error("{}: the last layer produces {} scores but {} has {} classes", config_.file, net_->output_shape()[0],
                config_.data.dataset, train_set_->num_classes());

  LoaderOptions lo;
  lo.batch_size = config_.data.batch_size;
  lo.shuffle = config_.data.shuffle;
  lo.drop_last = config_.data.drop_last;
  lo.seed = config_.seed;
  lo.rank = comm_->rank();
  lo.world_size = comm_->size();
  lo.prefetch = config_.data.prefetch;
  lo.workers = loader_workers(config_.data);
  lo.augment = true;  // data.augment; the test split's dataset has no random transforms anyway
  train_loader_ = std::make_unique<Loader>(*train_set_, lo);
  LoaderOptions eo = lo;
  eo.batch_size = config_.data.eval_batch_size;
  eo.shuffle = false;
  eo.drop_last = false;
  eo.augment = false;
  eo.rank = 0;
  eo.world_size = 1;
  test_loader_ = std::make_unique<Loader>(*test_set_, eo);
}

// The synchronization of the replicas, also in a world of one: quantization then still applies (its
// effect on accuracy can be studied on one process).
std::vector<ExchangeTensor> exchange_tensors(const Net& net) {
  std::vector<ExchangeTensor> tensors;
  for (const ParamEntry& e : net.param_entries())
    tensors.push_back({e.name, e.layer_name, e.layer_type, e.offset, e.numel, e.shape.empty() ? 1 : e.shape.back(),
                       e.shape.size() >= 2 ? e.shape.front() : 0});
  return tensors;
}

void Trainer::build_sync() {
  std::vector<ExchangeTensor> tensors = exchange_tensors(*net_);
  tensors_of_layer_.assign(static_cast<size_t>(net_->num_layers()), {});
  for (size_t t = 0; t < tensors.size(); ++t)
    tensors_of_layer_[static_cast<size_t>(net_->param_entries()[t].layer_index)].push_back(static_cast<int>(t));
  // An override matching no layer is a typo in its glob: those gradients would silently keep the
  // section's method.
  for (size_t i = 0; i < config_.quantization.overrides.size(); ++i) {
    const QuantOverride& o = config_.quantization.overrides[i];
    bool used = false;
    for (const ParamEntry& e : net_->param_entries()) used = used || o.matches(e.layer_name, e.layer_type);
    if (!used)
      input_error(
          "{}: quantization.overrides.{} (match name '{}', type '{}') matches no layer with parameters in "
          "this model",
          o.where, i, o.name_pattern, o.type_pattern);
  }
  config_.sync.type = config_.sync.options.get_choice("type", config_.sync.type, sync_registry().names());
  SyncSetup setup{*comm_, device_, config_, config_.sync.options, std::move(tensors), net_->params()};
  sync_ = sync_registry().create(config_.sync.type, setup);
}

void Trainer::prepare_run_dir() {
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) input_error("{}: cannot create the run directory (output.dir): {}", run_dir_, ec.message());
  // Every file the run writes must be a file: a folder in its place would fail only at the first
  // checkpoint, after the training it was meant to keep.
  for (const char* name : {"config.resolved.yaml", "train.log", "metrics.csv", "checkpoint.safetensors"}) {
    const fs::path p = fs::path(run_dir_) / name;
    if (fs::exists(p, ec) && !fs::is_regular_file(p, ec))
      input_error("{}: is not a file; the run directory (output.dir) must hold its own files here", p.string());
  }
}

void Trainer::open_log() {
  // Rank 0 speaks for the job; the other ranks only report errors (through main()).
  if (options_.rank == 0) {
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>((fs::path(run_dir_) / "train.log").string());
    log_ = std::make_shared<spdlog::logger>("qtrain", spdlog::sinks_init_list{console, file});
  } else {
    log_ = std::make_shared<spdlog::logger>("qtrain");
  }
  log_->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %v");
  log_->flush_on(spdlog::level::info);
}

// Restores the checkpoint of --resume after checking that this run can continue it.
void Trainer::resume(int64_t steps_per_epoch) {
  if (!fs::exists(checkpoint_path_))
    input_error("--resume {}: no checkpoint.safetensors in that run directory", options_.resume_dir);
  // The strategy's state, named once: rank 0's checkpoint holds its shared part, the rank file the rest.
  const std::vector<SyncState> sync_state = sync_->state();
  start_ = load_checkpoint(checkpoint_path_, *net_, optimizer_.get(), shared_sync_state(sync_state));
  if (start_.world_size > 0 && start_.world_size != comm_->size())
    input_error(
        "{}: the checkpoint was written by {} rank(s) but this run has {}; resume with {} (its position in "
        "the epoch and the per-rank error-feedback state belong to that many)",
        checkpoint_path_, start_.world_size, comm_->size(), start_.world_size);
  check_resume_config();
  if (start_.batch_in_epoch > steps_per_epoch)
    input_error(
        "{}: the checkpoint stopped after batch {} of epoch {}, but an epoch now has {} batches; resume "
        "with the data.batch_size, dataset and number of ranks it was written with",
        checkpoint_path_, start_.batch_in_epoch, start_.epoch + 1, steps_per_epoch);
  load_rank_state(sync_state);
}

void Trainer::check_resume_config() {
  // A resume continues exactly only with what fixes the position and the random state: the seed, the
  // dataset and its batch size (the position within the epoch counts batches), and the model (a
  // changed activation or dropout fits the same parameters without a word). The rest (epochs,
  // max_steps, output, threads, ...) may change, as documented.
  if (start_.config.empty()) return;  // checkpoints of earlier versions did not record it
  YAML::Node written;
  try {
    written = load_yaml(start_.config);
  } catch (const YAML::Exception&) {
    input_error("{}: the config recorded in the checkpoint does not parse", checkpoint_path_);
  }
  // The written value of a key, or the parser's default when the config left it out.
  auto scalar_or = [](const YAML::Node& n, const std::string& fallback) {
    return n.IsDefined() && n.IsScalar() ? n.Scalar() : fallback;
  };
  auto flow = [](const YAML::Node& n) {
    YAML::Emitter e;
    e << YAML::Flow << n;
    return std::string(e.c_str());
  };
  const YAML::Node& stored = written;
  const YAML::Node data = stored["data"];
  const std::pair<const char*, std::pair<std::string, std::string>> keys[] = {
      {"seed", {scalar_or(stored["seed"], std::to_string(RunConfig{}.seed)), std::to_string(config_.seed)}},
      {"data.dataset", {scalar_or(data["dataset"], DataConfig{}.dataset), config_.data.dataset}},
      {"data.batch_size",
       {scalar_or(data["batch_size"], std::to_string(DataConfig{}.batch_size)),
        std::to_string(config_.data.batch_size)}},
      {"model", {flow(stored["model"]), flow(config_.resolved["model"])}},
  };
  for (const auto& [key, values] : keys)
    if (values.first != values.second)
      input_error(
          "--resume {}: the checkpoint was written with {} {}, this run has {}; a resume continues exactly "
          "only with the same {} (--set it back, or start a new run)",
          options_.resume_dir, key, values.first, values.second, key);
}

// The per-rank part of a checkpoint: the strategy's per-rank state, and where replicas differ
// between synchronizations, this rank's own parameters and optimizer state ("replica/...").
std::vector<NamedTensor> Trainer::rank_state(const std::vector<SyncState>& sync_state, int64_t step) {
  std::vector<NamedTensor> out;
  for (const SyncState& s : sync_state)
    if (s.per_rank) out.push_back({s.name, s.tensor});
  if (!sync_->replicas_identical(step))
    for (const ParamEntry& e : net_->param_entries())
      out.push_back({"replica/" + e.name, net_->params().view(e.offset, e.shape)});
  if (sync_->optimizer_state_per_rank())
    for (auto& [name, t] : optimizer_->state()) out.push_back({"replica/optimizer/" + name, t});
  return out;
}

// The name of the strategy's state that an evaluation of the checkpoint at `step` should load instead
// of rank 0's parameters: its global parameters where the replicas differ, else "".
std::string Trainer::evaluated_state(const std::vector<SyncState>& sync_state, int64_t step) {
  const Tensor* global = sync_->global_parameters();
  if (global == nullptr || sync_->replicas_identical(step)) return "";
  for (const SyncState& s : sync_state)
    if (!s.per_rank && s.tensor.raw() == global->raw()) return s.name;
  return "";
}

void Trainer::load_rank_state(const std::vector<SyncState>& sync_state) {
  std::vector<NamedTensor> state = rank_state(sync_state, start_.step);
  if (state.empty()) return;  // nothing per rank in this configuration
  const SafetensorsFile f = open_rank_state(run_dir_, options_.rank, start_.step);
  try {
    for (NamedTensor& s : state) {
      // Versions before synchronization strategies wrote the exchange's state without its prefix.
      const size_t slash = s.name.find('/');
      const bool unprefixed = !f.contains(s.name) && slash != std::string::npos && f.contains(s.name.substr(slash + 1));
      f.read_into(unprefixed ? s.name.substr(slash + 1) : s.name, s.tensor);
    }
  } catch (const InputError& e) {
    // The residuals' names and shapes follow the stripes and pieces of reduce-scatter + allgather.
    input_error(
        "{} (error-feedback residuals depend on the quantization, communication.algorithm, "
        "communication.piece_mb and communication.hierarchy: resume with the settings the checkpoint was "
        "written with)",
        e.what());
  }
}

void Trainer::check_same_config() {
  // Ranks that parsed different configs (a different file or --set on one host) would train
  // different models and hang or diverge later: compare a hash of the resolved config at start-up.
  const WatchActivity activity("start-up: comparing the ranks' configs");
  if (const auto d = comm_->first_disagreement(fnv1a64(resolved_yaml_.data(), resolved_yaml_.size())))
    input_error(
        "rank {} was started with a different config than rank 0 (resolved-config hashes {:016x} vs {:016x}); "
        "every rank must get the same config file and --set options",
        d->rank, d->value, d->rank0_value);
}

// Buffers (batch norm's running statistics) are computed by each rank on its own shard, so replicas'
// buffers drift apart between synchronizations. They are averaged over the ranks before every
// evaluation and every checkpoint (PyTorch DDP instead broadcasts rank 0's buffers each step; the
// average uses every shard). Training itself never reads them, so parameters stay bit-identical either
// way. Every rank gathers every rank's buffers and sums them in rank order, which makes the result
// bit-identical on all ranks (an MPI_Allreduce does not promise that). A world of one skips this.
void Trainer::sync_buffers() {
  if (comm_->size() == 1 || net_->buffer_entries().empty()) return;
  const WatchActivity activity("averaging the buffers (batch-norm statistics) over the ranks");
  ctx_->synchronize();
  Tensor& buffers = net_->buffers();
  QT_CHECK(buffers.dtype() == DType::f32, "buffer synchronization expects f32 buffers, not {}",
           dtype_name(buffers.dtype()));
  Tensor host = buffers.device().is_cpu() ? buffers : buffers.to(Device::cpu());
  const auto* bytes = static_cast<const uint8_t*>(host.raw());
  comm_->all_gather_bytes(*ctx_, std::span<const uint8_t>(bytes, host.nbytes()), buffer_gather_, buffer_sizes_,
                          buffer_offsets_);
  const int64_t n = host.numel();
  float* out = host.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int r = 0; r < comm_->size(); ++r) {
      QT_CHECK(buffer_sizes_[static_cast<size_t>(r)] == host.nbytes(), "rank {} sent {} bytes of buffers, expected {}",
               r, buffer_sizes_[static_cast<size_t>(r)], host.nbytes());
      float v;
      std::memcpy(&v, buffer_gather_.data() + buffer_offsets_[static_cast<size_t>(r)] + i * sizeof(float), sizeof v);
      sum += v;
    }
    out[i] = static_cast<float>(sum / comm_->size());
  }
  if (!buffers.device().is_cpu()) {
    buffers.copy_from(host);
    // copy_from runs on the legacy stream, and a pageable upload may return before its DMA lands; a
    // read back on that stream returns only after it, so the next kernel sees the averaged values.
    (void)buffers.view(0, {1}).to(Device::cpu());
  }
  if (options_.check_replicas_every > 0) {  // --debug-check-replicas: the averages must agree bit for bit
    if (const auto d = comm_->first_disagreement(fnv1a64(host.raw(), host.nbytes())))
      QT_FAIL("replica check: after averaging, the buffers of rank {} differ from rank 0's", d->rank);
  }
}

// Compares parameters only: buffers legitimately differ between the synchronizations of sync_buffers(),
// which checks them itself under --debug-check-replicas.
// Where the replicas agree, their parameters; where they differ between synchronizations, the
// strategy's global parameters, which every rank must hold alike at every step.
void Trainer::check_replicas(int64_t step) {
  const Tensor* global = sync_->global_parameters();
  const bool replicas = sync_->replicas_identical(step);
  if (!replicas && global == nullptr) return;  // nothing is meant to agree now
  const WatchActivity activity(fmt::format("replica check at step {}", step));
  ctx_->synchronize();
  const Tensor& checked = replicas ? net_->params() : *global;
  const Tensor host = checked.device().is_cpu() ? checked : checked.to(Device::cpu());
  if (const auto d = comm_->first_disagreement(fnv1a64(host.raw(), host.nbytes())))
    QT_FAIL("replica check at step {}: the {} of rank {} differ from rank 0's (checksums {:016x} vs {:016x})", step,
            replicas ? "parameters" : fmt::format("global parameters of sync.type {}", config_.sync.type), d->rank,
            d->value, d->rank0_value);
}

Trainer::~Trainer() = default;

// The test set on the model the run stands for: where replicas differ, the strategy's global parameters
// (swapped in for the evaluation), or rank 0's replica if it keeps none.
EvalResult Trainer::evaluate_model(int64_t step) {
  const Tensor* global = sync_->global_parameters();
  if (sync_->replicas_identical(step)) return evaluate(*net_, *ctx_, *test_loader_);
  if (global == nullptr) {
    log_info(fmt::format("note: the replicas differ at step {} (sync.type {}); the test figures are rank 0's", step,
                         config_.sync.type));
    return evaluate(*net_, *ctx_, *test_loader_);
  }
  log_info(fmt::format("note: evaluating the global parameters of sync.type {} at step {}", config_.sync.type, step));
  // The copies run outside the compute stream (Tensor::copy_from): the stream is drained around them.
  ctx_->synchronize();
  Tensor own = net_->params().clone();
  net_->params().copy_from(*global);
  const EvalResult r = evaluate(*net_, *ctx_, *test_loader_);
  ctx_->synchronize();
  net_->params().copy_from(own);
  return r;
}

void Trainer::log_info(const std::string& line) {
  if (options_.rank == 0) log_->info(line);
}

void Trainer::write_checkpoint(const TrainingPosition& position) {
  const WatchActivity activity(
      fmt::format("checkpoint at step {} (rank 0 writes while the others wait)", position.step));
  sync_buffers();  // in place, so a resumed run continues from the same buffers as one that never stopped
  ctx_->synchronize();
  // Rank 0's checkpoint holds the parameters, the optimizer state and the strategy's shared state; each
  // rank's own file holds what differs between ranks (rank_state()).
  TrainingPosition written = position;
  written.world_size = comm_->size();
  // Two phases (rank_state.h): every rank's own state for this step first, next to that of the last
  // committed checkpoint; then rank 0's checkpoint, whose rename commits the step. A crash in between
  // leaves the previous checkpoint with all of its rank files.
  const std::vector<SyncState> sync_state = sync_->state();
  const std::vector<NamedTensor> state = rank_state(sync_state, position.step);
  if (!state.empty()) save_rank_state(run_dir_, options_.rank, position.step, state);
  comm_->barrier();
  if (options_.rank == 0)
    save_checkpoint(checkpoint_path_, *net_, *optimizer_, shared_sync_state(sync_state), written, config_.seed,
                    resolved_yaml_, evaluated_state(sync_state, position.step));
  // Nobody continues (or exits) before the commit, and only then are the older rank files dropped.
  comm_->barrier();
  if (!state.empty()) remove_stale_rank_states(run_dir_, options_.rank, position.step);
}

TrainSummary Trainer::run() {
  const TrainConfig& tc = config_.train;
  const int64_t steps_per_epoch = train_loader_->batches_per_epoch();
  const int64_t max_steps = tc.max_steps > 0 ? tc.max_steps : INT64_MAX;
  // Rank 0 speaks for the job: only it opens (and may create) metrics.csv.
  std::unique_ptr<MetricsWriter> metrics;
  if (options_.rank == 0)
    metrics = std::make_unique<MetricsWriter>((fs::path(run_dir_) / "metrics.csv").string(), start_.step);
  // Rank 0 speaks for the job: the other ranks' progress would interleave with its own.
  Progress progress(options_.rank == 0 ? config_.output.progress : "none", tc.log_every_steps);
  log_start(steps_per_epoch);

  TrainingPosition pos = start_;
  const auto t_start = std::chrono::steady_clock::now();
  TrainSummary summary;
  summary.run_dir = run_dir_;
  bool stop = pos.step >= max_steps;

  for (int64_t epoch = pos.epoch; epoch < tc.epochs && !stop; ++epoch) {
    pos.epoch = epoch;
    train_loader_->start_epoch(epoch, pos.batch_in_epoch);
    EpochTally tally;
    tally.start = std::chrono::steady_clock::now();
    BatchStaging staging;
    for (;;) {
      ScopedPhase data_phase(tally.timers, Phase::data);
      std::optional<Batch> batch = train_loader_->next();
      if (!batch) break;
      DeviceBatch b = staging.put(*batch, *ctx_);
      data_phase.stop();

      train_step(b, pos, tally);
      const double elapsed = seconds_since(tally.start);
      // Global samples/s: every rank processes its own shard at the same pace.
      progress.update(epoch, tc.epochs, pos.batch_in_epoch, steps_per_epoch, pos.step, tally.loss_sum / tally.seen,
                      static_cast<double>(tally.correct) / tally.seen,
                      tally.seen * comm_->size() / std::max(elapsed, 1e-9), tally.exposed_s / std::max(elapsed, 1e-9));
      if (config_.output.checkpoint_every_steps > 0 && pos.step % config_.output.checkpoint_every_steps == 0)
        write_checkpoint(pos);
      if (pos.step >= max_steps) {
        stop = true;
        break;
      }
    }
    progress.clear();
    end_epoch(epoch, stop, tally, pos, summary, metrics.get(), t_start);
  }
  if (pos.step == start_.step && start_.step > 0) {
    // A resume of a run that had already reached its last step or epoch: nothing to train, but the
    // summary must still report the checkpoint's accuracy, which only an evaluation gives.
    log_info(
        fmt::format("nothing left to train: the checkpoint is at step {} (train.epochs {}, train.max_steps {}); "
                    "evaluating it",
                    pos.step, tc.epochs, tc.max_steps));
    sync_buffers();
    summary.test = evaluate_model(pos.step);
  }
  summary.steps = pos.step;
  summary.wall_time_s = seconds_since(t_start);
  log_info(fmt::format("done: {} steps in {:.1f}s, test accuracy {:.2f}%, run directory {}", summary.steps,
                       summary.wall_time_s, 100 * summary.test.accuracy, run_dir_));
  return summary;
}

// Where the ranks run, from every rank's host, local rank and device: one line per node, so that a
// user sees how a job was placed ("topology: 2 nodes x 2 ranks; node7: rank 0 (local 0, cuda:0), ...").
void Trainer::log_topology() {
  if (comm_->size() == 1) return;
  const std::string mine =
      fmt::format("{}\t{}\t{}", options_.host.empty() ? "?" : options_.host, options_.local_rank, device_.str());
  std::vector<uint8_t> all;
  std::vector<size_t> sizes, offsets;
  comm_->all_gather_bytes(*ctx_, {reinterpret_cast<const uint8_t*>(mine.data()), mine.size()}, all, sizes, offsets);
  if (options_.rank != 0) return;
  std::vector<std::string> hosts;                  // in order of first appearance
  std::vector<std::vector<std::string>> ranks_of;  // per host: "rank 0 (local 0, cpu)"
  for (size_t r = 0; r < sizes.size(); ++r) {
    const std::string entry(reinterpret_cast<const char*>(all.data() + offsets[r]), sizes[r]);
    const size_t a = entry.find('\t'), b = entry.find('\t', a + 1);
    const std::string host = entry.substr(0, a);
    const auto it = std::find(hosts.begin(), hosts.end(), host);
    const size_t h = static_cast<size_t>(it - hosts.begin());
    if (it == hosts.end()) {
      hosts.push_back(host);
      ranks_of.emplace_back();
    }
    ranks_of[h].push_back(
        fmt::format("rank {} (local {}, {})", r, entry.substr(a + 1, b - a - 1), entry.substr(b + 1)));
  }
  size_t most = 0, fewest = SIZE_MAX;
  for (const auto& r : ranks_of) most = std::max(most, r.size()), fewest = std::min(fewest, r.size());
  std::string line = fmt::format("topology: {} node(s) x {} rank(s){}, communicator {}", hosts.size(), most,
                                 most == fewest ? "" : fmt::format(" (from {})", fewest), comm_->name());
  for (size_t h = 0; h < hosts.size(); ++h) line += fmt::format("\n  {}: {}", hosts[h], fmt::join(ranks_of[h], ", "));
  log_info(line);
}

void Trainer::log_start(int64_t steps_per_epoch) {
  log_info(fmt::format("qtrain {}: run '{}' on {} (OpenBLAS {} kernels, {} threads), {} parameters, {} steps per epoch",
                       config_.file, config_.name, device_.str(), openblas_get_corename(), ctx_->cpu_threads(),
                       net_->num_parameters(), steps_per_epoch));
  if (options_.rank == 0) {
    std::string summary = net_->summary();
    if (!summary.empty() && summary.back() == '\n') summary.pop_back();
    log_info("model:\n" + summary);
  }
  log_topology();
  log_info(fmt::format("data parallel: {} rank(s) over {}, {}", comm_->size(), comm_->name(), sync_->summary()));
  if (options_.rank == 0) {
    std::string plan = sync_->describe();
    if (!plan.empty() && plan.back() == '\n') plan.pop_back();
    log_info(plan);
  }
  if (start_.step > 0)
    log_info(fmt::format("resumed from {} at step {} (epoch {}, batch {})", checkpoint_path_, start_.step,
                         start_.epoch + 1, start_.batch_in_epoch));
}

// One optimizer step on batch `b`: forward and loss, backward (the sync strategy sees each finished
// gradient: the per-step exchange overlaps backward), the optimizer's update, the strategy's turn after
// it, and the position moved on by one batch.
void Trainer::train_step(const DeviceBatch& b, TrainingPosition& pos, EpochTally& tally) {
  ctx_->set_step(static_cast<uint64_t>(pos.step));
  {
    ScopedPhase p(tally.timers, Phase::forward);
    const LossStats s = forward_and_loss(*net_, *ctx_, b, /*training=*/true, /*with_gradient=*/true);
    if (!std::isfinite(s.loss_sum))
      input_error("step {}: the training loss is {} (diverged); lower optimizer.lr or check the data", pos.step,
                  s.loss_sum);
    tally.loss_sum += s.loss_sum;
    tally.correct += s.correct;
    tally.seen += s.count;
  }
  {
    ScopedPhase p(tally.timers, Phase::backward);
    sync_->before_backward(net_->grads(), static_cast<uint64_t>(pos.step));
    net_->backward(*ctx_, [&](int layer) {
      for (int t : tensors_of_layer_[static_cast<size_t>(layer)]) sync_->tensor_ready(*ctx_, t);
    });
  }
  {
    // What remains of the synchronization after backward: the communication not hidden under it.
    const auto t_wait = std::chrono::steady_clock::now();
    sync_->after_backward(*ctx_);
    tally.exposed_s += seconds_since(t_wait);
  }
  // Clipping sees the averaged gradients, identical on every rank, so replicas stay in step.
  if (optimizer_->clip_norm() > 0) {
    ScopedPhase p(tally.timers, Phase::optimizer);
    clip_grad_norm(*ctx_, net_->grads(), optimizer_->clip_norm());
  }
  {
    ScopedPhase p(tally.timers, Phase::optimizer);
    tally.lr = schedule_->lr(pos.step, optimizer_->base_lr());
    optimizer_->step(*ctx_, net_->params(), net_->grads(), tally.lr);
  }
  {
    // Strategies that synchronize parameters rather than gradients do it here; its time is exposed.
    const auto t_sync = std::chrono::steady_clock::now();
    sync_->after_optimizer_step(*ctx_, net_->params(), static_cast<uint64_t>(pos.step));
    tally.exposed_s += seconds_since(t_sync);
  }
  ++pos.step;
  ++pos.batch_in_epoch;
  ++tally.steps;
  // The replicas where they are meant to agree, else the strategy's global parameters (check_replicas).
  if (options_.check_replicas_every > 0 && pos.step % options_.check_replicas_every == 0) check_replicas(pos.step);
}

// The end of an epoch (or of a run stopped within one): its metrics row with the exchange's
// statistics, the evaluation when due, the log lines, and the checkpoint when due.
void Trainer::end_epoch(int64_t epoch, bool stop, const EpochTally& tally, TrainingPosition& pos, TrainSummary& summary,
                        MetricsWriter* metrics, std::chrono::steady_clock::time_point t_start) {
  const TrainConfig& tc = config_.train;
  const bool epoch_done = pos.batch_in_epoch >= train_loader_->batches_per_epoch();
  const double epoch_time = seconds_since(tally.start);

  MetricsRow row;
  row.epoch = epoch_done ? epoch + 1 : epoch;
  row.step = pos.step;
  row.lr = tally.lr;
  row.train_loss = tally.seen ? tally.loss_sum / tally.seen : 0;
  row.train_accuracy = tally.seen ? static_cast<double>(tally.correct) / tally.seen : 0;
  row.samples_per_s = tally.seen * comm_->size() / std::max(epoch_time, 1e-9);
  const ExchangeStats ex = sync_->take_stats();
  PhaseTimers timers = tally.timers;
  for (Phase p : {Phase::encode, Phase::communicate, Phase::decode}) timers.add(p, ex.phases.seconds(p));
  row.phases = timers;
  row.bytes_sent = ex.bytes_sent;
  // Per training step: a strategy that syncs every H steps sends its bytes once per H steps.
  row.bytes_sent_per_step = tally.steps > 0 ? ex.bytes_sent / static_cast<double>(tally.steps) : 0;
  row.exposed_comm_s = tally.exposed_s;
  row.hidden_comm_s = std::max(0.0, ex.phases.seconds(Phase::encode) + ex.phases.seconds(Phase::communicate) +
                                        ex.phases.seconds(Phase::decode) - tally.exposed_s);
  row.fraction_quantized = sync_->fraction_quantized();
  if (tc.eval_every_epoch || stop || epoch + 1 == tc.epochs) {
    sync_buffers();
    summary.test = evaluate_model(pos.step);
    row.test_loss = summary.test.loss;
    row.test_accuracy = summary.test.accuracy;
    row.test_cer = summary.test.cer;
    row.test_wer = summary.test.wer;
  }
  row.wall_time_s = seconds_since(t_start);
  if (metrics) metrics->append(row);
  log_epoch(epoch, epoch_done, row, ex, tally.steps);
  if (epoch_done) {
    pos.epoch = epoch + 1;
    pos.batch_in_epoch = 0;
    summary.epochs_completed = epoch + 1;
  }
  const bool last = stop || pos.epoch >= tc.epochs;
  if (last || (config_.output.checkpoint_every_epochs > 0 && epoch_done &&
               (epoch + 1) % config_.output.checkpoint_every_epochs == 0))
    write_checkpoint(pos);
}

void Trainer::log_epoch(int64_t epoch, bool epoch_done, const MetricsRow& row, const ExchangeStats& ex, int64_t steps) {
  const PhaseTimers& timers = row.phases;
  log_info(fmt::format("epoch {}/{}{} step {}: train loss {:.4f} acc {:.2f}% | test loss {:.4f} acc {:.2f}% | "
                       "{:.0f} samples/s | data {:.2f}s fwd {:.2f}s bwd {:.2f}s opt {:.2f}s | exchange: encode "
                       "{:.2f}s comm {:.2f}s decode {:.2f}s, {:.2f}s hidden, {:.2f}s exposed, {:.2f} MB sent per step",
                       epoch + 1, config_.train.epochs, epoch_done ? "" : " (partial)", row.step, row.train_loss,
                       100 * row.train_accuracy, row.test_loss, 100 * row.test_accuracy, row.samples_per_s,
                       timers.seconds(Phase::data), timers.seconds(Phase::forward), timers.seconds(Phase::backward),
                       timers.seconds(Phase::optimizer), timers.seconds(Phase::encode),
                       timers.seconds(Phase::communicate), timers.seconds(Phase::decode), row.hidden_comm_s,
                       row.exposed_comm_s, row.bytes_sent_per_step / 1e6) +
           (std::isnan(row.test_cer)
                ? std::string()
                : fmt::format(" | test CER {:.2f}% WER {:.2f}%", 100 * row.test_cer, 100 * row.test_wer)));
  if (options_.rank == 0 && steps > 0 && ex.steps > 0 && comm_->size() > 1) {
    std::string per_layer = "bytes sent per step by tensor:";
    for (size_t t = 0; t < sync_->tensors().size(); ++t)
      per_layer +=
          fmt::format(" {} {:.0f}", sync_->tensors()[t].name, ex.bytes_sent_per_tensor[t] / static_cast<double>(steps));
    log_info(per_layer);
  }
}

}  // namespace qtrain
