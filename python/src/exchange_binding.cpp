// The DDP hook's exchange (python/qtrain/torch.py): qtrain's GradientExchange over every parameter of
// a model, driven bucket by bucket by PyTorch's DDP reducer over its process group
// (python_collectives_comm.h). The tensors, their plans, random streams and error-feedback states are
// the exchange's own, per parameter: a bucket is only the list of tensors DDP hands over together, so
// DDP's rebuild of its buckets after the first iteration changes nothing, and the averaged gradient is
// bit for bit what GradientExchange gives for the same tensors, seeds and steps.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "exchange/exchange_config.h"
#include "exchange/gradient_exchange.h"
#include "framework/core/config_node.h"
#include "framework/core/context.h"
#include "framework/core/phase_timers.h"
#include "python/src/bindings.h"
#include "python/src/float_env_scope.h"
#include "python/src/python_collectives_comm.h"
#include "quant/policy.h"

namespace qtrain::python {
namespace {

std::shared_ptr<ConfigSource> source_named(const std::string& what) {
  auto source = std::make_shared<ConfigSource>();
  source->file = what;
  source->positions = false;
  return source;
}

class HookExchange {
 public:
  // `shapes[i]` is tensor i's shape as stored (PyTorch's, row-major): its innermost dimension is the
  // column of the methods that quantize per column, its leading one PowerSGD's rows.
  HookExchange(py::object collectives, const std::vector<std::string>& names,
               const std::vector<std::vector<int64_t>>& shapes, const std::string& method, const std::string& algorithm,
               uint64_t seed, int64_t min_numel, double piece_mb, const std::string& small_tensors, double bucket_mb)
      : comm_(std::move(collectives)), overlap_(bucket_mb > 0) {
    const FlushedFloats flushed;
    const std::string where = "qtrain.torch.hook('" + method + "')";
    QT_CHECK(names.size() == shapes.size(), "{} names for {} shapes", names.size(), shapes.size());
    YAML::Node q = method_entry_section(method, "qtrain.torch.hook");
    q["min_numel"] = min_numel;
    ConfigNode quantization(q, "quantization", source_named(where));
    const QuantizationConfig qc = QuantizationConfig::parse(quantization);

    YAML::Node c(YAML::NodeType::Map);
    c["algorithm"] = algorithm;
    c["piece_mb"] = piece_mb;
    // bucket_mb > 0: the exchange's own buckets of that size, each exchanged on the exchange's thread
    // as soon as DDP has handed over its tensors (under the rest of backward); 0: every tensor at
    // once when DDP hands over its last bucket, on the hook's thread.
    c["overlap"] = overlap_;
    if (overlap_) {
      c["bucket_mb"] = bucket_mb;
      compute_ = std::make_unique<Context>(Context::cpu(seed, 0));
    }
    c["hierarchy"] = "flat";
    c["small_tensors"] = small_tensors;
    ConfigNode communication(c, "communication", source_named(where));
    const ExchangeConfig ec = ExchangeConfig::parse(communication);
    communication.finish();

    std::vector<ExchangeTensor> tensors;
    int64_t offset = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const std::vector<int64_t>& shape = shapes[i];
      int64_t numel = 1;
      for (int64_t d : shape) {
        if (d < 0) input_error("{}: tensor {} has a negative dimension", where, names[i]);
        numel *= d;
      }
      ExchangeTensor x;
      x.name = names[i];
      x.layer_name = names[i];
      x.offset = offset;
      x.numel = numel;
      x.column = shape.empty() ? 1 : std::max<int64_t>(shape.back(), 1);
      x.rows = shape.size() >= 2 ? shape.front() : 0;
      offset += numel;
      tensors.push_back(std::move(x));
    }
    arena_ = Tensor::zeros({std::max<int64_t>(offset, 1)}, DType::f32);
    exchange_ = std::make_unique<GradientExchange>(comm_, Device::cpu(), seed, ec, qc, std::move(tensors));
  }

