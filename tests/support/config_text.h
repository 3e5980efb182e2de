// Config sections and layers built from inline YAML text, the way the trainer builds them from a file:
// through ConfigNode (and the layer registry), so the error messages a test checks are the ones a
// user sees, naming `file`, line and column, and the full key path.
#pragma once

#include <yaml-cpp/yaml.h>

#include <memory>
#include <string>

#include "framework/core/config_node.h"

namespace qtrain::testing {

// The node of `yaml`, reported as key `path` of file `file` in error messages.
inline ConfigNode config_from_text(const std::string& yaml, const std::string& path = "",
                                   const std::string& file = "test.yaml") {
  auto source = std::make_shared<ConfigSource>();
  source->file = file;
  return ConfigNode(YAML::Load(yaml), path, source);
}

}  // namespace qtrain::testing
