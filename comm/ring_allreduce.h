// Ring allreduce over MPI point-to-point messages, for host buffers (Patarasuk & Yuan 2009; the
// algorithm of gloo, Horovod and NCCL). Open MPI's tuned allreduce picks its algorithm from message
// size and rank count and, over TCP, often lands far from the bandwidth optimum (netbed.md: 1.55x of
// the wire time for 64 MB on 4 ranks); the ring sends 2(P-1)/P of the buffer from every rank, the
// optimum, and pipelines the sums with the transfers.
//
// The buffer is cut into P chunks. In P-1 reduce-scatter steps every rank sends one chunk to its
// right neighbour and adds the chunk arriving from its left one; afterwards rank r holds the complete
// sum of chunk (r+1) mod P. P-1 allgather steps then pass the finished chunks around the ring. Each
// chunk travels in segments, so adding segment k overlaps receiving segment k+1.
//
// Determinism: each chunk is summed by one rank in one fixed (ring) order and then copied, so every
// rank ends with the same bits, run after run. 16-bit values are added in fp32 and rounded to
// nearest even after every addition, like MpiComm's reduction operations.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"

namespace qtrain {

struct RingScratch {
  std::vector<uint8_t> incoming;  // one chunk (reduce-scatter receives here, then adds)
  std::vector<MPI_Request> requests;
  std::vector<size_t> begin, length;  // the chunks' element ranges
};

// In-place sum of `count` elements of `type` at host pointer `data` over `comm` (collective).
// `segment_bytes` is the pipelining unit (rounded down to whole elements; every rank passes the same).
void ring_allreduce(MPI_Comm comm, void* data, size_t count, ReduceType type, size_t segment_bytes,
                    RingScratch& scratch);

// The reduce-scatter phase alone, in place, over blocks of unequal sizes: `data` holds counts[0] +
// ... + counts[P-1] elements, block r after the blocks before it; on return block r of rank r holds
// the sum of every rank's block r (in ring order, so the same bits run after run) and the other
// blocks are partial sums. Each rank sends (P-1)/P of the buffer, half an allreduce's.
void ring_reduce_scatter(MPI_Comm comm, void* data, std::span<const int64_t> counts, ReduceType type,
                         size_t segment_bytes, RingScratch& scratch);

// The allgather phase alone, in place, over the same blocks: block r of rank r reaches block r of
// every rank, copied bit for bit. Each rank sends (P-1)/P of the buffer.
void ring_all_gather(MPI_Comm comm, void* data, std::span<const int64_t> counts, ReduceType type, size_t segment_bytes,
                     RingScratch& scratch);

}  // namespace qtrain
