// The kernels that make a matrix product's x (RMSNorm, SwiGLU, the
// attention's combine) and also write it in the narrow GEMMs' fp16 layout,
// so that the GEMM skips its conversion (GemmScratch::holds_x): the sm_80
// one and the portable one must then give what they give converting the
// plain x themselves. Last, the narrow product that makes the next RMSNorm
// in pieces as it writes the residual stream, and its readers.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/weight_repack.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/gemm_sm80.h"
#include "kernels/norm.h"
#include "tests/kernels/device_matrix.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/random_weights.h"

using namespace voltad;
using namespace voltad::test;

namespace {

bool device_is_sm80_plus() {
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

// A kernel that makes x and can also write it in the narrow GEMMs' fp16
// layout, both ways: plain(out) writes fp32 x (n rows of cols, stride cols);
// narrow(out, scratch) writes it too, plus the GEMMs' x into the scratch. A
// GEMM told that the scratch holds x (GemmScratch::holds_x; the fp32 x is
// zeroed first, so a GEMM that converted it after all would see zeros) must
// give the result of a GEMM that converts the plain x itself: under `auto`
// on an sm_80+ device the sm_80 narrow GEMM (its fp16 x the same bytes;
// bit-identical for Q4_0 and Q6_K, within 1e-5 for Q4_K, whose x sums may
// be added in another order), and under `portable` the portable one
// (launch_gemm_narrow_x16: the same fp16 operands, each 32 values of k in
// another order in the MMAs: within 1e-5).
template <class Plain, class Narrow>
void check_narrow_x(int n, int64_t cols, Plain plain, Narrow narrow) {
  std::mt19937& rng = test_rng();
  const int64_t rows = 300;
  for (kernels::KernelSet set : {kernels::KernelSet::Portable, kernels::KernelSet::Auto}) {
    const bool portable = set == kernels::KernelSet::Portable;
    if (!portable && !(device_is_sm80_plus() && kernels::gemm_sm80_available())) {
      MESSAGE("not an sm_80+ device with the sm_80 variant built: auto skipped");
      continue;
    }
    CAPTURE(portable);
    std::vector<GgmlType> types = {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K};
    if (portable) types.push_back(GgmlType::Q4_1);
    for (GgmlType type : types) {
      CAPTURE(ggml_type_name(type));
      const std::vector<uint8_t> gguf = random_valid_tensor(type, rows, cols, rng, 15);
      auto packed = repack_matrix(type, gguf.data(), rows, cols);
      REQUIRE(packed.ok());
      DeviceBuffer<uint8_t> d_w(packed->bytes);
      DeviceBuffer<float> out_a(size_t(n * cols)), out_b(size_t(n * cols));
      DeviceBuffer<float> y_a(size_t(n * rows)), y_b(size_t(n * rows));
      const size_t bytes = kernels::gemm_narrow_sm80_scratch_bytes(n, cols);
      DeviceBuffer<uint8_t> s_a(bytes), s_b(bytes);
      CUDA_CHECK(cudaMemset(s_a.get(), 0xFF, bytes));
      CUDA_CHECK(cudaMemset(s_b.get(), 0xFF, bytes));
      kernels::GemmArgs g;
      g.w = {packed->layout, d_w.get()};
      g.ldx = cols;
      g.n = n;
      g.ldy = rows;
      plain(out_a.get());
      g.x = out_a.get();
      g.y = y_a.get();
      const kernels::GemmScratch sa{s_a.get(), bytes};
      // The sm_80 GEMM called as such: the tests may run with
      // VOLTAD_GEMM_SM80_ALWAYS=1, which puts the prefill variant first.
      auto gemm = [&](const kernels::GemmScratch& s) {
        if (portable)
          kernels::launch_gemm_for(set, g, s, nullptr);
        else
          kernels::launch_gemm_narrow_sm80(g, s, nullptr);
      };
      REQUIRE((portable ? kernels::gemm_for_reads_narrow_x(set, g, sa)
                        : kernels::gemm_narrow_sm80_supports(g, sa)));
      gemm(sa);
      REQUIRE(narrow(out_b.get(), s_b.get()));
      CHECK(same_bits(out_a.download(), out_b.download()));
      CUDA_CHECK(cudaMemset(out_b.get(), 0, out_b.size() * sizeof(float)));
      g.x = out_b.get();
      g.y = y_b.get();
      kernels::GemmScratch sb{s_b.get(), bytes};
      sb.holds_x = out_b.get();
      gemm(sb);
      if (!portable) {
        // The fp16 x of the n rows is the same bytes (16 words per row and
        // chunk); the portable GEMM writes no scratch.
        const std::vector<uint8_t> ba = s_a.download(), bb = s_b.download();
        const int n8 = (n + 7) / 8 * 8;
        int differ = 0;
        for (int64_t c = 0; c < cols / 32; ++c)
          for (int t = 0; t < n; ++t)
            differ +=
                std::memcmp(ba.data() + (c * n8 + t) * 64, bb.data() + (c * n8 + t) * 64, 64) != 0;
        CHECK(differ == 0);
      }
      const std::vector<float> ra = y_a.download(), rb = y_b.download();
      double worst = 0.0, scale = 1e-30;
      for (size_t i = 0; i < ra.size(); ++i) {
        worst = std::max(worst, std::fabs(double(ra[i]) - double(rb[i])));
        scale = std::max(scale, std::fabs(double(ra[i])));
      }
      if (portable || type == GgmlType::Q4_K)
        CHECK(worst <= 1e-5 * scale);
      else
        CHECK(worst == 0.0);
      if (portable)
        MESSAGE(ggml_type_name(type) << " portable, n " << n << ": worst " << worst / scale);
    }
  }
}

}  // namespace

TEST_CASE("RMSNorm writes the narrow GEMMs' x: the GEMM skips its conversion, same result") {
  const int64_t cols = 1024;
  for (int n : {1, 6, 13, 32}) {
    CAPTURE(n);
    DeviceBuffer<float> d_x(random_floats(size_t(n * cols))), d_nw(random_floats(size_t(cols)));
    check_narrow_x(
        n, cols,
        [&](float* out) {
          kernels::launch_rmsnorm(d_x.get(), cols, d_nw.get(), out, cols, n, int(cols), 1e-5f,
                                  nullptr);
        },
        [&](float* out, void* scratch) {
          return kernels::launch_rmsnorm_narrow_x(d_x.get(), cols, d_nw.get(), out, cols, n,
                                                  int(cols), 1e-5f, scratch, nullptr);
        });
  }
}

TEST_CASE("SwiGLU writes the narrow GEMMs' x: the GEMM skips its conversion, same result") {
  const int64_t cols = 1024, ld = 2 * cols + 32;  // gate and up side by side, as in the backend
  for (int n : {1, 7, 16, 29}) {
    CAPTURE(n);
    DeviceBuffer<float> d_gu(random_floats(size_t(n * ld)));
    // In place over a copy of gate, as the backend does (its output is gate).
    auto run = [&](float* out, void* scratch) {
      CUDA_CHECK(cudaMemcpy2D(out, size_t(cols) * 4, d_gu.get(), size_t(ld) * 4, size_t(cols) * 4,
                              size_t(n), cudaMemcpyDeviceToDevice));
      if (!scratch) {
        kernels::launch_swiglu(out, cols, d_gu.get() + cols, ld, out, cols, n, int(cols), nullptr);
        return true;
      }
      kernels::launch_swiglu_narrow_x(out, cols, d_gu.get() + cols, ld, out, cols, n, int(cols),
                                      scratch, nullptr);
      return true;
    };
    check_narrow_x(
        n, cols, [&](float* out) { run(out, nullptr); },
        [&](float* out, void* scratch) { return run(out, scratch); });
  }
}

TEST_CASE("the attention combine writes the narrow GEMMs' x: the GEMM skips its conversion") {
  const int n_heads = 8, n_kv_heads = 2, head_dim = 128, blocks_per_seq = 40;
  const int kv_dim = n_kv_heads * head_dim, q_dim = n_heads * head_dim;
  const size_t cache_elems = size_t(blocks_per_seq) * 16 * size_t(kv_dim);
  std::vector<uint16_t> kh(cache_elems), vh(cache_elems);
  for (size_t i = 0; i < cache_elems; ++i) {
    const __half k = __float2half_rn(float(int(i * 7919 % 2001) - 1000) / 1000.0f);
    const __half v = __float2half_rn(float(int(i * 104729 % 2001) - 1000) / 1000.0f);
    std::memcpy(&kh[i], &k, 2);
    std::memcpy(&vh[i], &v, 2);
  }
  std::vector<int32_t> tables(static_cast<size_t>(blocks_per_seq));
  for (int i = 0; i < blocks_per_seq; ++i) tables[size_t(i)] = (i * 37) % blocks_per_seq;
  DeviceBuffer<uint16_t> d_k(kh), d_v(vh);
  DeviceBuffer<int32_t> d_tables(tables);
  for (int n : {3, 9}) {
    CAPTURE(n);
    std::vector<int32_t> pos, tt;
    for (int t = 0; t < n; ++t) pos.push_back(50 + 61 * t), tt.push_back(0);
    DeviceBuffer<int32_t> d_pos(pos), d_tt(tt);
    DeviceBuffer<float> d_q(random_floats(size_t(n * q_dim)));
    const int max_position = pos.back();
    DeviceBuffer<float> parts(
        kernels::attention_partial_floats(n, n_heads, head_dim, max_position));
    kernels::AttentionArgs a;
    a.q = d_q.get();
    a.ldq = q_dim;
    a.ldo = q_dim;
    a.cache = {d_k.get(), d_v.get()};
    a.positions = d_pos.get();
    a.token_tables = d_tt.get();
    a.block_tables = d_tables.get();
    a.table_stride = blocks_per_seq;
    a.n_tokens = n;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.max_position = max_position;
    a.scale = 0.088f;
    a.partials = parts.get();
    // The pieces per token depend on the launch's token count (one wave);
    // fixed here, so that one launch and two give the same sums.
    a.max_splits = 8;
    // Both ways of combining the pieces: a second launch, and the last block
    // of pass 1 (AttentionArgs::arrivals), which writes the same outputs.
    DeviceBuffer<uint32_t> arrivals(std::vector<uint32_t>(size_t(n) * size_t(n_kv_heads), 0u));
    for (bool in_pass1 : {false, true}) {
      CAPTURE(in_pass1);
      a.arrivals = in_pass1 ? arrivals.get() : nullptr;
      check_narrow_x(
          n, q_dim,
          [&](float* out) {
            a.out = out;
            a.narrow_x = nullptr;
            kernels::launch_attention(a, nullptr);
          },
          [&](float* out, void* scratch) {
            // Two launches of the rows, as the backend's token groups: the
            // second writes its rows from narrow_row0.
            const int first = n / 2;
            kernels::AttentionArgs b = a;
            b.narrow_x = static_cast<uint32_t*>(scratch);
            b.narrow_n8 = (n + 7) / 8 * 8;
            b.n_tokens = first;
            b.out = out;
            if (first > 0) kernels::launch_attention(b, nullptr);
            b.n_tokens = n - first;
            b.narrow_row0 = first;
            b.q = a.q + int64_t(first) * q_dim;
            b.positions = a.positions + first;
            b.token_tables = a.token_tables + first;
            b.out = out + int64_t(first) * q_dim;
            kernels::launch_attention(b, nullptr);
            return true;
          });
    }
  }
}

// Where the portable narrow kernel does not take fp16 x, launch_gemm_for
// converts the fp32 x itself, whatever the scratch holds.
TEST_CASE("gemm narrow on fp16 x: only the formats and shapes it takes") {
  DeviceBuffer<uint8_t> w(1 << 20);
  DeviceBuffer<uint8_t> scratch(kernels::gemm_narrow_sm80_scratch_bytes(32, 4096));
  kernels::GemmArgs a;
  a.w.data = w.get();
  a.w.layout.format = kernels::PackedFormat::Int4K256;
  a.w.layout.rows = 4096;
  a.w.layout.cols = 4096;
  a.n = 8;
  const kernels::GemmScratch gs{scratch.get(), scratch.size()};
  CHECK(kernels::gemm_narrow_takes_x16(a));
  CHECK(kernels::gemm_for_reads_narrow_x(kernels::KernelSet::Portable, a, gs));
  a.w.layout.format = kernels::PackedFormat::Int8Sym32;  // Q8_0: not in the x's order
  CHECK_FALSE(kernels::gemm_narrow_takes_x16(a));
  a.w.layout.format = kernels::PackedFormat::Int6K256;
  a.w.layout.cols = 4096 + 32;  // not whole stages of 4 chunks
  CHECK_FALSE(kernels::gemm_narrow_takes_x16(a));
  a.w.layout.cols = 4096;
  a.w.data = w.get() + 4;  // weights not 16-byte aligned
  CHECK_FALSE(kernels::gemm_narrow_takes_x16(a));
  a.w.data = w.get();
  a.n = 33;  // past the narrow kernel
  CHECK_FALSE(kernels::gemm_narrow_takes_x16(a));
  a.n = 8;
  const kernels::GemmScratch small{scratch.get(),
                                   kernels::gemm_narrow_sm80_scratch_bytes(8, 4096) - 4};
  CHECK_FALSE(kernels::gemm_for_reads_narrow_x(kernels::KernelSet::Portable, a, small));
}

// The next RMSNorm made in pieces by the narrow product that writes the
// residual stream (GemmArgs::norm_out, runs 62-63): its y keeps the plain
// kernel's bits, its sums of squares are h's a chunk and token, each
// token's scale is 1 / (rms * kNormPieceScale), the blocks' counter is left
// zero (a second launch gives the same scales), and a
// narrow GEMM that reads the pieces (norm_scale; its fp32 x is zeros that
// nothing writes) gives what it gives on the norm's own x
// (launch_rmsnorm_narrow_x), bias and all, to fp16's rounding of x.
TEST_CASE("a narrow product makes the next RMSNorm in pieces; its readers give the norm's result") {
  const kernels::KernelSet portable = kernels::KernelSet::Portable;
  const int64_t dim = 1024, in_cols = 512, reader_rows = 300;
  const float eps = 1e-5f;
  const kernels::GemmScratch none{};
  DeviceBuffer<float> d_g(random_floats(size_t(dim)));
  for (int n : {4, 8, 13, 16}) {
    CAPTURE(n);
    const int n8 = (n + 7) / 8 * 8;
    DeviceBuffer<float> d_in(random_floats(size_t(n * in_cols)));
    const std::vector<float> h0 = random_floats(size_t(n * dim), 3.0f);
    for (GgmlType wtype : {GgmlType::Q4_K, GgmlType::Q6_K}) {
      CAPTURE(ggml_type_name(wtype));
      const DeviceMatrix wo(wtype, dim, in_cols);
      kernels::GemmArgs g;
      g.w = wo.view();
      g.x = d_in.get();
      g.ldx = in_cols;
      g.n = n;
      g.ldy = dim;
      g.accumulate = true;
      DeviceBuffer<float> y_plain(h0), y_pieces(h0);
      g.y = y_plain.get();
      kernels::launch_gemm_for(portable, g, none, nullptr);
      const size_t x_bytes = kernels::gemm_narrow_sm80_scratch_bytes(n, dim);
      DeviceBuffer<uint8_t> pieces_x(x_bytes);
      DeviceBuffer<float> sumsq(size_t(dim / 32 * n8)), scale{size_t(n8)};
      DeviceBuffer<uint32_t> arrivals(std::vector<uint32_t>{0u});
      poison(sumsq);
      poison(scale);
      g.y = y_pieces.get();
      g.norm_out = {d_g.get(),      reinterpret_cast<uint32_t*>(pieces_x.get()),
                    sumsq.get(),    scale.get(),
                    arrivals.get(), eps};
      REQUIRE(kernels::gemm_for_takes_norm_pieces(portable, g, none));
      kernels::launch_gemm_for(portable, g, none, nullptr);
      const std::vector<float> h = y_plain.download();
      CHECK(same_bits(h, y_pieces.download()));
      const std::vector<float> ss = sumsq.download();
      const std::vector<float> scales = scale.download();
      int bad_sums = 0, bad_scales = 0;
      for (int t = 0; t < n; ++t) {
        double total = 0.0;
        for (int64_t c = 0; c < dim / 32; ++c) {
          double want = 0.0;
          for (int r = 0; r < 32; ++r)
            want += double(h[size_t(t * dim + c * 32 + r)]) * h[size_t(t * dim + c * 32 + r)];
          const double got = ss[size_t(t * (dim / 32) + c)];
          bad_sums += !(std::fabs(got - want) <= 1e-5 * want + 1e-6);
          total += want;
        }
        const double want = 1.0 / (std::sqrt(total / double(dim) + eps) * kernels::kNormPieceScale);
        bad_scales += !(std::fabs(scales[size_t(t)] - want) <= 1e-5 * want);
      }
      CHECK(bad_sums == 0);
      CHECK(bad_scales == 0);
      CHECK(arrivals.download()[0] == 0u);
      poison(scale);  // the counter left zero: a second launch finds its last block again
      y_pieces.upload(h0);
      kernels::launch_gemm_for(portable, g, none, nullptr);
      CHECK(same_bits(scales, scale.download()));
      CHECK(arrivals.download()[0] == 0u);

      // The norm's own x, and the readers on it and on the pieces.
      DeviceBuffer<float> xn(size_t(n * dim));
      DeviceBuffer<uint8_t> norm_x(x_bytes);
      REQUIRE(kernels::launch_rmsnorm_narrow_x(y_plain.get(), dim, d_g.get(), xn.get(), dim, n,
                                               int(dim), eps, norm_x.get(), nullptr));
      DeviceBuffer<float> unwritten(std::vector<float>(size_t(n * dim), 0.0f));
      for (GgmlType rtype : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
        CAPTURE(ggml_type_name(rtype));
        const DeviceMatrix r(rtype, reader_rows, dim);
        DeviceBuffer<float> bias(random_floats(size_t(reader_rows)));
        DeviceBuffer<float> y_norm(size_t(n * reader_rows)), y_read(size_t(n * reader_rows));
        kernels::GemmArgs ra;
        ra.w = r.view();
        ra.ldx = dim;
        ra.n = n;
        ra.ldy = reader_rows;
        ra.bias = bias.get();
        ra.x = xn.get();
        ra.y = y_norm.get();
        kernels::GemmScratch on_norm{norm_x.get(), x_bytes};
        on_norm.holds_x = xn.get();
        kernels::launch_gemm_for(portable, ra, on_norm, nullptr);
        ra.x = unwritten.get();
        ra.y = y_read.get();
        ra.norm_scale = scale.get();
        kernels::GemmScratch on_pieces{pieces_x.get(), x_bytes};
        on_pieces.holds_x = unwritten.get();
        REQUIRE(kernels::gemm_for_takes_norm_pieces(portable, ra, on_pieces));
        kernels::launch_gemm_for(portable, ra, on_pieces, nullptr);
        const double gap = relative_gap(y_read.download(), y_norm.download());
        MESSAGE(ggml_type_name(wtype)
                << " writer, " << ggml_type_name(rtype) << " reader, n " << n << ": gap " << gap);
        CHECK(gap <= 2e-3);
      }
    }
  }
  // Not past kNormPiecesMaxTokens (16: at 17-32 tokens the pieces lost,
  // run 63, and no 32-token block is built with them).
  {
    const DeviceMatrix wo(GgmlType::Q4_K, dim, in_cols);
    kernels::GemmArgs g;
    g.w = wo.view();
    g.n = kernels::kNormPiecesMaxTokens;
    g.norm_out.weight = d_g.get();
    CHECK(kernels::gemm_for_takes_norm_pieces(portable, g, none));
    g.n = kernels::kNormPiecesMaxTokens + 1;
    CHECK_FALSE(kernels::gemm_for_takes_norm_pieces(portable, g, none));
  }
  // Only the portable narrow GEMM takes pieces: not the tiles of a head.
  kernels::GemmArgs head;
  head.w.layout.format = kernels::PackedFormat::Int6K256;
  head.w.layout.rows = kernels::kGemmHeadRows;
  head.w.layout.cols = dim;
  head.n = 24;
  head.norm_out.weight = d_g.get();
  CHECK_FALSE(kernels::gemm_for_takes_norm_pieces(portable, head, none));
}
