// Sampling at a temperature by the Gumbel-max trick, the same on the host
// and the GPU: the token whose key logit / T + G is largest, where G is
// standard Gumbel noise, is a draw from softmax(logits / T) (Gumbel 1954;
// as used for sampling by Maddison, Tarlow and Minka, "A* Sampling", 2014). G comes from a
// counter-based generator, a function of (seed, draw, token), so that the
// GPU's top-k (kernels/topk.h, one candidate a row) and the host's sampler
// (engine/sampler.h) pick the same token from the same row, whatever the
// batch, without a row crossing PCIe (but where two keys lie within an ulp:
// the host's logf and the GPU's may differ by one).
//
// The generator is the SplitMix64 finalizer (Steele, Lea and Flood,
// "Fast splittable pseudorandom number generators", OOPSLA 2014) applied to
// the draw's base plus the token id; the base mixes the seed with the draw's
// number. Plain C++: kernels and engine both include it.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace voltad::kernels {

// One row's noise: the sampler's seed, the number of its draw (a
// sequence's n-th token), the temperature (> 0). on == 0: the row is
// ranked by its logits alone (no noise).
struct RowNoise {
  uint64_t seed = 0;
  uint64_t draw = 0;
  float temperature = 1.0f;
  uint32_t on = 0;
};
static_assert(sizeof(RowNoise) == 24, "RowNoise: 24 bytes, as the CUDA backend uploads it");

VOLTAD_HD inline uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The row's base: computed once a row.
VOLTAD_HD inline uint64_t noise_base(const RowNoise& n) {
  return splitmix64(n.seed ^ splitmix64(n.draw));
}

// Token i's uniform in (0, 1): 23 bits, offset by half a step, never 0 or
// 1. (24 bits would not do: 2^24 - 0.5 rounds to 2^24 in a float, u to 1,
// and the key to +inf, a token drawn whatever its logit one time in 2^24.)
VOLTAD_HD inline float uniform_of_bits(uint64_t h) {
  return (float(uint32_t(h >> 41)) + 0.5f) * (1.0f / 8388608.0f);
}
VOLTAD_HD inline float noise_uniform(uint64_t base, int64_t i) {
  return uniform_of_bits(splitmix64(base + uint64_t(i)));
}

// Token i's key: logit + T G, G = -log(-log(u)), in one rounding (fmaf,
// on the host as on the GPU). T times logit / T + G: the same order, and no
// overflow where T is near the smallest float (logit / T would be infinite
// for every positive logit; T G vanishes and the best logit wins). NaN
// stays NaN (ranked last by the top-k, as a NaN logit is).
VOLTAD_HD inline float noise_key(float logit, float temperature, uint64_t base, int64_t i) {
  const float u = noise_uniform(base, i);
  return fmaf(temperature, -logf(-logf(u)), logit);
}

}  // namespace voltad::kernels
