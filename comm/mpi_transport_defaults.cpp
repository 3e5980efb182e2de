#include "comm/mpi_transport_defaults.h"

#include <cstdlib>
#include <string>

namespace qtrain {

const std::vector<std::pair<std::string_view, std::string_view>>& mpi_transport_defaults() {
  // 64 MiB: the largest payload a shipped config sends in one message (AlexNet's fc6 at 8 bits is
  // 37.7 MB) fits. The eager fragments point into the user's buffer, so this costs no memory up front.
  static const std::vector<std::pair<std::string_view, std::string_view>> defaults = {
      {"OMPI_MCA_btl_tcp_eager_limit", "67108864"},
      {"OMPI_MCA_btl_tcp_rndv_eager_limit", "67108864"},
      {"OMPI_MCA_btl_tcp_max_send_size", "67108864"},
  };
  return defaults;
}

void set_mpi_transport_defaults() {
  for (const auto& [name, value] : mpi_transport_defaults())
    setenv(std::string(name).c_str(), std::string(value).c_str(), /*overwrite=*/0);
}

}  // namespace qtrain
