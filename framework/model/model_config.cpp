// Parsing of the `model` section.
#include "framework/model/model_config.h"

namespace qtrain {

ModelConfig parse_model_config(ConfigNode section) {
  ModelConfig m;
  m.input = section.get_int_list("input", {}, 1, 1 << 20);
  if (m.input.empty()) section.fail("input", "is required: the per-sample input shape, e.g. [1, 28, 28]");
  m.layers = section.items("layers");
  if (m.layers.empty()) section.fail("layers", "is required: a list of layers, e.g. - {type: dense, units: 10}");
  // `loss` is either a type name or a mapping with a `type` and the loss's own keys.
  if (section.has("loss") && section.yaml()["loss"].IsMap()) {
    m.loss_section = section.child("loss");
    m.loss = m.loss_section.require<std::string>("type");
    m.loss_section.accept("name");  // as for layers: a label, not the factory's business
  } else {
    m.loss = section.get<std::string>("loss", m.loss);
    m.loss_section = section.empty_child("loss");
  }
  section.finish();
  return m;
}

}  // namespace qtrain
