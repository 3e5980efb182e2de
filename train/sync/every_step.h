// every_step: the gradients are averaged over the ranks after every backward (synchronous data
// parallelism, as PyTorch DDP and Horovod do), quantized by the `quantization` section and exchanged
// as the `communication` section says, overlapping backward. Replicas are identical after every step.
#pragma once

#include <memory>

#include "train/sync/sync_strategy.h"

namespace qtrain {

std::unique_ptr<SyncStrategy> make_every_step_sync(SyncSetup& setup);

}  // namespace qtrain
