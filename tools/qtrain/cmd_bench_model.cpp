// `qtrain bench-model CONFIG [--batch N] [--steps S]`: the training throughput of a model on
// SYNTHETIC RANDOM INPUT (uniform in [-1, 1), labels i mod classes), without a dataset: a speed
// benchmark of forward + loss + backward + optimizer step, not a training run. It reads only the
// `model`, `optimizer` (default: sgd, lr 0.01) and `seed` keys of CONFIG, so a run config works as is;
// there is no gradient exchange (one process, the compute of a step). With --per-layer it also times
// every layer's forward and backward inside the net (more steps, with the device synchronized and the
// clock read after each layer), which is where a model's time goes. The last line is JSON for scripts
// (tools/bench/bench_convnet_cpu.py).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "framework/model/net.h"
#include "framework/core/philox.h"
#include "train/trainer.h"
#include "layers/registry.h"
#include "optim/optimizer.h"
#include "tools/qtrain/commands.h"

namespace qtrain::cli {
namespace {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  int64_t batch = 128;
  int steps = 20;
  int warmup = 3;
  int threads = 0;
  std::string device = "cpu";
  bool per_layer = false;
};

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Uniform values in [lo, hi) from Philox (deterministic synthetic input), as a CPU f32 tensor.
Tensor synthetic(const Shape& shape, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::f32);
  const PhiloxKey key = derive_philox_key(seed, 0xBE4C);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); i += 4) {
    const PhiloxBlock b = philox_subsequence_block(key, static_cast<uint64_t>(i / 4));
    for (int64_t w = 0; w < 4 && i + w < t.numel(); ++w)
      p[i + w] = static_cast<float>(lo + (hi - lo) * uniform_from_bits(b.v[w]));
  }
  return t;
}

Shape batched(int64_t batch, const Shape& s) {
  Shape out{batch};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

struct LayerTime {
  std::string name, type;
  Shape output;
  double forward_ms = 0, backward_ms = 0;
};

// Forward and backward time of each layer inside the net (its own graph, buffers and activations):
// training steps whose layer hooks synchronize the device and read the clock after every layer. A
// layer's backward time includes summing its input gradients where an activation feeds several
// layers. Medians over the timed steps, plus a total per layer type.
std::vector<LayerTime> time_layers(const Options& o, Net& net, Context& ctx, const Tensor& x, const Tensor& labels) {
  const auto layers = static_cast<size_t>(net.num_layers());
  std::vector<std::vector<double>> tf(layers), tb(layers);
  std::vector<double> f(layers), b(layers);
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    ctx.synchronize();
    auto last = Clock::now();
    auto lap = [&](std::vector<double>& into) {
      return [&into, &last, &ctx](int i) {
        ctx.synchronize();
        const auto now = Clock::now();
        into[static_cast<size_t>(i)] = std::chrono::duration<double>(now - last).count();
        last = now;
      };
    };
    net.forward(ctx, x, true, lap(f));
    net.loss(ctx, labels, true);
    ctx.synchronize();
    last = Clock::now();
    net.backward(ctx, lap(b));
    if (s < o.warmup) continue;
    for (size_t i = 0; i < layers; ++i) tf[i].push_back(f[i]), tb[i].push_back(b[i]);
  }
  size_t width = 14;
  for (size_t i = 0; i < layers; ++i) width = std::max(width, net.layer(static_cast<int>(i)).name().size());
  std::printf("%-4s %-*s %-18s %-18s %12s %12s %12s\n", "#", static_cast<int>(width), "layer", "type", "output",
              "forward(ms)", "backward(ms)", "total(ms)");
  std::vector<LayerTime> times;
  std::vector<std::pair<std::string, LayerTime>> by_type;  // in order of first appearance
  double sum_f = 0, sum_b = 0;
  for (size_t i = 0; i < layers; ++i) {
    Layer& layer = net.layer(static_cast<int>(i));
    LayerTime t{layer.name(), layer.type(), net.layer_output_shape(static_cast<int>(i)), median(tf[i]) * 1e3,
                median(tb[i]) * 1e3};
    std::printf("%-4zu %-*s %-18s %-18s %12.3f %12.3f %12.3f\n", i + 1, static_cast<int>(width), t.name.c_str(),
                t.type.c_str(), shape_str(t.output).c_str(), t.forward_ms, t.backward_ms, t.forward_ms + t.backward_ms);
    sum_f += t.forward_ms;
    sum_b += t.backward_ms;
    auto it = std::find_if(by_type.begin(), by_type.end(), [&](const auto& e) { return e.first == t.type; });
    if (it == by_type.end()) it = by_type.insert(by_type.end(), {t.type, LayerTime{}});
    it->second.forward_ms += t.forward_ms;
    it->second.backward_ms += t.backward_ms;
    times.push_back(std::move(t));
  }
  std::printf("%-4s %-*s %-18s %-18s %12.3f %12.3f %12.3f\n", "", static_cast<int>(width), "sum of layers", "", "",
              sum_f, sum_b, sum_f + sum_b);
  std::printf("\nper layer type:\n");
  for (const auto& [type, t] : by_type)
    std::printf("  %-18s %12.3f %12.3f %12.3f  (%.1f%%)\n", type.c_str(), t.forward_ms, t.backward_ms,
                t.forward_ms + t.backward_ms, 100 * (t.forward_ms + t.backward_ms) / std::max(sum_f + sum_b, 1e-12));
  return times;
}

