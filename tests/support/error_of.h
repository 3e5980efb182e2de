// The message of the InputError that `f` throws, or "(no error)": lets a test check a message
// with Catch matchers (StartsWith, Contains, combined with && and !) where CHECK_THROWS_WITH cannot.
#pragma once

#include <functional>
#include <string>

#include "framework/core/check.h"

namespace qtrain::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace qtrain::testing
