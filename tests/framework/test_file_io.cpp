// framework/core/file_io: a write that cannot finish (here: the file-size limit, RLIMIT_FSIZE, which
// fails writes with EFBIG as a full disk fails them with ENOSPC; tests/e2e/full_disk.sh fills a real
// tmpfs) raises an error naming the file and the bytes, and leaves the file exactly as it was.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "framework/core/check.h"
#include "framework/core/file_io.h"

using namespace qtrain;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

// Limits the size of every file this process writes to `bytes` while it lives (SIGXFSZ ignored, so
// writes fail with EFBIG instead of killing the process).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = nullptr;
};

fs::path fresh_folder(const char* name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("qtrain-file-io-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("write_file_atomically: a write that cannot finish leaves the previous file and no temporary", "[file_io]") {
  const fs::path dir = fresh_folder("atomic");
  const std::string path = (dir / "checkpoint.safetensors").string();
  write_file_atomically(path, "the previous checkpoint");
  {
    const FileSizeLimit limit(4096);
    CHECK_THROWS_WITH(write_file_atomically(path, std::string(10000, 'x')),
                      Contains(path) && Contains("cannot write 10000 bytes") && Contains("previous content is intact"));
  }
  CHECK(read_whole_file(path) == std::string("the previous checkpoint"));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file() ? 1 : 0;
  CHECK(files == 1);  // no temporary file left
  fs::remove_all(dir);
}

TEST_CASE("append_to_file: all or nothing; a failed row leaves the earlier rows whole", "[file_io]") {
  const fs::path dir = fresh_folder("append");
  const std::string path = (dir / "metrics.csv").string();
  append_to_file(path, "header\n");
  append_to_file(path, "row 1\n");
  {
    const FileSizeLimit limit(4096);
    CHECK_THROWS_WITH(append_to_file(path, std::string(10000, 'r') + "\n"),
                      Contains(path) && Contains("cannot write 10001 bytes") && Contains("nothing was appended"));
  }
  CHECK(read_whole_file(path) == std::string("header\nrow 1\n"));
  append_to_file(path, "row 2\n");
  CHECK(read_whole_file(path) == std::string("header\nrow 1\nrow 2\n"));
  fs::remove_all(dir);
}
