#include "framework/core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "framework/core/check.h"

namespace qtrain {
namespace {

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) input_error("{}: write failed: {}", path, std::strerror(errno));
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) input_error("{}: cannot create the folder: {}", folder.string(), ec.message());
  // Built with fmt rather than string operator+, which trips GCC 12's false -Wrestrict warning.
  const std::string tmp = (folder / fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid())).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) input_error("{}: cannot create: {}", tmp, std::strerror(errno));
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
    if (::fsync(fd) != 0) input_error("{}: fsync failed: {}", tmp, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    input_error("{}: cannot rename into place: {}", path, std::strerror(errno));
  }
  // Make the rename itself durable.
  const int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::optional<std::string> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) input_error("{}: read failed: {}", path, std::strerror(errno));
  return text;
}

}  // namespace qtrain
