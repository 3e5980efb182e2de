// Emulator stand-in for CUDA's vector types (vector_types.h, vector_functions.h): those device code in
// qtrain uses, with CUDA's alignment (8 bytes for two 32-bit members, 16 for four), so sizes, struct
// layouts and vector loads match a GPU's. uint3 and dim3 live in emu/device_functions.h, next to the
// built-in variables that need them. Included by cuda_runtime.h, as the real one is.
#pragma once

struct alignas(8) uint2 {
  unsigned int x, y;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
