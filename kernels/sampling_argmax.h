// Greedy sampling on the GPU: the index of each row's largest logit, so only
// 4 bytes per sequence cross PCIe. Host declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace voltad::kernels {

// out[b] = argmax over logits[b][0..n) (stride ld). Ties go to the lowest
// index; NaN never wins; a row of only NaN gives 0.
void launch_argmax(const float* logits, int64_t ld, int rows, int64_t n, int32_t* out,
                   cudaStream_t stream);

}  // namespace voltad::kernels
