// The decode attention alone (not part of the build): the three pass-1
// kernels (the portable one; the sm_80+ tensor-core one,
// AttentionArgs::tensor_cores; the wmma one, AttentionArgs::wmma) at
// Llama-3-8B's shapes (32 heads, 8 KV heads, head_dim
// 128), 1, 8 and 32 sequences at 512 and 4,096 positions, each under
// `portable` and `auto` launches, with the combine in pass 1 from 8
// sequences as the backend has it. Prints us a launch and the cache bytes
// read a second. One file with the kernels' sources, built in well under
// a minute (scripts/device-test.sh --bench=attention):
//   nvcc -std=c++17 -O3 -I. -arch=sm_90 --expt-relaxed-constexpr -lineinfo \
//     kernels/dev/bench_attention.cu -o /tmp/bench_attention
// With arguments SEQS CTX KERNEL (portable, mma or wmma), that case alone under
// `auto`, for Nsight Compute (scripts/device-profile.sh has the sections);
// a fourth argument `rope` runs it with RoPE inside (AttentionArgs::rope:
// q from the raw projection, the own k and v rotated and written by the
// kernel), as the decode graph does. The full table has each kernel both
// ways (`+rope`).
// The cache values are a fixed pattern (timing does not depend on them;
// test_attention checks the outputs). Each sequence's blocks are its own,
// so no launch finds another's rows in L2 beyond what a step would.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/attention.cu"
#include "kernels/attention_sm80.cu"
#include "kernels/attention_wmma.cu"
#include "kernels/dev/bench_timing.cuh"
#include "kernels/launch.cu"

using namespace voltad::kernels;

