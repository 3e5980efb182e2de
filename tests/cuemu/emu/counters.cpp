#include "tests/cuemu/emu/counters.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "tests/cuemu/emu/scheduler.h"

namespace cuemu {
namespace {

constexpr int kCounts = static_cast<int>(Count::kCount);
constexpr int kDirections = 4;

// Atomics: the runtime is called from several host threads at once (the exchange has its own). Relaxed
// increments suffice, as nothing is ordered by a counter. constinit: zero before any static
// initializer of another file could make a counted call.
struct Totals {
  std::atomic<std::uint64_t> counts[kCounts];
  std::atomic<std::uint64_t> copies[kDirections], copy_bytes[kDirections];
  std::atomic<std::uint64_t> launches, blocks, threads, switches, collectives, barriers;
};
constinit Totals g_totals;

struct PerKernel {
  std::mutex mutex;
  std::map<std::string, KernelCounts, std::less<>> kernels;  // less<>: found by the literal, no string built
};
PerKernel& per_kernel() {
  static PerKernel* p = new PerKernel;  // never destroyed: the report at exit reads it
  return *p;
}

// The depth of Uncounted scopes on this thread.
thread_local int t_uncounted = 0;

void add(std::atomic<std::uint64_t>& a, std::uint64_t n) { a.fetch_add(n, std::memory_order_relaxed); }
std::uint64_t get(const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); }

std::uint64_t total(Count c) { return get(g_totals.counts[static_cast<int>(c)]); }

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
      out += esc;
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_field(std::string& out, const char* key, std::uint64_t value) {
  char field[96];
  std::snprintf(field, sizeof field, ",\"%s\":%llu", key, static_cast<unsigned long long>(value));
  out += field;
}

// The MPI rank from the launcher's environment (Open MPI, PMIx), so that the lines of an mpirun's
// ranks can be told apart; JSON null outside one.
std::string rank_json() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"}) {
    const char* e = std::getenv(name);
    if (!e || !*e) continue;
    char* end = nullptr;
    const long r = std::strtol(e, &end, 10);
    if (*end == '\0' && r >= 0) return std::to_string(r);
  }
  return "null";
}

// One JSON object on one line, with a trailing newline.
std::string stats_line() {
  const Counters c = counters();
  std::string out = "{\"pid\":" + std::to_string(::getpid()) + ",\"program\":";
  append_json_string(out, program_invocation_short_name);
  out += ",\"rank\":" + rank_json();
  append_field(out, "host_syncs", c.host_syncs);
  append_field(out, "queries", c.queries);
  append_field(out, "h2d_copies", c.h2d_copies);
  append_field(out, "h2d_bytes", c.h2d_bytes);
  append_field(out, "d2h_copies", c.d2h_copies);
  append_field(out, "d2h_bytes", c.d2h_bytes);
  append_field(out, "d2d_copies", c.d2d_copies);
  append_field(out, "d2d_bytes", c.d2d_bytes);
  append_field(out, "h2h_copies", c.h2h_copies);
  append_field(out, "h2h_bytes", c.h2h_bytes);
  append_field(out, "memsets", c.memsets);
  append_field(out, "allocations", c.allocations);
  append_field(out, "frees", c.frees);
  append_field(out, "allocation_syncs", c.allocation_syncs);
  append_field(out, "event_records", c.event_records);
  append_field(out, "stream_waits", c.stream_waits);
  append_field(out, "launches", c.launches);
  append_field(out, "blocks", c.blocks);
  append_field(out, "threads", c.threads);
  append_field(out, "switches", c.switches);
  append_field(out, "warp_collectives", c.warp_collectives);
  append_field(out, "barriers", c.barriers);
  out += ",\"per_kernel\":{";
  bool first = true;
  for (const auto& [name, k] : c.per_kernel) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, name);
    char counts[160];
    std::snprintf(counts, sizeof counts, ":{\"launches\":%llu,\"blocks\":%llu,\"threads\":%llu}",
                  static_cast<unsigned long long>(k.launches), static_cast<unsigned long long>(k.blocks),
                  static_cast<unsigned long long>(k.threads));
    out += counts;
  }
  out += "}}\n";
  return out;
}

// CUEMU_STATS, read at exit: unset, empty or "0": nothing; "1" or "-": the line on stderr; anything
// else names a file the line is appended to. The whole line goes in one write to a file opened for
// appending, so that the lines of processes ending together (the ranks of an mpirun, ctest -j) do not
// interleave. A file that cannot be written aborts: a run that asked for its counters and silently
// got none would pass a check that reads them.
void report() {
  const char* const target = std::getenv("CUEMU_STATS");
  if (!target || !*target || std::strcmp(target, "0") == 0) return;
  const std::string line = stats_line();
  if (std::strcmp(target, "1") == 0 || std::strcmp(target, "-") == 0) {
    std::fprintf(stderr, "cuemu stats: %s", line.c_str());
    return;
  }
  const int fd = ::open(target, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail("CUEMU_STATS=%s: %s", target, std::strerror(errno));
  const ssize_t written = ::write(fd, line.data(), line.size());
  ::close(fd);
  if (written != static_cast<ssize_t>(line.size())) fail("CUEMU_STATS=%s: short write", target);
}

// Reports when static objects are destroyed: after main returns or exit() is called, not on abort or
// _exit (the death tests' children leave no line).
struct Reporter {
  ~Reporter() { report(); }
};
Reporter g_reporter;

}  // namespace

