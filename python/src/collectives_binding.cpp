// qtrain._qtrain._Collectives: the transport the DDP hook's exchange runs on (PythonCollectivesComm
// over a process group), its collectives callable one by one, so that tests can check each against
// torch.distributed's own (tests/python/test_hook.py) rather than only through the exchange, which
// would agree with itself whatever the transport did.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "framework/core/check.h"
#include "python/src/bindings.h"
#include "python/src/python_collectives_comm.h"

namespace qtrain::python {
namespace {

using Blocks = std::vector<py::bytes>;

// A streamed collective's consume: rank s's bytes into out[s].
Communicator::Consume keep_in(Blocks& out) {
  return [&out](int s, std::span<const uint8_t> b) {
    out[static_cast<size_t>(s)] = py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  };
}

Blocks split(const std::vector<uint8_t>& recv, const std::vector<size_t>& sizes, const std::vector<size_t>& offsets) {
  Blocks out;
  for (size_t s = 0; s < sizes.size(); ++s)
    out.emplace_back(reinterpret_cast<const char*>(recv.data() + offsets[s]), sizes[s]);
  return out;
}

class Collectives {
 public:
  explicit Collectives(py::object group) : comm_(std::move(group)), ctx_(Context::cpu(0, 0)) {}

  // In place; float32, float64, float16, or uint16 holding bfloat16 bits (bf16=True).
  void all_reduce(py::array a, bool bf16) {
    QT_CHECK((a.flags() & py::array::c_style) && a.writeable(), "all_reduce: a writable C-contiguous array");
    ReduceType type = ReduceType::f32;
    const std::string kind = py::str(a.dtype()).cast<std::string>();
    if (kind == "float64")
      type = ReduceType::f64;
    else if (kind == "float16")
      type = ReduceType::f16;
    else if (kind == "uint16" && bf16)
      type = ReduceType::bf16;
    else
      QT_CHECK(kind == "float32", "all_reduce: float32, float64, float16 or uint16 (bf16) values, got {}", kind);
    comm_.all_reduce_sum(ctx_, a.mutable_data(), static_cast<int64_t>(a.size()), type);
  }
  Blocks all_gather(const std::string& send) {
    comm_.all_gather_bytes(ctx_, bytes(send), recv_, sizes_, offsets_);
    return split(recv_, sizes_, offsets_);
  }
  Blocks all_to_all(const std::vector<std::string>& blocks) {
    std::string all;
    std::vector<size_t> sizes, offsets;
    for (const std::string& b : blocks) {
      offsets.push_back(all.size());
      sizes.push_back(b.size());
      all += b;
    }
    comm_.all_to_all_bytes(ctx_, bytes(all), sizes, offsets, recv_, sizes_, offsets_);
    return split(recv_, sizes_, offsets_);
  }
  Blocks all_to_all_streamed(const std::vector<std::string>& blocks, const std::vector<size_t>& send_capacity,
                             const std::vector<size_t>& recv_capacity) {
    Blocks out(static_cast<size_t>(comm_.size()));
    comm_.all_to_all_streamed(
        ctx_, [&](int d) { return bytes(blocks.at(static_cast<size_t>(d))); }, send_capacity, recv_capacity, recv_,
        keep_in(out));
    return out;
  }
  Blocks all_gather_streamed(const std::string& send, const std::vector<size_t>& recv_capacity) {
    Blocks out(static_cast<size_t>(comm_.size()));
    comm_.all_gather_streamed(ctx_, bytes(send), recv_capacity, recv_, keep_in(out));
    return out;
  }
  std::vector<uint64_t> all_gather_u64(uint64_t value) { return comm_.all_gather_u64(value); }

 private:
  static std::span<const uint8_t> bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  PythonCollectivesComm comm_;
  Context ctx_;
  std::vector<uint8_t> recv_;
  std::vector<size_t> sizes_, offsets_;
};

}  // namespace

void bind_collectives(py::module_& m) {
  py::class_<Collectives>(m, "_Collectives")
      .def(py::init<py::object>(), py::arg("collectives"))
      .def("all_reduce", &Collectives::all_reduce, py::arg("array"), py::arg("bf16") = false)
      .def("all_gather", &Collectives::all_gather)
      .def("all_to_all", &Collectives::all_to_all)
      .def("all_to_all_streamed", &Collectives::all_to_all_streamed)
      .def("all_gather_streamed", &Collectives::all_gather_streamed)
      .def("all_gather_u64", &Collectives::all_gather_u64);
}

}  // namespace qtrain::python
