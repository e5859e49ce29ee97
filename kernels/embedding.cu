// Embedding gather: one block per token, threads stride over the row and
// decode each value with packed_value (device_common.cuh). A handful of rows
// per step: simplicity beats speed here.
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda_check.h"
#include "kernels/device_common.cuh"
#include "kernels/embedding.h"
#include "kernels/launch.cuh"

namespace voltad::kernels {

__global__ void kernel_embedding_gather(PackedMatrixView table, const int32_t* tokens, float* out,
                                        int64_t ldo) {
  wait_then_release_next();
  const int32_t token = tokens[blockIdx.x];
  float* dst = out + blockIdx.x * ldo;
  const bool valid = token >= 0 && token < table.layout.rows;
  for (int64_t k = threadIdx.x; k < table.layout.cols; k += blockDim.x)
    dst[k] = valid ? packed_value(table, token, k) : __int_as_float(0x7fc00000);
}

void launch_embedding_gather(const PackedMatrixView& table, const int32_t* tokens, int batch,
                             float* out, int64_t ldo, cudaStream_t stream) {
  if (batch < 0 || ldo < table.layout.cols || table.data == nullptr) {
    std::fprintf(stderr, "launch_embedding_gather: bad arguments (batch=%d ldo=%lld)\n", batch,
                 (long long)ldo);
    std::abort();
  }
  if (batch == 0) return;
  launch_kernel(kernel_embedding_gather, batch, 256, 0, stream, table, tokens, out, ldo);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace voltad::kernels
