// Net construction (layer graph, shapes, arena layout), initialization, forward, loss and backward.
#include "framework/model/net.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "framework/model/layer_graph.h"
#include "framework/core/philox.h"

namespace qtrain {
namespace {
constexpr int64_t kAlignElements = 16;  // 64 bytes of f32: arena views start on cache lines

int64_t align_up(int64_t n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; }

Shape with_batch(int64_t batch, const Shape& s) {
  Shape out{batch};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}
}  // namespace

void initialize_values(std::vector<double>& values, const ParamSpec& spec, uint64_t key_seed) {
  const PhiloxKey key{static_cast<uint32_t>(key_seed), static_cast<uint32_t>(key_seed >> 32)};
  auto uniform = [&](int64_t i) {  // (0, 1], one Philox word per element
    const PhiloxBlock b = philox_subsequence_block(key, static_cast<uint64_t>(i) / 4);
    return static_cast<double>(b.v[i % 4]) * 0x1p-32 + 0x1p-33;
  };
  const int64_t n = static_cast<int64_t>(values.size());
  switch (spec.init) {
    case Init::zeros: std::fill(values.begin(), values.end(), 0.0); break;
    case Init::ones: std::fill(values.begin(), values.end(), 1.0); break;
    case Init::uniform_fan_in: {
      const double bound = 1.0 / std::sqrt(static_cast<double>(spec.fan_in));
      for (int64_t i = 0; i < n; ++i) values[i] = (2.0 * uniform(i) - 1.0) * bound;
      break;
    }
    case Init::glorot_uniform: {
      const double bound = std::sqrt(6.0 / static_cast<double>(spec.fan_in + spec.fan_out));
      for (int64_t i = 0; i < n; ++i) values[i] = (2.0 * uniform(i) - 1.0) * bound;
      break;
    }
    case Init::he_normal: {
      const double stddev = std::sqrt(2.0 / static_cast<double>(spec.fan_in));
      for (int64_t i = 0; i < n; ++i) {  // Box-Muller on two independent words of the stream
        const double u1 = uniform(2 * i), u2 = uniform(2 * i + 1);
        values[i] = stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      }
      break;
    }
  }
  for (int64_t i = std::max<int64_t>(spec.fill_begin, 0); i < std::min(spec.fill_end, n); ++i)
    values[i] = spec.fill_value;
}

// A layer whose output (per sample) or parameter tensor holds more than 2^40 values is a config
// error: no machine holds it, and the int64 products of such sizes wrap around further on (a huge
// padding once made flatten report 2^62 features and then crashed).
namespace {
constexpr int64_t kMaxTensorValues = int64_t{1} << 40;
void check_size(const Shape& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > kMaxTensorValues / d))
      input_error("{} {} would hold more than 2^40 values", what, shape_str(shape));
    n *= d;
  }
}
}  // namespace

