// Errors and checked calls, in one header, so that each kind of failure is raised one way:
//  - an internal error (a broken precondition, a case that cannot be reached): QT_CHECK or QT_FAIL,
//    through qtrain::detail::fail(), which throws qtrain::Error carrying file:line, the MPI rank and
//    host, the failed expression (QT_CHECK) and a message;
//  - bad user input (config, data file, checkpoint, payload): input_error(), an InputError whose
//    message names the file, key or line, without a source location;
//  - a failed library call: MPI_CHECK, CUDA_CHECK and their kin.
// Library code never calls exit(); tools/qtrain catches Error at the top and prints one line.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace qtrain {

// Every error qtrain raises. what() is the complete, user-facing line.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A user-facing input error (config, data file, checkpoint, payload): the message names the file,
// key or line and what was expected; no source location is appended because it is not a bug.
class InputError : public Error {
 public:
  using Error::Error;
};

namespace detail {
// The rank and host shown in every error; set once by the communicator at start-up.
void set_error_origin(int rank, const std::string& host);
// expr is the failed condition, or nullptr for an unconditional failure (QT_FAIL).
[[noreturn]] void fail(const char* file, int line, const char* expr, const std::string& message);
[[noreturn]] void fail_library(const char* library, const char* file, int line, const char* expr,
                               const std::string& library_message);
// Library error strings; each is implemented where the library is linked (check_cuda.cpp; the
// transports' MPI and NCCL ones in comm/transport_check.h).
std::string cuda_error_string(int code);
std::string cublas_error_string(int code);
std::string cudnn_error_string(int code);
std::string curand_error_string(int code);
}  // namespace detail

// Throws InputError with a formatted message.
template <typename... Args>
[[noreturn]] void input_error(fmt::format_string<Args...> format, Args&&... args) {
  throw InputError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace qtrain

// QT_CHECK(cond, "fmt", args...): an internal precondition; the message says what was expected.
#define QT_CHECK(cond, ...)                                                                   \
  do {                                                                                        \
    if (!(cond)) ::qtrain::detail::fail(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)

// QT_FAIL("fmt", args...): an internal error without a condition to test (a case that cannot be
// reached, a call this build or class does not support); the same location and exception as QT_CHECK.
#define QT_FAIL(...) ::qtrain::detail::fail(__FILE__, __LINE__, nullptr, fmt::format(__VA_ARGS__))

// QT_FAIL_NO_CUDA("what", args...): the one message of every CUDA path in a build without CUDA (the
// *_nocuda.cpp stand-ins, quant/'s and layers/' CUDA entry points): what was asked, and why not.
#define QT_FAIL_NO_CUDA(...) \
  QT_FAIL("{}: this qtrain was built without CUDA (QTRAIN_CUDA=OFF)", fmt::format(__VA_ARGS__))

// QT_CHECK_EQ(a, b, "fmt", args...): prints both values.
#define QT_CHECK_EQ(a, b, ...)                                                                      \
  do {                                                                                              \
    const auto& qt_a_ = (a);                                                                        \
    const auto& qt_b_ = (b);                                                                        \
    if (!(qt_a_ == qt_b_))                                                                          \
      ::qtrain::detail::fail(__FILE__, __LINE__, #a " == " #b,                                      \
                             fmt::format("{} ({} vs {})", fmt::format(__VA_ARGS__), qt_a_, qt_b_)); \
  } while (0)

#define QT_LIBRARY_CHECK_(library, ok_value, to_string, call)                                                    \
  do {                                                                                                           \
    const int qt_code_ = static_cast<int>(call);                                                                 \
    if (qt_code_ != (ok_value))                                                                                  \
      ::qtrain::detail::fail_library(library, __FILE__, __LINE__, #call, ::qtrain::detail::to_string(qt_code_)); \
  } while (0)

#define CUDA_CHECK(call) QT_LIBRARY_CHECK_("CUDA", 0, cuda_error_string, call)
#define CUBLAS_CHECK(call) QT_LIBRARY_CHECK_("cuBLAS", 0, cublas_error_string, call)
#define CUDNN_CHECK(call) QT_LIBRARY_CHECK_("cuDNN", 0, cudnn_error_string, call)
#define CURAND_CHECK(call) QT_LIBRARY_CHECK_("cuRAND", 0, curand_error_string, call)

namespace qtrain {

// v as an int, for the interfaces that count in int (cuBLAS, cuDNN, kernel arguments): one guard for
// every caller, so that a count past 2^31 - 1 fails the same way everywhere instead of wrapping. The
// error names the value: "<owner>: <what> = <v> exceeds the int range".
inline int checked_int(int64_t v, const char* owner, const char* what) {
  QT_CHECK(v >= 0 && v <= INT32_MAX, "{}: {} = {} exceeds the int range", owner, what, v);
  return static_cast<int>(v);
}

}  // namespace qtrain
