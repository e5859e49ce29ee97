// Inside the portable narrow GEMM (kernels/gemm_narrow.cu): which order its
// launches build paired B in, and whether 17-32 tokens take 32-token
// blocks. The probe and the switches live in kernels/gemm_narrow_pairs.cu;
// the public side is in kernels/gemm_wmma.h.
#pragma once

#include <cuda_runtime.h>

#include "kernels/wmma_pairs.h"

namespace voltad::kernels {

// The order a launch on `stream` builds its B in (None: the shared tile).
// eight_token_blocks: a launch of 8-token blocks (VOLTAD_NARROW_PAIRS=8
// keeps paired B to those). Before the probe has run (gemm_narrow_pairs), a
// launch being captured into a graph takes the tile (the probe cannot run
// inside a capture).
WmmaPairs narrow_pairs_for(bool eight_token_blocks, cudaStream_t stream);

// 32-token blocks for launches of 17-32 tokens where paired B runs:
// VOLTAD_NARROW_TOKENS32=1 in the environment (off until measured against
// two 16-token blocks; docs/PERFORMANCE.md), or a test's
// gemm_narrow_tokens32_force.
bool narrow_tokens32();

}  // namespace voltad::kernels
