// framework/core/check.h: QT_FAIL raises what a failed QT_CHECK raises (an Error, not an InputError,
// with the message and the source location), without a condition to print.
#include <catch2/catch.hpp>

#include <string>
#include <utility>

#include "framework/core/check.h"

using namespace qtrain;
using Catch::Contains;

namespace {
constexpr int kFailLine = __LINE__ + 1;  // the lines of the QT_FAIL and the QT_CHECK below
[[noreturn]] void unreachable_case(int value) { QT_FAIL("case {} cannot happen", value); }
void checked(int value) { QT_CHECK(value > 0, "value must be > 0, got {}", value); }

// The message of what f throws, and whether it was an InputError (user input, no location).
template <typename F>
std::pair<std::string, bool> thrown(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return {e.what(), true};
  } catch (const Error& e) {
    return {e.what(), false};
  }
  return {"", false};
}
}  // namespace

TEST_CASE("QT_FAIL throws an internal Error with the message and its location", "[check]") {
  const auto [message, is_input] = thrown([] { unreachable_case(7); });
  CHECK_FALSE(is_input);
  CHECK_THAT(message,
             Contains("case 7 cannot happen") && Contains(fmt::format("failed at test_check.cpp:{}", kFailLine)));
  CHECK_THAT(message, !Contains("check `"));
}

TEST_CASE("QT_CHECK names the failed condition", "[check]") {
  const auto [message, is_input] = thrown([] { checked(-1); });
  CHECK_FALSE(is_input);
  CHECK_THAT(message, Contains("value must be > 0, got -1") &&
                          Contains(fmt::format("check `value > 0` failed at test_check.cpp:{}", kFailLine + 1)));
  CHECK_NOTHROW(checked(1));
}
