// cuRAND's host generator handle (see include/curand.h); the device API is header code
// (include/curand_kernel.h).
#include <curand.h>

struct curandGenerator_st {
  curandRngType_t type;
  unsigned long long seed = 0;
  cudaStream_t stream = nullptr;
};

curandStatus_t curandCreateGenerator(curandGenerator_t* generator, curandRngType_t type) {
  if (type != CURAND_RNG_PSEUDO_PHILOX4_32_10 && type != CURAND_RNG_PSEUDO_DEFAULT && type != CURAND_RNG_PSEUDO_XORWOW)
    return CURAND_STATUS_TYPE_ERROR;
  *generator = new curandGenerator_st{type};
  return CURAND_STATUS_SUCCESS;
}
curandStatus_t curandDestroyGenerator(curandGenerator_t generator) {
  if (!generator) return CURAND_STATUS_NOT_INITIALIZED;
  delete generator;
  return CURAND_STATUS_SUCCESS;
}
curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t generator, unsigned long long seed) {
  if (!generator) return CURAND_STATUS_NOT_INITIALIZED;
  generator->seed = seed;
  return CURAND_STATUS_SUCCESS;
}
curandStatus_t curandSetStream(curandGenerator_t generator, cudaStream_t stream) {
  if (!generator) return CURAND_STATUS_NOT_INITIALIZED;
  generator->stream = stream;
  return CURAND_STATUS_SUCCESS;
}
