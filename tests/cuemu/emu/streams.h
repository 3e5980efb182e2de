// Streams held up by work that never ends, for the library shims: an NCCL collective whose peer failed
// leaves its kernel waiting on a GPU, so the stream never drains until the communicator is aborted.
// While a stream is stalled, cudaStreamQuery reports cudaErrorNotReady, and a host wait for it
// (cudaStreamSynchronize, cudaDeviceSynchronize) aborts with `why`, where a GPU would hang. Work
// enqueued behind the stall still runs at once (streams are synchronous): its results are those it
// would have after the abort released the stream.
#pragma once

#include <cuda_runtime.h>

namespace cuemu {

// False for a stream that was never created or is destroyed (null, legacy and per-thread are live).
bool stream_is_live(cudaStream_t s);
// Stalls `s` with the reason `why` (a static string), or releases it when `why` is null.
void set_stream_stalled(cudaStream_t s, const char* why);

}  // namespace cuemu