  using Bucket = std::tuple<std::vector<int>, py::buffer, std::vector<int64_t>>;

  // Stops the exchange's thread without the GIL: the thread may be waiting for it in a collective.
  ~HookExchange() {
    const py::gil_scoped_release release;
    exchange_.reset();
  }
  HookExchange(const HookExchange&) = delete;
  HookExchange& operator=(const HookExchange&) = delete;

  // Without overlap: averages the tensors of `buckets` (DDP's buckets of one step: the tensors `ids`
  // of each, whose gradients lie in its buffer at `offsets`), in place, as one exchange.
  void reduce(const std::vector<Bucket>& buckets, uint64_t step) {
    QT_CHECK(!overlap_, "reduce: this exchange overlaps backward (ready / finish)");
    std::vector<int> all;
    for (const Bucket& b : buckets) copy_in(b, all);
    const FlushedFloats flushed;
    exchange_->exchange_now(arena_, step, all);
    for (const Bucket& b : buckets) copy_out(b);
  }

  // With overlap: DDP's bucket `b` is final. Its gradients go into the arena and its tensors to the
  // exchange's thread, which exchanges each of the exchange's own buckets as soon as all of its tensors
  // are in, while backward goes on; the step's first call starts the step.
  void ready(const Bucket& b, uint64_t step) {
    QT_CHECK(overlap_, "ready: this exchange runs at the last bucket (reduce)");
    if (!in_step_) {
      exchange_->begin_step(arena_, step);
      in_step_ = true;
    }
    std::vector<int> ids;
    copy_in(b, ids);
    for (int t : ids) exchange_->tensor_ready(*compute_, t);
  }

  // With overlap: waits for the step's exchange (without the GIL, which the exchange's thread needs
  // for the process group's collectives) and copies the averages into `buckets`.
  void finish(const std::vector<Bucket>& buckets) {
    QT_CHECK(overlap_ && in_step_, "finish: no step of an overlapping exchange is pending");
    in_step_ = false;
    {
      const py::gil_scoped_release release;
      exchange_->finish_step();
    }
    for (const Bucket& b : buckets) copy_out(b);
  }

  // The exchange's state (error-feedback residuals, PowerSGD's Q and residuals), copied out by name.
  std::vector<std::pair<std::string, py::array_t<float>>> state() {
    std::vector<std::pair<std::string, py::array_t<float>>> out;
    for (auto& [name, t] : exchange_->state()) {
      py::array_t<float> a(static_cast<py::ssize_t>(t.numel()));
      std::copy_n(t.data<float>(), t.numel(), a.mutable_data());
      out.emplace_back(name, std::move(a));
    }
    return out;
  }

  // Restores what state() gave: every name, each with its size (a strict load, as PyTorch's).
  void load_state(const std::vector<std::pair<std::string, py::buffer>>& entries) {
    std::vector<std::pair<std::string, Tensor>> live = exchange_->state();
    std::vector<bool> loaded(live.size(), false);
    for (const auto& [name, buffer] : entries) {
      const std::span<float> v = float_buffer(buffer, "load_state_dict: " + name, false);
      size_t i = 0;
      while (i < live.size() && live[i].first != name) ++i;
      if (i == live.size())
        input_error("load_state_dict: '{}' is not a state of this hook (method and model must be those that saved it)",
                    name);
      if (static_cast<int64_t>(v.size()) != live[i].second.numel())
        input_error("load_state_dict: '{}' holds {} values, this hook's {}", name, v.size(), live[i].second.numel());
      std::copy(v.begin(), v.end(), live[i].second.data<float>());
      loaded[i] = true;
    }
    for (size_t i = 0; i < live.size(); ++i)
      if (!loaded[i]) input_error("load_state_dict: '{}' is missing", live[i].first);
  }