Net::Net(const ModelConfig& config, DType dtype, Device device, const LayerRegistry& layers, const LossRegistry& losses,
         const std::function<void(const NetSizes&)>& before_allocation)
    : dtype_(dtype), device_(device), input_shape_(config.input) {
  std::vector<GraphNode> nodes = expand_layer_graph(config.layers);
  int64_t cursor = 0, buffer_cursor = 0;
  size_t max_inputs = 1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    GraphNode& node = nodes[i];
    ConfigNode& cfg = node.cfg;
    if (!layers.contains(node.type))
      cfg.fail("type", fmt::format("names an unknown layer type '{}' (known: {})", node.type, layers.names_joined()));
    // The factory's errors are located by ConfigNode already (the key they name).
    std::unique_ptr<Layer> layer = layers.create(node.type, cfg);
    layer->set_identity(node.name, static_cast<int>(i));
    const int n = static_cast<int>(node.inputs.size());
    const int expected = layer->num_inputs();
    if (expected == Layer::kAnyNumberOfInputs ? n < 2 : n != expected)
      cfg.fail("inputs", fmt::format("({} '{}'): this layer type takes {}, got {}", node.type, node.name,
                                     expected == Layer::kAnyNumberOfInputs ? std::string("two or more inputs")
                                                                           : fmt::format("{} input(s)", expected),
                                     n));
    Shape shape;
    try {
      std::vector<Shape> in_shapes;
      for (int k : node.inputs) in_shapes.push_back(k == kNetInput ? input_shape_ : shapes_[static_cast<size_t>(k)]);
      shape = layer->setup_inputs(in_shapes);
      check_size(shape, "its output");
      for (const ParamSpec& spec : layer->param_specs()) check_size(spec.shape, "its parameter " + spec.name);
    } catch (const Error& e) {
      // A shape the layer refuses (an input_error) or cannot hold: located at the layer's config entry.
      cfg.fail("", fmt::format("({} '{}'): {}", node.type, node.name, e.what()));
    }
    auto place = [&](const ParamSpec& spec, int64_t& at) {
      ParamEntry e;
      e.name = node.name + "." + spec.name;
      e.layer_name = node.name;
      e.layer_type = node.type;
      e.layer_index = static_cast<int>(i);
      e.offset = align_up(at);
      e.numel = shape_numel(spec.shape);
      e.shape = spec.shape;
      at = e.offset + e.numel;
      return e;
    };
    for (ParamSpec& spec : layer->param_specs()) {
      entries_.push_back(place(spec, cursor));
      specs_.push_back(spec);
    }
    for (ParamSpec& spec : layer->buffer_specs()) {
      buffer_entries_.push_back(place(spec, buffer_cursor));
      buffer_specs_.push_back(spec);
    }
    max_inputs = std::max(max_inputs, node.inputs.size());
    inputs_.push_back(std::move(node.inputs));
    shapes_.push_back(shape);
    layers_.push_back(std::move(layer));
  }
  ConfigNode loss_cfg = config.loss_section;
  if (!losses.contains(config.loss))
    loss_cfg.fail("", fmt::format("names an unknown loss '{}' (known: {})", config.loss, losses.names_joined()));
  loss_ = losses.create(config.loss, loss_cfg);
  QT_CHECK(shapes_.back().size() == 1, "the last layer must produce class scores (B, C) for the loss, got {}",
           shape_str(shapes_.back()));

  const int64_t total = std::max<int64_t>(align_up(cursor), 1);
  if (before_allocation) {
    NetSizes sizes;
    sizes.parameters = total;
    sizes.buffers = align_up(buffer_cursor);
    for (const Shape& s : shapes_) sizes.activations_per_sample += 2 * shape_numel(s);
    before_allocation(sizes);
  }
  params_ = Tensor::zeros({total}, dtype_, device_);
  grads_ = Tensor::zeros({total}, dtype_, device_);
  buffers_ = Tensor::zeros({std::max<int64_t>(align_up(buffer_cursor), 1)}, dtype_, device_);
  size_t k = 0, kb = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::vector<Tensor> p, g, b;
    for (; k < entries_.size() && entries_[k].layer_index == static_cast<int>(i); ++k) {
      p.push_back(params_.view(entries_[k].offset, entries_[k].shape));
      g.push_back(grads_.view(entries_[k].offset, entries_[k].shape));
    }
    for (; kb < buffer_entries_.size() && buffer_entries_[kb].layer_index == static_cast<int>(i); ++kb)
      b.push_back(buffers_.view(buffer_entries_[kb].offset, buffer_entries_[kb].shape));
    layers_[i]->bind(std::move(p), std::move(g));
    layers_[i]->bind_buffers(std::move(b));
  }
  xs_.resize(max_inputs);
  dxs_.resize(max_inputs);
  needs_gradient_.assign(layers_.size(), false);
  for (size_t i = 0; i < layers_.size(); ++i) {
    bool needs = !layers_[i]->params().empty();
    for (int in : inputs_[i]) needs = needs || (in != kNetInput && needs_gradient_[static_cast<size_t>(in)]);
    needs_gradient_[i] = needs;
  }
  plan_gradient_sums(layers);
}