int main(int argc, char** argv) {
  const bool one = argc == 4 || argc == 5;
  const bool one_rope = argc == 5 && std::string(argv[4]) == "rope";
  const int n_heads = 32, n_kv_heads = 8, hd = 128, kv_dim = n_kv_heads * hd;
  const int max_seqs = 32, max_ctx = 4096 + 1;
  const int blocks_per_seq = (max_ctx + kKvBlockTokens - 1) / kKvBlockTokens;
  // Two caches used in turn: a step's 64 MB (32 x 512) would stay in the
  // H200's L2 otherwise.
  const size_t slots = size_t(max_seqs) * size_t(blocks_per_seq) * kKvBlockTokens;
  uint16_t* caches[2][2];
  for (auto& c : caches)
    for (auto& half : c) {
      CUDA_CHECK(cudaMalloc(&half, slots * kv_dim * sizeof(uint16_t)));
      CUDA_CHECK(cudaMemset(half, 0x2e, slots * kv_dim * sizeof(uint16_t)));  // small finite halves
    }
  std::vector<int32_t> tables(size_t(max_seqs) * blocks_per_seq);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = int32_t(i);
  int32_t *d_tables, *d_pos, *d_tt;
  float *q, *out, *partials;
  uint32_t* arrivals;
  CUDA_CHECK(cudaMalloc(&d_tables, tables.size() * sizeof(int32_t)));
  CUDA_CHECK(
      cudaMemcpy(d_tables, tables.data(), tables.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMalloc(&d_pos, max_seqs * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&d_tt, max_seqs * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&q, size_t(max_seqs) * n_heads * hd * sizeof(float)));
  CUDA_CHECK(cudaMemset(q, 0, size_t(max_seqs) * n_heads * hd * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&out, size_t(max_seqs) * n_heads * hd * sizeof(float)));
  const size_t part = attention_partial_floats(max_seqs, n_heads, hd, max_ctx);
  CUDA_CHECK(cudaMalloc(&partials, part * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&arrivals, size_t(max_seqs) * n_kv_heads * sizeof(uint32_t)));
  CUDA_CHECK(cudaMemset(arrivals, 0, size_t(max_seqs) * n_kv_heads * sizeof(uint32_t)));
  // RoPE inside: the raw q|k|v rows (zeros), Llama-3's frequencies, and
  // each sequence's own slot (its block table is its own, so that slot is
  // in its last block).
  const int q_dim = n_heads * hd, ld_qkv = q_dim + 2 * kv_dim;
  float *qkv, *inv_freq;
  int32_t* d_slots;
  CUDA_CHECK(cudaMalloc(&qkv, size_t(max_seqs) * ld_qkv * sizeof(float)));
  CUDA_CHECK(cudaMemset(qkv, 0, size_t(max_seqs) * ld_qkv * sizeof(float)));
  std::vector<float> freqs(hd / 2);
  for (int i = 0; i < hd / 2; ++i) freqs[size_t(i)] = std::pow(500000.0f, -2.0f * i / hd);
  CUDA_CHECK(cudaMalloc(&inv_freq, freqs.size() * sizeof(float)));
  CUDA_CHECK(
      cudaMemcpy(inv_freq, freqs.data(), freqs.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMalloc(&d_slots, max_seqs * sizeof(int32_t)));

  std::printf("%-28s %-13s %-8s %6s %9s %8s\n", "case", "kernel", "launch", "pieces", "us", "GB/s");
  for (int ctx : {512, 4096})
    for (int seqs : {1, 8, 32}) {
      if (one && (seqs != std::atoi(argv[1]) || ctx != std::atoi(argv[2]))) continue;
      const std::vector<int32_t> pos(static_cast<size_t>(seqs), ctx);
      std::vector<int32_t> tt(static_cast<size_t>(seqs));
      for (int s = 0; s < seqs; ++s) tt[size_t(s)] = s;
      CUDA_CHECK(cudaMemcpy(d_pos, pos.data(), seqs * sizeof(int32_t), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d_tt, tt.data(), seqs * sizeof(int32_t), cudaMemcpyHostToDevice));
      std::vector<int32_t> slots(static_cast<size_t>(seqs));
      for (int s = 0; s < seqs; ++s)
        slots[size_t(s)] =
            int32_t((int64_t(s) * blocks_per_seq + ctx / kKvBlockTokens) * kKvBlockTokens +
                    ctx % kKvBlockTokens);
      CUDA_CHECK(cudaMemcpy(d_slots, slots.data(), seqs * sizeof(int32_t), cudaMemcpyHostToDevice));
      AttentionArgs a;
      a.q = q;
      a.ldq = n_heads * hd;
      a.out = out;
      a.ldo = n_heads * hd;
      a.positions = d_pos;
      a.token_tables = d_tt;
      a.block_tables = d_tables;
      a.table_stride = blocks_per_seq;
      a.n_tokens = seqs;
      a.n_heads = n_heads;
      a.n_kv_heads = n_kv_heads;
      a.head_dim = hd;
      a.max_position = ctx;
      a.scale = 0.088f;
      a.partials = partials;
      a.arrivals = seqs >= 8 ? arrivals : nullptr;
      a.own_position_only = true;
      const double bytes = double(seqs) * (ctx + 1) * kv_dim * 2 * sizeof(uint16_t);
      for (const char* kernel : {"portable", "mma", "wmma"})
        for (bool rope : {false, true})
          for (KernelSet set : {KernelSet::Portable, KernelSet::Auto}) {
            if (one &&
                (set != KernelSet::Auto || std::string(argv[3]) != kernel || rope != one_rope))
              continue;
            const KernelSetScope scope(set);
            a.rope = AttentionArgs::Rope{};
            a.q = q;
            a.ldq = q_dim;
            if (rope) {
              a.q = qkv;
              a.ldq = ld_qkv;
              a.rope.inv_freq = inv_freq;
              a.rope.k = qkv + q_dim;
              a.rope.v = qkv + q_dim + kv_dim;
              a.rope.ldkv = ld_qkv;
              a.rope.slots = d_slots;
            }
            a.tensor_cores = std::string(kernel) == "mma";
            a.wmma = std::string(kernel) == "wmma";
            const int pieces = attention_launch_pieces(a);
            int i = 0;
            const float ms = bench_timing::time_ms(
                [&] {
                  for (int r = 0; r < 8; ++r, ++i) {
                    a.cache = {caches[i % 2][0], caches[i % 2][1]};
                    launch_attention(a, nullptr);
                  }
                },
                nullptr, 4);
            const double us = ms * 1e3 / 8;
            char name[64];
            std::snprintf(name, sizeof name, "b%d ctx %d", seqs, ctx);
            const std::string label = std::string(kernel) + (rope ? "+rope" : "");
            std::printf("%-28s %-13s %-8s %6d %9.2f %8.0f\n", name, label.c_str(),
                        kernel_set_name(set), pieces, us, bytes / (us * 1e-6) / 1e9);
          }
    }
  return 0;
}
