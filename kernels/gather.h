// Row gather: dst[i] = src[rows[i]] for fp32 rows (picking the tokens whose
// logits are wanted out of a step). Host declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace voltad::kernels {

void launch_gather_rows(const float* src, int64_t ld_src, const int32_t* rows, int n_rows, int width, float* dst,
                        int64_t ld_dst, cudaStream_t stream);

}  // namespace voltad::kernels
