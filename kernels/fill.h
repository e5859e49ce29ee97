// Fill device buffers with a value: poisoning outputs in tests, zeroing
// caches. Host-side declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace voltad::kernels {

void launch_fill_f32(float* out, size_t n, float value, cudaStream_t stream);
// Writes the raw 16-bit pattern (0x7E00 is an FP16 NaN: a good poison).
void launch_fill_u16(uint16_t* out, size_t n, uint16_t bits, cudaStream_t stream);

}  // namespace voltad::kernels
