// Start-up memory check (see memory_budget.h).
#include "framework/core/memory_budget.h"

#include <sstream>

#include "framework/core/check.h"
#include "framework/core/file_io.h"

namespace qtrain {
namespace cuda_memory {
int64_t free_bytes(int index);
}  // namespace cuda_memory

namespace {

std::string read_small_file(const std::string& path) { return read_whole_file(path).value_or(""); }

// A cgroup v2 limit file holds a number of bytes or "max".
int64_t parse_bytes_or_max(const std::string& text) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    return v >= 0 ? v : -1;
  } catch (const std::exception&) {
    return -1;  // "max", empty, or damaged: no limit known
  }
}

}  // namespace

int64_t MemoryFootprint::total() const {
  int64_t sum = 0;
  for (const MemoryItem& i : items) sum += i.bytes;
  return sum;
}

std::string MemoryFootprint::describe() const {
  std::string out;
  for (const MemoryItem& i : items) {
    if (i.bytes == 0) continue;
    if (!out.empty()) out += ", ";
    out += i.what + " " + format_bytes(i.bytes);
  }
  return out;
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024 * 1024) return fmt::format("{:.1f} TiB", b / (1024.0 * 1024 * 1024 * 1024));
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.0f} KiB", b / 1024.0);
  return fmt::format("{} bytes", bytes);
}

int64_t parse_mem_available(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    long long kib = -1;
    std::string unit;
    if (!(fields >> kib >> unit) || kib < 0 || unit != "kB") return -1;
    return static_cast<int64_t>(kib) * 1024;
  }
  return -1;
}

AvailableMemory available_memory(Device device) {
  AvailableMemory a;
  if (device.is_cuda()) {
    a.bytes = cuda_memory::free_bytes(device.index);
    a.source = fmt::format("free memory of {} (cudaMemGetInfo)", device.str());
    return a;
  }
  a.bytes = parse_mem_available(read_small_file("/proc/meminfo"));
  a.source = "MemAvailable in /proc/meminfo";
  // A container's memory limit (cgroup v2) can be far below what the host has free.
  const int64_t limit = parse_bytes_or_max(read_small_file("/sys/fs/cgroup/memory.max"));
  const int64_t usage = parse_bytes_or_max(read_small_file("/sys/fs/cgroup/memory.current"));
  if (limit >= 0 && usage >= 0) {
    const int64_t room = std::max<int64_t>(limit - usage, 0);
    if (a.bytes < 0 || room < a.bytes) {
      a.bytes = room;
      a.source = "the limit of this cgroup (/sys/fs/cgroup/memory.max) minus its usage";
    }
  }
  return a;
}

void check_memory_fits(const MemoryFootprint& footprint, const AvailableMemory& available, int processes, Device device,
                       const std::string& config_file, const std::string& batch_knob) {
  if (available.bytes < 0) return;
  const int64_t each = footprint.total();
  // Compared in double: a footprint near INT64_MAX times the processes must not wrap around.
  const double needed = static_cast<double>(each) * std::max(processes, 1);
  if (needed <= static_cast<double>(available.bytes)) return;
  const std::string who = processes > 1 ? fmt::format("{} replicas on this host need {} ({} each)", processes,
                                                      format_bytes(static_cast<int64_t>(needed)), format_bytes(each))
                                        : fmt::format("this run needs {}", format_bytes(each));
  input_error(
      "{}: not enough memory on {}: {} at least ({}), but {} is available ({}). Reduce the model or "
      "{}{}",
      config_file, device.str(), who, footprint.describe(), format_bytes(available.bytes), available.source, batch_knob,
      processes > 1 ? ", or run fewer ranks per host" : "");
}

}  // namespace qtrain
