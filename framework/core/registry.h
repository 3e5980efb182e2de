// A named registry of factories. Unknown names are errors that list the known ones. Registration is
// explicit (layers/registry.cpp etc.), never through static initializers.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/check.h"

namespace qtrain {

template <typename Base, typename... Args>
class Registry {
 public:
  using Factory = std::function<std::unique_ptr<Base>(Args...)>;

  explicit Registry(std::string what) : what_(std::move(what)) {}

  void add(const std::string& name, Factory factory) {
    QT_CHECK(!factories_.count(name), "{} '{}' registered twice", what_, name);
    factories_.emplace(name, std::move(factory));
  }
  bool contains(const std::string& name) const { return factories_.count(name) != 0; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, f] : factories_) out.push_back(name);
    return out;
  }
  std::string names_joined() const {
    std::string s;
    for (const auto& [name, f] : factories_) s += (s.empty() ? "" : ", ") + name;
    return s;
  }
  std::unique_ptr<Base> create(const std::string& name, Args... args) const {
    auto it = factories_.find(name);
    if (it == factories_.end()) input_error("unknown {} '{}' (known: {})", what_, name, names_joined());
    return it->second(std::forward<Args>(args)...);
  }

 private:
  std::string what_;
  std::map<std::string, Factory> factories_;
};

}  // namespace qtrain
