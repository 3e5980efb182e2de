// The transport's keys of the `communication:` config section (the rest belong to the gradient
// exchange, exchange/exchange_config.h): which communicator, how the MPI backend sums large buffers,
// and the watchdog's timeout.
#pragma once

#include <string>

#include "framework/core/config_node.h"

namespace qtrain {

struct TransportConfig {
  std::string backend = "auto";  // auto | local | mpi | nccl
  // How the mpi backend sums buffers of 64 KiB and more: qtrain's pipelined ring
  // (comm/ring_allreduce.h) or the MPI library's MPI_Allreduce (its own algorithm choice).
  std::string mpi_allreduce = "ring";  // ring | library
  // The watchdog (comm/watchdog.h): a rank that waits this long in one collective without progress
  // ends the job with a message naming the operation and the peer. 0: wait for ever. The default is
  // PyTorch's NCCL timeout: long enough for rank 0 to write a large checkpoint while the others wait.
  double timeout_s = 600;

  // Reads its keys of `section`; the caller finishes the section (it holds the exchange's keys too).
  static TransportConfig parse(ConfigNode& section);
};

}  // namespace qtrain
