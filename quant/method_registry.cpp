// The table of quantization methods, built from quant/methods.def: each line there names a method
// whose .cpp file defines its descriptor function.
#include <algorithm>
#include <array>

#include "framework/core/check.h"
#include "quant/method.h"

namespace qtrain {
namespace quant_detail {
#define QTRAIN_QUANT_METHOD(name, id) const QuantMethodInfo& name##_method_info();
#include "quant/methods.def"
#undef QTRAIN_QUANT_METHOD
}  // namespace quant_detail

namespace {

const auto& table() {
  static const auto methods = [] {
    std::array methods{
#define QTRAIN_QUANT_METHOD(name, id) &quant_detail::name##_method_info(),
#include "quant/methods.def"
#undef QTRAIN_QUANT_METHOD
    };
    // A row must describe the method its line names: the same id, and names that cannot collide.
    constexpr std::array ids{
#define QTRAIN_QUANT_METHOD(name, id) QuantMethod::name,
#include "quant/methods.def"
#undef QTRAIN_QUANT_METHOD
    };
    for (size_t i = 0; i < methods.size(); ++i) {
      QT_CHECK(methods[i]->id == ids[i], "quant/methods.def: row {} ('{}') describes method id {}, its line says {}", i,
               methods[i]->name, static_cast<int>(methods[i]->id), static_cast<int>(ids[i]));
      QT_CHECK(!methods[i]->variants.empty(), "quant/methods.def: method '{}' lacks its variants", methods[i]->name);
      // A payload quantizer has a factory and a round-trip bound; a method the exchange runs has neither.
      const bool factory = static_cast<bool>(methods[i]->make), bound = static_cast<bool>(methods[i]->within_bound);
      QT_CHECK(methods[i]->payload ? factory && bound : !factory && !bound, "quant/methods.def: method '{}' {}",
               methods[i]->name,
               methods[i]->payload ? "lacks a factory or a round-trip bound"
                                   : "has no payload (payload = false) but a factory or a round-trip bound");
    }
    return methods;
  }();
  return methods;
}

}  // namespace

const QuantMethodInfo& method_info(QuantMethod method) {
  for (const QuantMethodInfo* m : table())
    if (m->id == method) return *m;
  QT_FAIL("quantization method id {} is unknown", static_cast<int>(method));
}

std::span<const QuantMethodInfo* const> quant_methods() { return table(); }

std::string quant_method_names() {
  std::string names;
  for (const QuantMethodInfo* m : table()) names += (names.empty() ? "" : ", ") + m->name;
  return names;
}

const QuantParamDef* find_param(const QuantMethodInfo& info, std::string_view key) {
  for (const QuantParamDef& p : info.params)
    if (p.key == key) return &p;
  return nullptr;
}

}  // namespace qtrain
