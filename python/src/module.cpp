// The Python module qtrain._qtrain: qtrain's quantizers and gradient exchange for PyTorch programs
// (python/qtrain wraps it in PyTorch's idiom: qtrain.Quantizer, qtrain.torch.hook). It links the same
// quant/ and exchange/ libraries as the qtrain program: no copy of their code.
#include <pybind11/pybind11.h>

#include "python/src/bindings.h"
#include "quant/method.h"

PYBIND11_MODULE(_qtrain, m) {
  m.doc() = "qtrain's gradient quantizers and exchange (see the qtrain package)";
  qtrain::python::bind_errors(m);
  qtrain::python::bind_quantizer(m);
  qtrain::python::bind_exchange(m);
  qtrain::python::bind_collectives(m);
}
