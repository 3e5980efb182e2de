// The layer graph of a `model.layers` list: expands `repeat:` blocks, names every layer and resolves
// each layer's `inputs:` to earlier layers, so Net sees a flat list in config order, which is also
// the execution order (a topological order, since inputs may only name earlier layers).
//
// Rules (docs/config-reference.md, "model.layers"):
// - A layer reads the previous entry's output unless it has `inputs:` (a name or a list of names).
// - A `{repeat: N, name: B, layers: [...]}` entry is a block: repetition r (1-based) gets the
//   scope `B<r>`, and its layers are named `B<r>.<inner name>` (e.g. `stage1_block3.conv1`).
//   Repetition 1 reads the block's `inputs:` (one name) or the previous entry; repetition r > 1
//   reads repetition r-1's last layer; the entry after the block reads the last repetition's last layer.
// - A name in `inputs:` resolves in the innermost scope first (earlier layers of the same
//   repetition, by their inner names, and `input`, which there means the repetition's input), then in
//   each enclosing scope outwards, where a nested layer is known by its name relative to that scope.
//   At the top level `input` is the net's input.
// - Layer and block names must not contain '.' and must not be `input`. Names are unique.
// - Every layer's output must be read by a later layer, except the last layer's (the net output).
#pragma once

#include <string>
#include <vector>

#include "framework/core/config_node.h"

namespace qtrain {

inline constexpr int kNetInput = -1;  // in GraphNode::inputs: the net's input

struct GraphNode {
  ConfigNode cfg;  // the layer's own block ("type", "name", "inputs" already marked as read)
  std::string type;
  std::string name;         // full name, e.g. "stage1_block3.conv1"
  std::vector<int> inputs;  // indices of earlier nodes, or kNetInput
};

// Errors (unknown or later names, duplicates, unused outputs, malformed blocks) are InputErrors
// naming the file, line and key.
std::vector<GraphNode> expand_layer_graph(const std::vector<ConfigNode>& layers);

}  // namespace qtrain
