// cpu_prefetch: software prefetch of the memory a CPU loop reads next. The hardware's stream
// prefetchers follow a sequential read only within a 4 KiB page, and the layers' loops often jump
// between pages: batch norm reads one row of (H, W) per sample at a stride of C planes (a 32x32 float
// row is exactly one page), the Winograd transforms start a new plane every few tile rows. Each jump
// would begin with cache misses; asking for the next row while the current one is processed hides them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qtrain {

// Asks for every 64-byte line of [p, p + bytes) into the L1 cache; touches nothing, never faults.
inline void prefetch_lines(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 3);
}

}  // namespace qtrain
