// A run's synchronization schedule (see sync_schedule.h).
#include "tools/qtrain/sync_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "framework/core/check.h"
#include "tools/qtrain/method_list.h"
#include "train/sync/diloco.h"
#include "train/sync/sync_strategy.h"

namespace qtrain::cli {

std::string SyncSchedule::str() const {
  switch (type) {
    case Type::every_step: return "every step";
    case Type::demo: return "DeMo";
    case Type::diloco: break;
  }
  std::string s = fmt::format("DiLoCo H={}", inner_steps);
  if (fragments > 1 || overlap > 0) s += fmt::format(" F={} tau={}", fragments, overlap);
  return s;
}

int64_t SyncSchedule::exchanges(int64_t steps) const {
  if (type != Type::diloco) return steps;
  // Fragment f's offset as DiLoCoSync computes it (f H / F, integer division); the steps s in 1..steps
  // with s + shift a multiple of H number floor((steps + shift) / H), since shift < H.
  int64_t n = 0;
  for (int64_t f = 0; f < fragments; ++f) n += (steps + f * inner_steps / fragments) / inner_steps;
  return n;
}

SyncSchedule parse_sync_schedule(ConfigNode sync) {
  SyncSchedule s;
  const std::string type = sync.get_choice("type", "every_step", sync_registry().names());
  if (type == "every_step") {
    sync.finish();  // the per-step strategy has no keys of its own: a stray sync.inner_steps is an error there too
    return s;
  }
  if (type == "demo") {
    s.type = SyncSchedule::Type::demo;
    return s;
  }
  if (type != "diloco")
    sync.fail("type", fmt::format("'{}' is a strategy whose schedule compare, report and predict do not know yet "
                                  "(tools/qtrain/sync_schedule.cpp)",
                                  type));
  s.type = SyncSchedule::Type::diloco;
  const DiLoCoPeriod period = read_diloco_period(sync);
  s.inner_steps = period.inner_steps;
  s.fragments = period.fragments;
  s.overlap = period.overlap;
  return s;
}

std::vector<std::string> schedule_overrides(const std::string& schedule, const std::string& entry) {
  std::vector<std::string> out;
  for (const std::string& part : split_on(schedule, ':')) {
    if (out.empty()) {
      if (part.empty() || part.find('=') != std::string::npos)
        input_error("--methods {}: expected a sync.type after '@' (one of {}), got '{}'", entry,
                    fmt::join(sync_registry().names(), ", "), part);
      const std::vector<std::string> names = sync_registry().names();
      if (std::find(names.begin(), names.end(), part) == names.end())
        input_error("--methods {}: unknown sync.type '{}' after '@'; one of {}", entry, part, fmt::join(names, ", "));
      out.push_back("sync.type=" + part);
      continue;
    }
    const size_t eq = part.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == part.size())
      input_error("--methods {}: expected key=value of the sync section after '@{}', got '{}'", entry,
                  out.front().substr(10), part);
    const std::string key = part.substr(0, eq);
    for (const std::string& o : out)
      if (o.rfind("sync." + key + "=", 0) == 0) input_error("--methods {}: 'sync.{}' is given twice", entry, key);
    out.push_back("sync." + part);
  }
  return out;
}

}  // namespace qtrain::cli
