// make_optimizer: parses and validates the `optimizer` config section into one of the optimizers.
// Each type reads only its own keys, so a key of another type (beta1 under sgd) is reported by
// finish() as unknown; `schedule` is accepted here and parsed by make_schedule().
#include <limits>

#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"

namespace qtrain {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A value in [0, 1): get_double has no exclusive upper bound.
double get_unit_open(ConfigNode& section, const std::string& key, double fallback) {
  const double v = section.get_double(key, fallback, 0.0, 1.0);
  if (v >= 1.0) section.fail(key, fmt::format("must be < 1, got {}", v));
  return v;
}

std::unique_ptr<Optimizer> parse_sgd(ConfigNode& section, double lr, double weight_decay) {
  SgdOptions o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.momentum = get_unit_open(section, "momentum", 0.0);
  o.dampening = section.get_double("dampening", 0.0, 0.0, 1.0);
  o.nesterov = section.get<bool>("nesterov", false);
  if (o.nesterov && o.momentum == 0)
    section.fail("nesterov", "needs momentum > 0 (set optimizer.momentum, e.g. 0.9, or nesterov: false)");
  if (o.nesterov && o.dampening != 0)
    section.fail("nesterov", fmt::format("needs dampening 0, got dampening {} (as in PyTorch)", o.dampening));
  return std::make_unique<Sgd>(o);
}

std::unique_ptr<Optimizer> parse_rmsprop(ConfigNode& section, double lr, double weight_decay) {
  RmsPropOptions o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.alpha = section.get_double("alpha", 0.99, 0.0, 1.0);
  o.eps = section.get_double("eps", 1e-8, 0.0, kInf);
  o.momentum = get_unit_open(section, "momentum", 0.0);
  o.centered = section.get<bool>("centered", false);
  return std::make_unique<RmsProp>(o);
}

std::unique_ptr<Optimizer> parse_adam(ConfigNode& section, double lr, double weight_decay) {
  AdamOptions o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.beta1 = get_unit_open(section, "beta1", 0.9);
  o.beta2 = get_unit_open(section, "beta2", 0.999);
  o.eps = section.get_double("eps", 1e-8, 0.0, kInf);
  o.amsgrad = section.get<bool>("amsgrad", false);
  return std::make_unique<Adam>(o);
}

std::unique_ptr<Optimizer> parse_adagrad(ConfigNode& section, double lr, double weight_decay) {
  AdagradOptions o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.lr_decay = section.get_double("lr_decay", 0.0, 0.0, kInf);
  o.initial_accumulator_value = section.get_double("initial_accumulator_value", 0.0, 0.0, kInf);
  o.eps = section.get_double("eps", 1e-10, 0.0, kInf);
  return std::make_unique<Adagrad>(o);
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(ConfigNode& section) {
  if (!section.has("type")) section.fail("type", "is required: one of sgd, rmsprop, adam, adagrad");
  const std::string type = section.get_choice("type", "", {"sgd", "rmsprop", "adam", "adagrad"});
  if (!section.has("lr")) section.fail("lr", "is required (the base learning rate, e.g. lr: 0.01)");
  const double lr = section.get_double("lr", 0.0, 0.0, kInf, /*min_exclusive=*/true);
  const double weight_decay = section.get_double("weight_decay", 0.0, 0.0, kInf);
  section.accept("schedule");
  std::unique_ptr<Optimizer> out;
  if (type == "sgd")
    out = parse_sgd(section, lr, weight_decay);
  else if (type == "rmsprop")
    out = parse_rmsprop(section, lr, weight_decay);
  else if (type == "adam")
    out = parse_adam(section, lr, weight_decay);
  else
    out = parse_adagrad(section, lr, weight_decay);
  out->set_clip_norm(section.get_double("clip_norm", 0.0, 0.0, kInf));
  section.finish();
  return out;
}

}  // namespace qtrain
