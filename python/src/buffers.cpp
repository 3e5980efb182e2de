// Python buffers as spans, with the errors of a Python API.
#include <fmt/format.h>

#include "framework/core/check.h"
#include "python/src/bindings.h"

namespace qtrain::python {
namespace {

// Whether the buffer's strides are C order (any shape; size-1 dimensions may have any stride).
bool c_contiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim; d-- > 0;) {
    if (info.shape[static_cast<size_t>(d)] != 1 && info.strides[static_cast<size_t>(d)] != expected) return false;
    expected *= info.shape[static_cast<size_t>(d)];
  }
  return true;
}

py::buffer_info checked(const py::buffer& b, const std::string& what, const char* format, py::ssize_t itemsize,
                        const char* kind, bool writable) {
  py::buffer_info info = b.request();  // read-only buffers too: refused below, with a message
  if (info.itemsize != itemsize || (info.format != format && !(itemsize == 1 && info.format == "B")))
    throw py::type_error(fmt::format("{}: expected {} values, got a buffer of format '{}' ({} bytes per item)", what,
                                     kind, info.format, info.itemsize));
  if (!c_contiguous(info))
    throw py::type_error(fmt::format("{}: expected a contiguous buffer (call .contiguous())", what));
  if (writable && info.readonly) throw py::type_error(fmt::format("{}: the buffer is read-only", what));
  return info;
}

}  // namespace

std::span<float> float_buffer(const py::buffer& b, const std::string& what, bool writable) {
  const py::buffer_info info = checked(b, what, "f", 4, "float32", writable);
  return {static_cast<float*>(info.ptr), static_cast<size_t>(info.size)};
}

std::span<const uint8_t> byte_buffer(const py::buffer& b, const std::string& what) {
  const py::buffer_info info = checked(b, what, "B", 1, "uint8", false);
  return {static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size)};
}

void bind_errors(py::module_& m) {
  // An error of the input (a malformed payload, a bad method entry, a wrong size) is the caller's:
  // ValueError; any other qtrain error (a broken invariant) is a RuntimeError. Neither ends the
  // interpreter.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  (void)m;
}

}  // namespace qtrain::python
