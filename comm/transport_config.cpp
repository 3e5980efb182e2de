// Parsing of the transport's keys of the `communication:` section.
#include "comm/transport_config.h"

namespace qtrain {

TransportConfig TransportConfig::parse(ConfigNode& section) {
  TransportConfig c;
  c.backend = section.get_choice("backend", c.backend, {"auto", "local", "mpi", "nccl"});
  c.mpi_allreduce = section.get_choice("mpi_allreduce", c.mpi_allreduce, {"ring", "library"});
  c.timeout_s = section.get_double("timeout_s", c.timeout_s, 0.0, 7 * 86400.0);
  return c;
}

}  // namespace qtrain
