// Formatting of qtrain errors: location, rank and host are added here, once.
#include "framework/core/check.h"

namespace qtrain::detail {
namespace {
// Process-wide because an error can be raised from any thread before or after the communicator
// exists; it is only ever used to label messages, never to make decisions.
int g_rank = -1;
std::string g_host;

std::string origin() {
  if (g_rank < 0) return "";
  return fmt::format(" [rank {}{}{}]", g_rank, g_host.empty() ? "" : " on ", g_host);
}

const char* basename_of(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') base = p + 1;
  return base;
}
}  // namespace

void set_error_origin(int rank, const std::string& host) {
  g_rank = rank;
  g_host = host;
}

void fail(const char* file, int line, const char* expr, const std::string& message) {
  if (expr == nullptr) throw Error(fmt::format("{} (failed at {}:{}{})", message, basename_of(file), line, origin()));
  throw Error(fmt::format("{} (check `{}` failed at {}:{}{})", message, expr, basename_of(file), line, origin()));
}

void fail_library(const char* library, const char* file, int line, const char* expr,
                  const std::string& library_message) {
  throw Error(fmt::format("{} error: {} in `{}` at {}:{}{}", library, library_message, expr, basename_of(file), line,
                          origin()));
}

}  // namespace qtrain::detail
