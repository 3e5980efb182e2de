// qtrain.Quantizer's core: one payload method's encode, decode and payload size on CPU buffers
// (python/qtrain/__init__.py gives it PyTorch's idiom). The same Quantizer objects as the trainer's
// exchange (quant/), so a payload made here is the one the exchange would send for the same values,
// state and random key.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "framework/core/config_node.h"
#include "framework/core/context.h"
#include "python/src/bindings.h"
#include "python/src/float_env_scope.h"
#include "quant/method.h"
#include "quant/policy.h"
#include "quant/quantizer.h"

namespace qtrain::python {
namespace {

class PyQuantizer {
 public:
  explicit PyQuantizer(const std::string& entry) {
    const FlushedFloats flushed;
    auto source = std::make_shared<ConfigSource>();
    source->file = "qtrain.Quantizer('" + entry + "')";
    source->positions = false;
    ConfigNode section(method_entry_section(entry, "qtrain.Quantizer"), "quantization", source);
    spec_ = parse_quant_spec(section, QuantSpec::defaults(QuantMethod::fp32));
    section.finish();
    if (!method_info(spec_.method).payload)
      input_error(
          "qtrain.Quantizer('{}'): {} has no payload of its own (it is an exchange algorithm: two all-reduces); "
          "use it through qtrain.torch.hook",
          entry, quant_method_name(spec_.method));
    quantizer_ = make_quantizer(spec_);
    ctx_ = std::make_unique<Context>(Context::cpu(0, 0));
  }

  py::array_t<uint8_t> encode(const py::buffer& values, const py::object& residual, uint64_t seed, uint64_t step,
                              int rank, uint64_t stream, int64_t column) {
    const std::span<float> in = float_buffer(values, "encode: the values", false);
    const auto n = static_cast<int64_t>(in.size());
    const int64_t col = column > 0 ? column : n;
    std::span<float> res;
    if (!residual.is_none()) res = float_buffer(residual.cast<py::buffer>(), "encode: the residual", true);
    if (spec_.error_feedback && residual.is_none())
      input_error("encode: {} keeps an error-feedback residual: pass residual= (float32, {} values, zero at first)",
                  spec_.str(), n);
    if (!spec_.error_feedback && !residual.is_none())
      input_error("encode: {} has no error feedback; pass no residual (or error_feedback=true in the method)",
                  spec_.str());
    if (!residual.is_none() && static_cast<int64_t>(res.size()) != n)
      input_error("encode: the residual holds {} values, the input {}", res.size(), n);
    const size_t capacity = quantizer_->max_encoded_bytes(n, col);
    py::array_t<uint8_t> out(static_cast<py::ssize_t>(capacity));
    size_t used = 0;
    {
      const FlushedFloats flushed;
      QuantState state(seed, rank, stream);
      quantizer_->init_state(state, n, Device::cpu());
      if (spec_.error_feedback) std::copy(res.begin(), res.end(), state.residual().data<float>());
      ctx_->set_step(step);
      used = quantizer_->encode(*ctx_, in, col, state, {out.mutable_data(), capacity});
      if (spec_.error_feedback) std::copy_n(state.residual().data<float>(), n, res.begin());
    }
    if (used == capacity) return out;
    py::array_t<uint8_t> exact(static_cast<py::ssize_t>(used));
    std::copy_n(out.data(), used, exact.mutable_data());
    return exact;
  }

  void decode(const py::buffer& payload, const py::buffer& out, bool add, int64_t column) {
    const std::span<const uint8_t> in = byte_buffer(payload, "decode: the payload");
    const std::span<float> values = float_buffer(out, "decode: the output", true);
    const FlushedFloats flushed;
    const auto n = static_cast<int64_t>(values.size());
    if (add)
      quantizer_->decode_add(*ctx_, in, n, values, column);
    else
      quantizer_->decode(*ctx_, in, n, values, column);
  }

  size_t payload_bytes(int64_t n, int64_t column) const {
    if (n < 0) input_error("payload_bytes: {} values", n);
    return quantizer_->max_encoded_bytes(n, column > 0 ? column : std::max<int64_t>(n, 1));
  }

  std::string str() const { return spec_.str(); }
  std::string method() const { return quant_method_name(spec_.method); }
  bool fixed_size() const { return quantizer_->fixed_size(); }
  bool error_feedback() const { return spec_.error_feedback; }

 private:
  QuantSpec spec_;
  std::unique_ptr<Quantizer> quantizer_;
  std::unique_ptr<Context> ctx_;
};

}  // namespace

void bind_quantizer(py::module_& m) {
  py::class_<PyQuantizer>(m, "Quantizer")
      .def(py::init<const std::string&>(), py::arg("method"))
      .def("encode", &PyQuantizer::encode, py::arg("values"), py::arg("residual") = py::none(), py::arg("seed") = 0,
           py::arg("step") = 0, py::arg("rank") = 0, py::arg("stream") = 0, py::arg("column") = 0)
      .def("decode", &PyQuantizer::decode, py::arg("payload"), py::arg("out"), py::arg("add") = false,
           py::arg("column") = 0)
      .def("payload_bytes", &PyQuantizer::payload_bytes, py::arg("numel"), py::arg("column") = 0)
      .def_property_readonly("method", &PyQuantizer::method)
      .def_property_readonly("fixed_size", &PyQuantizer::fixed_size)
      .def_property_readonly("error_feedback", &PyQuantizer::error_feedback)
      .def("__str__", &PyQuantizer::str);
  // The `--methods` entries the tests and benchmarks sweep for every payload method (QuantMethodInfo::variants).
  m.def("payload_variants", [] {
    std::vector<std::string> entries;
    for (const QuantMethodInfo* info : quant_methods())
      if (info->payload) entries.insert(entries.end(), info->variants.begin(), info->variants.end());
    return entries;
  });
  m.def("methods", [] {
    std::vector<std::string> names;
    for (const QuantMethodInfo* info : quant_methods()) names.emplace_back(info->name);
    return names;
  });
}

}  // namespace qtrain::python
