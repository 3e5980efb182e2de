// Registration of every layer and loss of this folder under its config type name. Explicit calls,
// not static initializers, so nothing depends on link order or on the linker keeping an object file.
// Called by the trainer (and tests) on registries they own; there is no global registry.
#pragma once

#include "framework/layer.h"
#include "framework/loss.h"

namespace qtrain {

// flatten, dense, relu, tanh, sigmoid, dropout.
void register_layers(LayerRegistry& registry);
// softmax_cross_entropy.
void register_losses(LossRegistry& registry);

}  // namespace qtrain
