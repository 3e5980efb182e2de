#include "framework/core/file_io.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "framework/core/check.h"

namespace qtrain {
namespace {

// Bytes a non-root user may still write on the file system that holds `folder` (-1: unknown).
long long free_bytes(const std::filesystem::path& folder) {
  struct statvfs st {};
  if (::statvfs(folder.c_str(), &st) != 0) return -1;
  return static_cast<long long>(st.f_bavail) * static_cast<long long>(st.f_frsize);
}

// The error of a failed write of `bytes` to `path`: why it failed, how much room there is, and what
// is left (`kept`, for example "the file was not replaced").
[[noreturn]] void write_failed(const std::string& path, const std::filesystem::path& folder, size_t bytes,
                               const std::string& step, int error, const std::string& kept) {
  const long long room = free_bytes(folder);
  const std::string space =
      error == ENOSPC || error == EDQUOT
          ? fmt::format("; {} has {} bytes free, {} more are needed (free space or write elsewhere)", folder.string(),
                        room < 0 ? 0 : room,
                        room < 0 ? static_cast<long long>(bytes) : static_cast<long long>(bytes) - room)
          : std::string();
  input_error("{}: cannot write {} bytes ({} failed: {}){}; {}", path, bytes, step, std::strerror(error), space, kept);
}

std::string replaced_nothing(const std::string& path) {
  return std::filesystem::exists(path) ? "the file was not replaced: its previous content is intact"
                                       : "no file was written";
}

// Writes n bytes; returns 0 or the errno of the failed write.
int write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
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
  if (fd < 0) input_error("{}: cannot create a temporary file next to it ({}): {}", path, tmp, std::strerror(errno));
  // Reserving the whole size first makes a full disk fail before any byte is written; file systems
  // without fallocate (EOPNOTSUPP, EINVAL) fall through to the writes, which report it as well.
  std::string step = "reserving the space";
  int error = bytes.empty() ? 0 : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes.size()));
  if (error == EOPNOTSUPP || error == EINVAL) error = 0;
  if (error == 0) {
    step = "write";
    error = write_all(fd, bytes.data(), bytes.size());
  }
  if (error == 0 && ::fsync(fd) != 0) {
    step = "fsync";
    error = errno;
  }
  if (::close(fd) != 0 && error == 0) {
    step = "close";
    error = errno;
  }
  if (error != 0) {
    ::unlink(tmp.c_str());
    write_failed(path, folder, bytes.size(), step, error, replaced_nothing(path));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    write_failed(path, folder, bytes.size(), "rename into place", e, replaced_nothing(path));
  }
  // Make the rename itself durable.
  const int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void append_to_file(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) input_error("{}: cannot open for appending: {}", path, std::strerror(errno));
  const off_t before = ::lseek(fd, 0, SEEK_END);
  std::string step = "reserving the space";
  int error = before < 0 ? errno : 0;
  if (error == 0 && !bytes.empty()) {
    // KEEP_SIZE reserves the blocks without moving the end of the file, where O_APPEND writes.
    error = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, before, static_cast<off_t>(bytes.size())) == 0 ? 0 : errno;
    if (error == EOPNOTSUPP || error == EINVAL || error == ENOSYS) error = 0;
  }
  if (error == 0) {
    step = "write";
    error = write_all(fd, bytes.data(), bytes.size());
  }
  if (error != 0) {
    // posix_fallocate may have grown the file before failing, a write may have stopped part-way.
    const bool cut = before >= 0 && ::ftruncate(fd, before) == 0;
    ::close(fd);
    write_failed(path, folder, bytes.size(), step, error,
                 cut ? "nothing was appended, the earlier content is intact" : "the file may end with a cut line");
  }
  ::close(fd);
}

std::optional<std::string> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) input_error("{}: read failed: {}", path, std::strerror(errno));
  return text;
}

}  // namespace qtrain
