// The log of a logits row's softmax normalizer, log(sum(exp(x))), on the
// GPU: with it and a row's top-k (kernels/topk.h) the host has the
// log-probabilities of the k best tokens (OpenAI's `logprobs`) without
// copying the whole vocabulary across PCIe. Host declarations only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace voltad::kernels {

// For each of `rows` rows of n values (row stride ld >= n): out[row] =
// max + log(sum(exp(x - max))), in double; -inf for a row of -inf only. Values are
// meant to be finite or -inf (logits); NaN or +inf make the result NaN.
void launch_row_log_sum_exp(const float* x, int64_t ld, int rows, int64_t n, double* out,
                            cudaStream_t stream);

}  // namespace voltad::kernels