void Net::plan_gradient_sums(const LayerRegistry& layers) {
  // Backward visits layers in reverse; the first visitor of an activation (its last reader in config
  // order) writes its gradient, every later visitor adds to it. The net input (kNetInput) is planned
  // like any other activation and used only when the input gradient is enabled.
  std::vector<bool> written(layers_.size() + 1, false);  // [k + 1] for node k
  accumulate_.assign(layers_.size(), {});
  for (size_t i = layers_.size(); i-- > 0;) {
    for (int k : inputs_[i]) {
      const size_t slot = static_cast<size_t>(k + 1);
      accumulate_[i].push_back(written[slot]);
      written[slot] = true;
    }
  }
  // The sums run through the registry's `add` layer (in place over its first input), so the model
  // knows no concrete layer; one per summed activation, set up with that activation's shape.
  gradient_sums_.clear();
  gradient_sums_.resize(layers_.size() + 1);
  for (size_t i = 0; i < layers_.size(); ++i)
    for (size_t s = 0; s < inputs_[i].size(); ++s) {
      const int k = inputs_[i][s];
      std::unique_ptr<Layer>& sum = gradient_sums_[static_cast<size_t>(k + 1)];
      if (!accumulate_[i][s] || sum) continue;
      ConfigNode no_keys;
      sum = layers.create("add", no_keys);
      const std::string of = k == kNetInput ? std::string("input") : layers_[static_cast<size_t>(k)]->name();
      sum->set_identity("gradient sum of " + of, k);
      const Shape& shape = k == kNetInput ? input_shape_ : shapes_[static_cast<size_t>(k)];
      sum->setup_inputs({shape, shape});
    }
}

int64_t Net::num_parameters() const {
  int64_t n = 0;
  for (const auto& e : entries_) n += e.numel;
  return n;
}

void Net::init_parameters(uint64_t seed) {
  for (size_t k = 0; k < entries_.size(); ++k) {
    std::vector<double> values(static_cast<size_t>(entries_[k].numel));
    initialize_values(values, specs_[k], mix64(seed ^ mix64(0x1417 + k)));
    Tensor host = Tensor::empty(entries_[k].shape, dtype_);
    if (dtype_ == DType::f64) {
      std::copy(values.begin(), values.end(), host.data<double>());
    } else {
      QT_CHECK(dtype_ == DType::f32, "nets hold f32 or f64 parameters, not {}", dtype_name(dtype_));
      std::copy(values.begin(), values.end(), host.data<float>());
    }
    params_.view(entries_[k].offset, entries_[k].shape).copy_from(host);
  }
  // Buffers start from constants (zeros, ones); the key only matters for a random init.
  for (size_t k = 0; k < buffer_entries_.size(); ++k) {
    std::vector<double> values(static_cast<size_t>(buffer_entries_[k].numel));
    initialize_values(values, buffer_specs_[k], mix64(seed ^ mix64(0xB0F + k)));
    Tensor host = Tensor::empty(buffer_entries_[k].shape, dtype_);
    if (dtype_ == DType::f64)
      std::copy(values.begin(), values.end(), host.data<double>());
    else
      std::copy(values.begin(), values.end(), host.data<float>());
    buffers_.view(buffer_entries_[k].offset, buffer_entries_[k].shape).copy_from(host);
  }
}

