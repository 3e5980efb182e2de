// The memory a training run needs, checked at start-up against what the machine has. Linux
// overcommits host memory: an allocation far larger than the free memory succeeds, and the process
// is killed without a message (the OOM killer, exit 137) when it first touches the pages, perhaps
// minutes later and perhaps taking other processes with it. So the trainer adds up the large
// allocations it is about to make, before making them, and refuses with the sizes when they cannot
// fit. The sum is a lower bound (layer workspaces, exchange buffers and the input pipeline come on
// top), so a run that passes can still run short; one that fails could never have run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/device.h"

namespace qtrain {

struct MemoryItem {
  std::string what;  // "parameters", "adam state", "activations (batch 128)"
  int64_t bytes = 0;
};

struct MemoryFootprint {
  std::vector<MemoryItem> items;
  int64_t total() const;
  // "parameters 3.1 GiB, gradients 3.1 GiB, ..."
  std::string describe() const;
};

// Memory available to a new allocation on `device`, in bytes, and where the figure comes from
// ("MemAvailable in /proc/meminfo", "the cgroup limit memory.max", "cudaMemGetInfo"). On the CPU it
// is the lower of MemAvailable and the cgroup's limit minus its usage; -1 when nothing can be read.
struct AvailableMemory {
  int64_t bytes = -1;
  std::string source;
};
AvailableMemory available_memory(Device device);

// Parses a /proc/meminfo text: MemAvailable in bytes, -1 when absent or malformed.
int64_t parse_mem_available(const std::string& meminfo);

// InputError when `processes` copies of `footprint` (the ranks sharing this host's memory, or 1 per
// GPU) exceed `available`; the message names `config_file`, each item and the remedies. Does
// nothing when the available memory is unknown.
void check_memory_fits(const MemoryFootprint& footprint, const AvailableMemory& available, int processes, Device device,
                       const std::string& config_file, const std::string& batch_knob = "data.batch_size");

// "3.1 GiB", "512.0 MiB", "12 KiB", "2.0 TiB"
std::string format_bytes(int64_t bytes);

}  // namespace qtrain
