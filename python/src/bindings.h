// The pieces of the Python module `qtrain._qtrain` (module.cpp puts them together), and what they
// share: reading Python buffers (NumPy arrays, and torch tensors through .numpy()) as qtrain's spans
// with the error a Python user expects when the buffer is of the wrong kind.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>

namespace qtrain::python {

namespace py = pybind11;

void bind_errors(py::module_& m);       // qtrain's InputError as ValueError, its other errors as RuntimeError
void bind_quantizer(py::module_& m);    // qtrain.Quantizer's core (quantizer_binding.cpp)
void bind_exchange(py::module_& m);     // the DDP hook's exchange (exchange_binding.cpp)
void bind_collectives(py::module_& m);  // its transport's collectives one by one, for tests (collectives_binding.cpp)

// A C-contiguous buffer of float32 values (any shape): its values; raises TypeError naming `what`
// otherwise (a float64 array, a non-contiguous view). `writable`: a read-only buffer is refused too.
std::span<float> float_buffer(const py::buffer& b, const std::string& what, bool writable);
// The same for uint8 bytes (a payload).
std::span<const uint8_t> byte_buffer(const py::buffer& b, const std::string& what);

}  // namespace qtrain::python
