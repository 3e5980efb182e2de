// The table of layer and loss type names: the only place a new layer has to be added besides its own
// files and layers/CMakeLists.txt. The three activations share one class and differ only by the
// kind captured in their factory.
#include "layers/registry.h"

#include "layers/activation.h"
#include "layers/add.h"
#include "layers/batchnorm.h"
#include "layers/contrast_norm.h"
#include "layers/conv2d.h"
#include "layers/ctc_loss.h"
#include "layers/dense.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/global_avgpool.h"
#include "layers/locally_connected2d.h"
#include "layers/lrn.h"
#include "layers/lstm.h"
#include "layers/pad_channels.h"
#include "layers/pool2d.h"
#include "layers/softmax_cross_entropy.h"

namespace qtrain {

void register_layers(LayerRegistry& registry) {
  registry.add("flatten", make_flatten);
  registry.add("dense", make_dense);
  for (ActivationKind kind : {ActivationKind::relu, ActivationKind::tanh, ActivationKind::sigmoid})
    registry.add(activation_name(kind), [kind](ConfigNode& cfg) { return make_activation(cfg, kind); });
  registry.add("dropout", make_dropout);
  registry.add("add", make_add);
  registry.add("pad_channels", make_pad_channels);
  registry.add("batchnorm1d", make_batchnorm1d);
  registry.add("batchnorm2d", make_batchnorm2d);
  registry.add("conv2d", make_conv2d);
  registry.add("maxpool2d", make_maxpool2d);
  registry.add("avgpool2d", make_avgpool2d);
  registry.add("global_avgpool", make_global_avgpool);
  registry.add("lrn", make_lrn);
  registry.add("contrast_norm", make_contrast_norm);
  registry.add("locally_connected2d", make_locally_connected2d);
  registry.add("lstm", make_lstm);
}

void register_losses(LossRegistry& registry) {
  registry.add("softmax_cross_entropy", make_softmax_cross_entropy);
  registry.add("ctc", make_ctc);
}

const LayerRegistry& layer_registry() {
  static const LayerRegistry registry = [] {
    LayerRegistry r("layer type");
    register_layers(r);
    return r;
  }();
  return registry;
}

const LossRegistry& loss_registry() {
  static const LossRegistry registry = [] {
    LossRegistry r("loss");
    register_losses(r);
    return r;
  }();
  return registry;
}

}  // namespace qtrain