  std::string describe() const { return exchange_->describe(); }
  std::vector<std::string> algorithms() const {
    std::vector<std::string> out;
    for (size_t t = 0; t < exchange_->tensors().size(); ++t)
      out.emplace_back(reduce_algorithm_name(exchange_->algorithm(static_cast<int>(t))));
    return out;
  }
  // Since the last call: seconds encoding, communicating and decoding, and the bytes this rank sent.
  py::dict take_stats() {
    const ExchangeStats s = exchange_->take_stats();
    py::dict out;
    for (Phase p : {Phase::encode, Phase::communicate, Phase::decode})
      out[py::str(std::string(phase_name(p)) + "_s")] = s.phases.seconds(p);
    out["bytes_sent"] = s.bytes_sent;
    return out;
  }

 private:
  // Through the exchange's own arena: its tensors sit at fixed offsets of one Tensor, and a Tensor
  // cannot stand for PyTorch's memory (two copies of the step's values, against an encode's pass).
  // Checks the bucket and appends its tensors to `ids`.
  void copy_in(const Bucket& b, std::vector<int>& ids) {
    const auto& [bucket_ids, buffer, offsets] = b;
    const std::span<float> values = float_buffer(buffer, "the bucket's gradients", true);
    const std::vector<ExchangeTensor>& ts = exchange_->tensors();
    QT_CHECK(bucket_ids.size() == offsets.size(), "{} tensors with {} offsets", bucket_ids.size(), offsets.size());
    for (size_t i = 0; i < bucket_ids.size(); ++i) {
      QT_CHECK(bucket_ids[i] >= 0 && bucket_ids[i] < static_cast<int>(ts.size()), "tensor index {} of {}",
               bucket_ids[i], ts.size());
      const ExchangeTensor& x = ts[static_cast<size_t>(bucket_ids[i])];
      QT_CHECK(offsets[i] >= 0 && offsets[i] + x.numel <= static_cast<int64_t>(values.size()),
               "tensor {} at {} outside the bucket's {} values", x.name, offsets[i], values.size());
      std::copy_n(values.data() + offsets[i], x.numel, arena_.data<float>() + x.offset);
      ids.push_back(bucket_ids[i]);
    }
  }
  void copy_out(const Bucket& b) {
    const auto& [bucket_ids, buffer, offsets] = b;
    const std::span<float> values = float_buffer(buffer, "the bucket's gradients", true);
    for (size_t i = 0; i < bucket_ids.size(); ++i) {
      const ExchangeTensor& x = exchange_->tensors()[static_cast<size_t>(bucket_ids[i])];
      std::copy_n(arena_.data<float>() + x.offset, x.numel, values.data() + offsets[i]);
    }
  }

  PythonCollectivesComm comm_;
  bool overlap_ = false;
  bool in_step_ = false;
  // With overlap: the context tensor_ready names as the gradients' producer (no device work on the CPU).
  std::unique_ptr<Context> compute_;
  Tensor arena_;
  std::unique_ptr<GradientExchange> exchange_;
};

}  // namespace

void bind_exchange(py::module_& m) {
  py::class_<HookExchange>(m, "Exchange")
      .def(py::init<py::object, const std::vector<std::string>&, const std::vector<std::vector<int64_t>>&,
                    const std::string&, const std::string&, uint64_t, int64_t, double, const std::string&, double>(),
           py::arg("collectives"), py::arg("names"), py::arg("shapes"), py::arg("method"),
           py::arg("algorithm") = "auto", py::arg("seed") = 0, py::arg("min_numel") = 10000, py::arg("piece_mb") = 4.0,
           py::arg("small_tensors") = "native", py::arg("bucket_mb") = 0.0)
      .def("reduce", &HookExchange::reduce, py::arg("buckets"), py::arg("step"))
      .def("ready", &HookExchange::ready, py::arg("bucket"), py::arg("step"))
      .def("finish", &HookExchange::finish, py::arg("buckets"))
      .def("state", &HookExchange::state)
      .def("load_state", &HookExchange::load_state)
      .def("describe", &HookExchange::describe)
      .def_property_readonly("algorithms", &HookExchange::algorithms)
      .def("take_stats", &HookExchange::take_stats);
}

}  // namespace qtrain::python
