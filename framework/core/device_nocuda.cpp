// Builds without the CUDA toolkit: there is no GPU, and any request for one is a clear error.
#include "framework/core/check.h"
#include "framework/core/device.h"

namespace qtrain {

int cuda_device_count() { return 0; }
bool cuda_available() { return false; }

namespace cuda_memory {
[[noreturn]] static void unavailable(const char* what) { QT_FAIL_NO_CUDA("{}", what); }
void* alloc(int, size_t) { unavailable("allocating CUDA memory"); }
void free(int, void*) noexcept {}
void copy(Device, void*, Device, const void*, size_t) { unavailable("copying to or from a CUDA device"); }
void memset_zero(int, void*, size_t) { unavailable("clearing CUDA memory"); }
int64_t free_bytes(int) { unavailable("querying CUDA memory"); }
void set_device(int) { unavailable("selecting a CUDA device"); }
}  // namespace cuda_memory

}  // namespace qtrain
