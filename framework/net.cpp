// Net construction (layer graph, shapes, arena layout), initialization, forward, loss and backward.
#include "framework/net.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "framework/philox.h"

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
  for (int64_t i = std::max<int64_t>(spec.fill_begin, 0); i < std::min(spec.fill_end, n); ++i) values[i] = spec.fill_value;
}

Net::Net(const ModelConfig& config, DType dtype, Device device, const LayerRegistry& layers,
         const LossRegistry& losses)
    : dtype_(dtype), device_(device), input_shape_(config.input) {
  Shape shape = input_shape_;
  std::map<std::string, int> type_counts;
  std::set<std::string> names;
  int64_t cursor = 0;
  for (size_t i = 0; i < config.layers.size(); ++i) {
    ConfigNode cfg = config.layers[i];
    const std::string type = cfg.require<std::string>("type");
    if (!layers.contains(type))
      cfg.fail("type", fmt::format("names an unknown layer type '{}' (known: {})", type, layers.names_joined()));
    const std::string name = cfg.get<std::string>("name", type + std::to_string(++type_counts[type]));
    if (!names.insert(name).second) cfg.fail("name", fmt::format("duplicate layer name '{}'", name));
    std::unique_ptr<Layer> layer;
    try {
      layer = layers.create(type, cfg);
      layer->set_identity(name, static_cast<int>(i));
      shape = layer->setup(shape);
    } catch (const InputError&) {
      throw;  // already located by ConfigNode
    } catch (const Error& e) {
      cfg.fail("", fmt::format("({} '{}'): {}", type, name, e.what()));
    }
    for (ParamSpec& spec : layer->param_specs()) {
      ParamEntry e;
      e.name = name + "." + spec.name;
      e.layer_name = name;
      e.layer_type = type;
      e.layer_index = static_cast<int>(i);
      e.offset = align_up(cursor);
      e.numel = shape_numel(spec.shape);
      e.shape = spec.shape;
      cursor = e.offset + e.numel;
      entries_.push_back(e);
      specs_.push_back(spec);
    }
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
  params_ = Tensor::zeros({total}, dtype_, device_);
  grads_ = Tensor::zeros({total}, dtype_, device_);
  size_t k = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::vector<Tensor> p, g;
    for (; k < entries_.size() && entries_[k].layer_index == static_cast<int>(i); ++k) {
      p.push_back(params_.view(entries_[k].offset, entries_[k].shape));
      g.push_back(grads_.view(entries_[k].offset, entries_[k].shape));
    }
    layers_[i]->bind(std::move(p), std::move(g));
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
}

void Net::ensure_batch_capacity(int64_t batch) {
  if (batch <= capacity_) return;
  acts_.clear();
  dacts_.clear();
  for (const Shape& s : shapes_) {
    acts_.push_back(Tensor::empty(with_batch(batch, s), dtype_, device_));
    dacts_.push_back(Tensor::empty(with_batch(batch, s), dtype_, device_));
  }
  capacity_ = batch;
}

const Tensor& Net::forward(Context& ctx, const Tensor& x, bool training) {
  QT_CHECK(x.ndim() == static_cast<int>(input_shape_.size()) + 1, "input {} does not match the model input {}",
           shape_str(x.shape()), shape_str(input_shape_));
  for (size_t d = 0; d < input_shape_.size(); ++d)
    QT_CHECK(x.shape()[d + 1] == input_shape_[d], "input {} does not match the model input {}",
             shape_str(x.shape()), shape_str(input_shape_));
  QT_CHECK(x.device() == device_ && x.dtype() == dtype_, "input on {} {} but the net is on {} {}",
           x.device().str(), dtype_name(x.dtype()), device_.str(), dtype_name(dtype_));
  batch_ = x.dim(0);
  ensure_batch_capacity(batch_);
  input_ = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Tensor y = acts_[i].narrow_rows(batch_);
    layers_[i]->forward(ctx, i == 0 ? input_ : acts_[i - 1].narrow_rows(batch_), y, training);
  }
  // The returned tensor must outlive this call: keep the narrowed view in a member.
  logits_ = acts_.back().narrow_rows(batch_);
  return logits_;
}

const Tensor& Net::forward_sequence(Context& ctx, const Tensor& x, const Tensor& lengths, bool training) {
  QT_CHECK(x.ndim() >= 2, "a sequence batch must be (batch, time, frame...), got {}", shape_str(x.shape()));
  QT_CHECK(lengths.defined() && lengths.dtype() == DType::i32 && lengths.device().is_cpu() &&
               lengths.numel() == x.dim(0),
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
  for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
    const size_t u = static_cast<size_t>(i);
    const Tensor x = i == 0 ? input_ : acts_[u - 1].narrow_rows(batch_);
    Tensor dx = i == 0 ? Tensor() : dacts_[u - 1].narrow_rows(batch_);
    layers_[u]->backward(ctx, x, acts_[u].narrow_rows(batch_), dacts_[u].narrow_rows(batch_), dx);
    if (on_layer_done) on_layer_done(i);
  }
}

std::string Net::summary() const {
  std::string s = fmt::format("{:<14} {:<22} {:<18} {:>12}\n", "layer", "type", "output", "parameters");
  for (size_t i = 0; i < layers_.size(); ++i) {
    int64_t n = 0;
    for (const auto& e : entries_)
      if (e.layer_index == static_cast<int>(i)) n += e.numel;
    s += fmt::format("{:<14} {:<22} {:<18} {:>12}\n", layers_[i]->name(), layers_[i]->type(), shape_str(shapes_[i]), n);
  }
  s += fmt::format("{:<14} {:<22} {:<18} {:>12}\n", "total", loss_->type(), "", num_parameters());
  return s;
}

}  // namespace qtrain
