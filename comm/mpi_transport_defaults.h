// Open MPI settings that qtrain's exchange needs over TCP, applied before MPI_Init unless the user
// set them. Why: a message above btl_tcp_eager_limit (64 KiB by default) uses the rendezvous protocol,
// whose handshake the receiver answers only from inside an MPI call. The streaming collectives post a
// payload and go on encoding the next one, so every large payload waited for its receiver to finish
// computing, and the links sat idle (docs/performance.md, "Fourth pass"). Eager messages up to 64 MiB
// need no handshake: the kernel's socket buffers carry them while both ranks compute. Shared memory
// (vader) and other transports ignore these parameters; other MPI libraries ignore the variables.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

namespace qtrain {

// The (environment variable, value) pairs set_mpi_transport_defaults applies.
const std::vector<std::pair<std::string_view, std::string_view>>& mpi_transport_defaults();

// Sets each variable of mpi_transport_defaults() that is not already in the environment (a user's
// `mpirun --mca btl_tcp_eager_limit N` arrives as OMPI_MCA_btl_tcp_eager_limit and wins). Call before
// MPI_Init; later it has no effect.
void set_mpi_transport_defaults();

}  // namespace qtrain
