// Argument checks and buffer bookkeeping shared by the transports (LocalComm, MpiComm, NcclComm, and
// python/'s PythonCollectivesComm), so that every implementation rejects the same mistakes with the
// same words: each check names the operation, and runs once at the entry. For the transports only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"

namespace qtrain::comm_detail {

// count >= 0, data non-null when count > 0, a known type.
void check_reduce_args(const char* op, const void* data, int64_t count, ReduceType type);
// root in [0, world).
void check_root(const char* op, int root, int world);
// One size and one offset per rank, every block inside the send buffer.
void check_all_to_all_args(const char* op, size_t send_bytes, const std::vector<size_t>& send_sizes,
                           const std::vector<size_t>& send_offsets, int world);

// Rank s sent at most capacity[s] bytes (one capacity per rank): more is a malformed exchange.
void check_capacities(const char* op, const std::vector<size_t>& capacity, const std::vector<size_t>& sizes, int world);
// offsets[r] = sizes[0] + ... + sizes[r - 1]; returns the total.
size_t exclusive_offsets(const std::vector<size_t>& sizes, std::vector<size_t>& offsets);
// `send` does not point into recv's storage: resizing recv could move it, and MPI and NCCL forbid
// aliased send and receive buffers.
void check_send_outside(const char* op, std::span<const uint8_t> send, const std::vector<uint8_t>& recv);

}  // namespace qtrain::comm_detail