void Net::ensure_batch_capacity(int64_t batch) {
  if (batch <= capacity_ && (!input_gradient_enabled_ || dinput_.defined())) return;
  batch = std::max(batch, capacity_);
  acts_.clear();
  dacts_.clear();
  scratch_.clear();
  int64_t largest = 1;
  for (const Shape& s : shapes_) {
    acts_.push_back(Tensor::empty(with_batch(batch, s), dtype_, device_));
    dacts_.push_back(Tensor::empty(with_batch(batch, s), dtype_, device_));
    largest = std::max(largest, shape_numel(s));
  }
  if (input_gradient_enabled_) {
    dinput_ = Tensor::empty(with_batch(batch, input_shape_), dtype_, device_);
    largest = std::max(largest, shape_numel(input_shape_));
  }
  // Scratch for summed gradients, only for the input slots that ever accumulate.
  for (size_t s = 0; s < xs_.size(); ++s) {
    bool used = false;
    for (const auto& slots : accumulate_) used = used || (s < slots.size() && slots[s]);
    scratch_.push_back(used ? Tensor::empty({batch * largest}, dtype_, device_) : Tensor());
  }
  capacity_ = batch;
}

const Tensor& Net::forward(Context& ctx, const Tensor& x, bool training,
                           const std::function<void(int)>& on_layer_done) {
  QT_CHECK(x.ndim() == static_cast<int>(input_shape_.size()) + 1, "input {} does not match the model input {}",
           shape_str(x.shape()), shape_str(input_shape_));
  for (size_t d = 0; d < input_shape_.size(); ++d)
    QT_CHECK(x.shape()[d + 1] == input_shape_[d], "input {} does not match the model input {}", shape_str(x.shape()),
             shape_str(input_shape_));
  QT_CHECK(x.device() == device_ && x.dtype() == dtype_, "input on {} {} but the net is on {} {}", x.device().str(),
           dtype_name(x.dtype()), device_.str(), dtype_name(dtype_));
  batch_ = x.dim(0);
  ensure_batch_capacity(batch_);
  input_ = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::vector<int>& in = inputs_[i];
    for (size_t s = 0; s < in.size(); ++s)
      xs_[s] = in[s] == kNetInput ? input_ : acts_[static_cast<size_t>(in[s])].narrow_rows(batch_);
    Tensor y = acts_[i].narrow_rows(batch_);
    layers_[i]->forward_inputs(ctx, std::span<const Tensor>(xs_.data(), in.size()), y, training);
    if (on_layer_done) on_layer_done(static_cast<int>(i));
  }
  // The returned tensor must outlive this call: keep the narrowed view in a member.
  logits_ = acts_.back().narrow_rows(batch_);
  return logits_;
}

const Tensor& Net::forward_sequence(Context& ctx, const Tensor& x, const Tensor& lengths, bool training) {
  QT_CHECK(x.ndim() >= 2, "a sequence batch must be (batch, time, frame...), got {}", shape_str(x.shape()));
  QT_CHECK(
      lengths.defined() && lengths.dtype() == DType::i32 && lengths.device().is_cpu() && lengths.numel() == x.dim(0),
      "a sequence batch of {} needs {} i32 lengths on the CPU", shape_str(x.shape()), x.dim(0));
  sequence_batch_ = x.dim(0);
  sequence_frames_ = x.dim(1);
  Shape rows{sequence_batch_ * sequence_frames_};
  rows.insert(rows.end(), x.shape().begin() + 2, x.shape().end());
  for (auto& layer : layers_) layer->set_sequence_lengths(lengths);
  return forward(ctx, x.reshape(rows), training);
}

LossStats Net::loss_sequence(Context& ctx, const SequenceTargets& targets, bool with_gradient) {
  QT_CHECK(sequence_batch_ > 0 && batch_ == sequence_batch_ * sequence_frames_,
           "loss_sequence needs a preceding forward_sequence");
  const int64_t classes = logits_.dim(1);
  const Shape btc{sequence_batch_, sequence_frames_, classes};
  Tensor dlogits = dacts_.back().narrow_rows(batch_).reshape(btc);
  return loss_->compute_sequence(ctx, logits_.reshape(btc), targets, with_gradient ? &dlogits : nullptr);
}

