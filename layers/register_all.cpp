// The table of layer and loss type names: the only place a new layer has to be added besides its own
// files and layers/CMakeLists.txt. The three activations share one class and differ only by the
// kind captured in their factory.
#include "layers/register_all.h"

#include "layers/activation.h"
#include "layers/ctc_loss.h"
#include "layers/dense.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/lstm.h"
#include "layers/softmax_cross_entropy.h"

namespace qtrain {

void register_layers(LayerRegistry& registry) {
  registry.add("flatten", make_flatten);
  registry.add("dense", make_dense);
  for (ActivationKind kind : {ActivationKind::relu, ActivationKind::tanh, ActivationKind::sigmoid})
    registry.add(activation_name(kind), [kind](ConfigNode& cfg) { return make_activation(cfg, kind); });
  registry.add("dropout", make_dropout);
  registry.add("lstm", make_lstm);
}

void register_losses(LossRegistry& registry) {
  registry.add("softmax_cross_entropy", make_softmax_cross_entropy);
  registry.add("ctc", make_ctc);
}

}  // namespace qtrain