Counters counters() {
  Counters c;
  c.host_syncs = total(Count::HostSyncs);
  c.queries = total(Count::Queries);
  c.memsets = total(Count::Memsets);
  c.allocations = total(Count::Allocations);
  c.frees = total(Count::Frees);
  c.allocation_syncs = total(Count::AllocationSyncs);
  c.event_records = total(Count::EventRecords);
  c.stream_waits = total(Count::StreamWaits);
  const auto copies = [](CopyDirection d) { return get(g_totals.copies[static_cast<int>(d)]); };
  const auto bytes = [](CopyDirection d) { return get(g_totals.copy_bytes[static_cast<int>(d)]); };
  c.h2d_copies = copies(CopyDirection::HostToDevice);
  c.h2d_bytes = bytes(CopyDirection::HostToDevice);
  c.d2h_copies = copies(CopyDirection::DeviceToHost);
  c.d2h_bytes = bytes(CopyDirection::DeviceToHost);
  c.d2d_copies = copies(CopyDirection::DeviceToDevice);
  c.d2d_bytes = bytes(CopyDirection::DeviceToDevice);
  c.h2h_copies = copies(CopyDirection::HostToHost);
  c.h2h_bytes = bytes(CopyDirection::HostToHost);
  c.launches = get(g_totals.launches);
  c.blocks = get(g_totals.blocks);
  c.threads = get(g_totals.threads);
  c.switches = get(g_totals.switches);
  c.warp_collectives = get(g_totals.collectives);
  c.barriers = get(g_totals.barriers);
  PerKernel& p = per_kernel();
  std::lock_guard<std::mutex> lock(p.mutex);
  c.per_kernel.insert(p.kernels.begin(), p.kernels.end());
  return c;
}

Counters operator-(const Counters& later, const Counters& earlier) {
  Counters d;
  d.host_syncs = later.host_syncs - earlier.host_syncs;
  d.queries = later.queries - earlier.queries;
  d.h2d_copies = later.h2d_copies - earlier.h2d_copies;
  d.h2d_bytes = later.h2d_bytes - earlier.h2d_bytes;
  d.d2h_copies = later.d2h_copies - earlier.d2h_copies;
  d.d2h_bytes = later.d2h_bytes - earlier.d2h_bytes;
  d.d2d_copies = later.d2d_copies - earlier.d2d_copies;
  d.d2d_bytes = later.d2d_bytes - earlier.d2d_bytes;
  d.h2h_copies = later.h2h_copies - earlier.h2h_copies;
  d.h2h_bytes = later.h2h_bytes - earlier.h2h_bytes;
  d.memsets = later.memsets - earlier.memsets;
  d.allocations = later.allocations - earlier.allocations;
  d.frees = later.frees - earlier.frees;
  d.allocation_syncs = later.allocation_syncs - earlier.allocation_syncs;
  d.event_records = later.event_records - earlier.event_records;
  d.stream_waits = later.stream_waits - earlier.stream_waits;
  d.launches = later.launches - earlier.launches;
  d.blocks = later.blocks - earlier.blocks;
  d.threads = later.threads - earlier.threads;
  d.switches = later.switches - earlier.switches;
  d.warp_collectives = later.warp_collectives - earlier.warp_collectives;
  d.barriers = later.barriers - earlier.barriers;
  for (const auto& [name, k] : later.per_kernel) {
    KernelCounts before;
    if (const auto it = earlier.per_kernel.find(name); it != earlier.per_kernel.end()) before = it->second;
    if (k.launches == before.launches) continue;
    d.per_kernel[name] = {k.launches - before.launches, k.blocks - before.blocks, k.threads - before.threads};
  }
  return d;
}

Uncounted::Uncounted() { ++t_uncounted; }
Uncounted::~Uncounted() { --t_uncounted; }

void count(Count c) {
  if (t_uncounted == 0) add(g_totals.counts[static_cast<int>(c)], 1);
}

void count_copy(CopyDirection d, std::uint64_t bytes, bool host_sync) {
  if (t_uncounted != 0) return;
  add(g_totals.copies[static_cast<int>(d)], 1);
  add(g_totals.copy_bytes[static_cast<int>(d)], bytes);
  if (host_sync) add(g_totals.counts[static_cast<int>(Count::HostSyncs)], 1);
}

void count_launch(const char* kernel, const LaunchCost& cost) {
  if (t_uncounted != 0) return;
  add(g_totals.launches, 1);
  add(g_totals.blocks, cost.blocks);
  add(g_totals.threads, cost.threads);
  add(g_totals.switches, cost.switches);
  add(g_totals.collectives, cost.collectives);
  add(g_totals.barriers, cost.barriers);
  PerKernel& p = per_kernel();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto it = p.kernels.find(kernel);
  if (it == p.kernels.end()) it = p.kernels.emplace(kernel, KernelCounts{}).first;
  ++it->second.launches;
  it->second.blocks += cost.blocks;
  it->second.threads += cost.threads;
}

}  // namespace cuemu