LossStats Net::loss(Context& ctx, const Tensor& labels, bool with_gradient) {
  QT_CHECK(labels.numel() == batch_, "{} labels for a batch of {}", labels.numel(), batch_);
  Tensor dlogits = dacts_.back().narrow_rows(batch_);
  return loss_->compute(ctx, logits_, labels, with_gradient ? &dlogits : nullptr);
}

void Net::backward(Context& ctx, const std::function<void(int)>& on_layer_done) {
  const bool want_input = input_gradient_enabled_;
  QT_CHECK(!want_input || dinput_.defined(), "set_input_gradient(true) must come before the forward call");
  for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
    const size_t u = static_cast<size_t>(i);
    if (!want_input && !needs_gradient_[u]) {  // nothing behind it learns: no gradient to pass on
      if (on_layer_done) on_layer_done(i);
      continue;
    }
    const std::vector<int>& in = inputs_[u];
    for (size_t s = 0; s < in.size(); ++s) {
      const int k = in[s];
      const bool is_input = k == kNetInput;
      xs_[s] = is_input ? input_ : acts_[static_cast<size_t>(k)].narrow_rows(batch_);
      if (is_input ? !want_input : !want_input && !needs_gradient_[static_cast<size_t>(k)])
        dxs_[s] = Tensor();  // the net input, or a node with no parameters behind it, needs no gradient
      else if (accumulate_[u][s])
        dxs_[s] = scratch_[s].view(0, xs_[s].shape());
      else
        dxs_[s] = is_input ? dinput_.narrow_rows(batch_) : dacts_[static_cast<size_t>(k)].narrow_rows(batch_);
    }
    layers_[u]->backward_inputs(ctx, std::span<const Tensor>(xs_.data(), in.size()), acts_[u].narrow_rows(batch_),
                                dacts_[u].narrow_rows(batch_), std::span<Tensor>(dxs_.data(), in.size()));
    for (size_t s = 0; s < in.size(); ++s) {
      if (!accumulate_[u][s] || !dxs_[s].defined()) continue;
      Tensor sum =
          in[s] == kNetInput ? dinput_.narrow_rows(batch_) : dacts_[static_cast<size_t>(in[s])].narrow_rows(batch_);
      const Tensor operands[] = {sum, dxs_[s]};
      gradient_sums_[static_cast<size_t>(in[s] + 1)]->forward_inputs(ctx, operands, sum, false);
    }
    if (on_layer_done) on_layer_done(i);
  }
  if (want_input) input_gradient_ = dinput_.narrow_rows(batch_);
}

std::string Net::summary() const {
  size_t width = 14;  // names in repeat blocks (stage1_block18.conv1) are longer than the default column
  for (const auto& layer : layers_) width = std::max(width, layer->name().size());
  std::string s = fmt::format("{:<{}} {:<22} {:<18} {:>12}\n", "layer", width, "type", "output", "parameters");
  for (size_t i = 0; i < layers_.size(); ++i) {
    int64_t n = 0;
    for (const auto& e : entries_)
      if (e.layer_index == static_cast<int>(i)) n += e.numel;
    // Inputs are listed only where they differ from "the previous layer".
    std::string from;
    const std::vector<int>& in = inputs_[i];
    if (in.size() != 1 || in[0] != static_cast<int>(i) - 1)
      for (int k : in)
        from += (from.empty() ? "  <- " : ", ") +
                (k == kNetInput ? std::string("input") : layers_[static_cast<size_t>(k)]->name());
    s += fmt::format("{:<{}} {:<22} {:<18} {:>12}{}\n", layers_[i]->name(), width, layers_[i]->type(),
                     shape_str(shapes_[i]), n, from);
  }
  s += fmt::format("{:<{}} {:<22} {:<18} {:>12}\n", "total", width, loss_->type(), "", num_parameters());
  return s;
}

}  // namespace qtrain
