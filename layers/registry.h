// The registries of every layer and loss type qtrain knows, built from explicit calls (not static
// initializers), so nothing depends on link order or on the linker keeping an object file. They live
// here, beside what they register; Net and the tools take them as arguments.
#pragma once

#include "framework/core/layer.h"
#include "framework/core/loss.h"

namespace qtrain {

// The registries built once, on first use.
const LayerRegistry& layer_registry();
const LossRegistry& loss_registry();

// Adds every layer / loss of this folder to a registry the caller owns (tests that build their own).
void register_layers(LayerRegistry& registry);
void register_losses(LossRegistry& registry);

}  // namespace qtrain
