// Token embedding gather: rows of a packed matrix (any PackedFormat) decoded
// to fp32. Host declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matvec_format.h"

namespace voltad::kernels {

// out[b][0..cols) = table row tokens[b]; a token outside [0, rows) gives a
// row of NaN (the engine validates tokens; this only keeps a bug visible).
void launch_embedding_gather(const PackedMatrixView& table, const int32_t* tokens, int batch,
                             float* out, int64_t ldo, cudaStream_t stream);

}  // namespace voltad::kernels
