// Inside the portable narrow GEMM (kernels/gemm_narrow.cu): which order its
// launches build paired B in. The probe and the switches live in
// kernels/gemm_narrow_pairs.cu; the public side (gemm_narrow_tokens32
// among it) is in kernels/gemm_wmma.h.
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

// On unless VOLTAD_NARROW_TOKENS32=0 is in the environment, or as a test's
// gemm_narrow_tokens32_force says: 17-32 tokens in 32-token blocks where
// paired B runs (the launch asks narrow_pairs_for).
bool narrow_tokens32_switch();

}  // namespace voltad::kernels