void run(const Options& o) {
  LoadedConfig loaded = load_config_file(o.config, o.overrides);
  ConfigNode root(loaded.root, "", loaded.source);
  const uint64_t seed = static_cast<uint64_t>(root.get_int("seed", 1, 0, INT64_MAX));
  const ModelConfig model = parse_model_config(root.child("model"));
  ConfigNode opt_section = root.child("optimizer");
  if (!root.has("optimizer")) {
    YAML::Node sgd;
    sgd["type"] = "sgd";
    sgd["lr"] = 0.01;
    opt_section = ConfigNode(sgd, "optimizer", loaded.source);
  }
  const Device device = select_device(o.device, 0, "--device");
  Context ctx = make_context(device, seed, o.threads);
  std::printf(
      "# qtrain bench-model %s: SYNTHETIC RANDOM INPUT (speed benchmark, no dataset), batch %lld, %s, "
      "%d threads, median over %d steps after %d warm-up\n",
      o.config.c_str(), static_cast<long long>(o.batch), device.str().c_str(), ctx.cpu_threads(), o.steps, o.warmup);

  // As train does: the large allocations checked before any is made (a batch that cannot fit would be
  // killed by the OOM killer after filling the machine's memory).
  auto check_memory = [&](const NetSizes& sizes) {
    check_memory_fits(training_footprint(sizes, model.input, o.batch, "optimizer state (at most)", 3),
                      available_memory(device), 1, device, o.config + " (--batch " + std::to_string(o.batch) + ")",
                      "--batch");
  };
  Net net(model, DType::f32, device, layer_registry(), loss_registry(), check_memory);
  for (int i = 0; i < net.num_layers(); ++i)
    if (net.layer(i).needs_sequence_batches())
      input_error(
          "{}: layer '{}' ({}) runs on sequence batches, which bench-model's fixed-size synthetic input "
          "does not provide; time the AN4 LSTM with tools/bench/bench_lstm_cpu.py",
          o.config, net.layer(i).name(), net.layer(i).type());
  net.init_parameters(seed);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(opt_section);
  optimizer->init(net.params().numel(), DType::f32, device);
  const int64_t classes = net.output_shape()[0];
  const Tensor x = synthetic(batched(o.batch, net.input_shape()), seed, -1, 1).to(device);
  Tensor labels_host = Tensor::empty({o.batch}, DType::i32);
  for (int64_t i = 0; i < o.batch; ++i) labels_host.data<int32_t>()[i] = static_cast<int32_t>(i % classes);
  const Tensor labels = labels_host.to(device);

  std::vector<double> step_s, fwd_s, bwd_s, opt_s;
  double loss = 0;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    ctx.set_step(static_cast<uint64_t>(s));
    ctx.synchronize();
    const auto t0 = Clock::now();
    net.forward(ctx, x, true);
    loss = net.loss(ctx, labels, true).loss_sum / static_cast<double>(o.batch);
    ctx.synchronize();
    const auto t1 = Clock::now();
    net.backward(ctx);
    ctx.synchronize();
    const auto t2 = Clock::now();
    optimizer->step(ctx, net.params(), net.grads(), optimizer->base_lr());
    ctx.synchronize();
    const auto t3 = Clock::now();
    if (s < o.warmup) continue;
    fwd_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    bwd_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    opt_s.push_back(std::chrono::duration<double>(t3 - t2).count());
    step_s.push_back(std::chrono::duration<double>(t3 - t0).count());
  }
  const double step = median(step_s);
  const double rate = static_cast<double>(o.batch) / step;
  std::printf("%s", net.summary().c_str());
  std::printf("step %.2f ms (forward+loss %.2f, backward %.2f, optimizer %.2f), %.1f samples/s, last loss %.4f\n",
              step * 1e3, median(fwd_s) * 1e3, median(bwd_s) * 1e3, median(opt_s) * 1e3, rate, loss);
  std::string layers_json;
  if (o.per_layer) {
    for (const LayerTime& t : time_layers(o, net, ctx, x, labels))
      layers_json += fmt::format(
          R"({}{{"name": "{}", "type": "{}", "output": "{}", "forward_ms": {:.4f}, "backward_ms": {:.4f}}})",
          layers_json.empty() ? "" : ", ", t.name, t.type, shape_str(t.output), t.forward_ms, t.backward_ms);
  }
  std::printf(R"({"config": "%s", "device": "%s", "batch": %lld, "threads": %d, "steps": %d, )"
              R"("step_ms": %.4f, "forward_ms": %.4f, "backward_ms": %.4f, "optimizer_ms": %.4f, )"
              R"("samples_per_s": %.2f, "input": "synthetic", "layers": [%s]})"
              "\n",
              o.config.c_str(), device.str().c_str(), static_cast<long long>(o.batch), ctx.cpu_threads(), o.steps,
              step * 1e3, median(fwd_s) * 1e3, median(bwd_s) * 1e3, median(opt_s) * 1e3, rate, layers_json.c_str());
}

}  // namespace

void add_bench_model_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "bench-model", "Time training steps of a config's model on synthetic random input (no dataset needed)");
  cmd->add_option("config", o->config, "Config file (its model, optimizer and seed keys are used)")->required();
  cmd->add_option("--batch", o->batch, "Samples per step")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--steps", o->steps, "Timed steps (the median is reported)")->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", o->warmup, "Untimed steps first")->check(CLI::Range(0, 1000000));
  cmd->add_option("--threads", o->threads, "CPU threads for BLAS (0 = all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--device", o->device, "cpu | cuda | auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_flag("--per-layer", o->per_layer, "Also time each layer's forward and backward on its own");
  cmd->add_option("--set", o->overrides, "Override a config key, e.g. --set model.layers.0.out_channels=32")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::cli
