// Issue 37 leftovers: models/attention.hpp on CPU. The attention path a batch takes (a pure
// decision) and its memory-estimate term, the varlen kernel's cumulative document lengths (exact,
// with documents cut at a row's end, rows of one document and padding), and the kept-attention autograd Function's logic with
// the CPU op pair (_scaled_dot_product_flash_attention_for_cpu / _backward): its gradients those of
// autograd through at::scaled_dot_product_attention on the same inputs (fp32), causal, masked and
// GQA. The CUDA op pairs it also drives (flash, efficient, varlen flash) run in test_cuda.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <vector>

#include "backends/backend_info.hpp"
#include "backends/engine.hpp"
#include "models/attention.hpp"

using namespace zb::models;

TEST(AttentionPath, VarlenOnlyForDocumentsOnCudaIn16Bit) {
  EXPECT_EQ(attention_path(false, at::kFloat, false), AttentionPath::Causal);
  EXPECT_EQ(attention_path(true, at::kBFloat16, false), AttentionPath::Causal);
  EXPECT_EQ(attention_path(false, at::kBFloat16, true), AttentionPath::Masked);  // CPU: no varlen kernel
  EXPECT_EQ(attention_path(false, at::kFloat, true), AttentionPath::Masked);
  EXPECT_EQ(attention_path(true, at::kFloat, true), AttentionPath::Masked);  // flash takes 16-bit only
  EXPECT_EQ(attention_path(true, at::kBFloat16, true), AttentionPath::Varlen);
  EXPECT_EQ(attention_path(true, at::kHalf, true), AttentionPath::Varlen);
  EXPECT_STREQ(attention_path_name(AttentionPath::Varlen), "varlen");
}

namespace {
std::vector<int32_t> cum_of(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const auto ids = at::tensor(flat, at::kLong).view({int64_t(rows.size()), int64_t(rows[0].size())});
  const auto s = varlen_segments(ids);
  EXPECT_EQ(s.cum_seq.scalar_type(), at::kInt);
  const auto c = s.cum_seq.contiguous();
  return std::vector<int32_t>(c.data_ptr<int32_t>(), c.data_ptr<int32_t>() + c.numel());
}
int64_t max_of(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return varlen_segments(at::tensor(flat, at::kLong).view({int64_t(rows.size()), -1})).max_len;
}
}  // namespace

TEST(VarlenSegments, CumulativeLengthsSplitAtEachDocumentAndEachRow) {
  // Row 0: documents 0 (3 tokens), 1 (4), 2 cut at the row's end (1); row 1: document 2's rest
  // (2 tokens, same id: still a new segment, rows are never joined), document 3 (4), padding (2).
  EXPECT_EQ(cum_of({{0, 0, 0, 1, 1, 1, 1, 2}, {2, 2, 3, 3, 3, 3, -1, -1}}),
            (std::vector<int32_t>{0, 3, 7, 8, 10, 14, 16}));
  EXPECT_EQ(max_of({{0, 0, 0, 1, 1, 1, 1, 2}, {2, 2, 3, 3, 3, 3, -1, -1}}), 4);
  // Rows of one document each (and the same id in both rows): one segment a row.
  EXPECT_EQ(cum_of({{5, 5, 5, 5}, {5, 5, 5, 5}}), (std::vector<int32_t>{0, 4, 8}));
  EXPECT_EQ(max_of({{5, 5, 5, 5}, {5, 5, 5, 5}}), 4);
  // One-token documents, and a padded row (padding is one more segment, as one more mask block).
  EXPECT_EQ(cum_of({{0, 1, 2}, {0, -1, -1}}), (std::vector<int32_t>{0, 1, 2, 3, 4, 6}));
  EXPECT_EQ(max_of({{0, 1, 2}, {0, -1, -1}}), 2);
}

namespace {
struct Qkv {
  at::Tensor q, k, v, g;
};
// q [B, nh, T, hd], k/v [B, nkv, T, hd] and an output gradient, fp32, seeded.
Qkv qkv(int64_t nh, int64_t nkv) {
  const int64_t B = 2, T = 16, hd = 8;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto o = at::TensorOptions().dtype(at::kFloat);
  return {at::randn({B, nh, T, hd}, gen, o), at::randn({B, nkv, T, hd}, gen, o), at::randn({B, nkv, T, hd}, gen, o),
          at::randn({B, T, nh * hd}, gen, o)};
}
// Two documents a row (0..5, 6..15) as the block-diagonal causal additive mask [B, 1, T, T].
at::Tensor document_mask() {
  const int64_t T = 16;
  const auto doc = (at::arange(T, at::kLong) >= 6).to(at::kLong);
  const auto same = doc.unsqueeze(1).eq(doc.unsqueeze(0));
  const auto allowed = at::logical_and(same, at::ones({T, T}, at::kBool).tril());
  return at::zeros({2, 1, T, T}).masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}
struct Grads {
  at::Tensor out, dq, dk, dv;
};
Grads leaves_and_backward(const Qkv& in, const std::function<at::Tensor(const at::Tensor&, const at::Tensor&,
                                                                         const at::Tensor&)>& attention) {
  auto q = in.q.clone().requires_grad_(true), k = in.k.clone().requires_grad_(true), v = in.v.clone().requires_grad_(true);
  auto out = attention(q, k, v);
  out.backward(in.g);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}
}  // namespace

// The kept attention (op FlashCpu) returns the kept output, and its backward — the op's own, from
// the kept output and logsumexp, k/v repeated over the groups under autograd — gives the gradients
// autograd through SDPA gives, to fp32 rounding: |diff| <= 1e-5 + 1e-4 |ref| (atol/rtol of
// at::allclose). The reference SDPA runs CPU flash (causal/mask) or math (GQA), so bits may differ.
TEST(KeptAttention, CpuOpPairGradientsMatchAutogradThroughSdpa) {
  for (const bool masked : {false, true})
    for (const int64_t nkv : {4, 2}) {
      const auto in = qkv(4, nkv);
      const auto mask = masked ? document_mask() : at::Tensor();
      const std::string what = std::string(masked ? "masked" : "causal") + (nkv == 4 ? "" : " gqa");
      const auto ref = leaves_and_backward(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return block_attention(q, k, v, mask, {});
      });
      KeptAttention kept;
      {
        at::NoGradGuard no_grad;
        kept = keep_attention(KeptAttentionOp::FlashCpu, in.q, in.k, in.v, mask, {});
      }
      EXPECT_EQ(kept.kv_groups, 4 / nkv) << what;
      EXPECT_TRUE(kept.logsumexp.defined()) << what;
      const auto got = leaves_and_backward(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return kept_attention(q, k, v, kept);
      });
      EXPECT_TRUE(at::allclose(got.out, ref.out, 1e-4, 1e-5)) << what;
      EXPECT_TRUE(at::allclose(got.dq, ref.dq, 1e-4, 1e-5)) << what << " dq " << (got.dq - ref.dq).abs().max();
      EXPECT_TRUE(at::allclose(got.dk, ref.dk, 1e-4, 1e-5)) << what << " dk " << (got.dk - ref.dk).abs().max();
      EXPECT_TRUE(at::allclose(got.dv, ref.dv, 1e-4, 1e-5)) << what << " dv " << (got.dv - ref.dv).abs().max();
      EXPECT_EQ(got.dk.sizes(), in.k.sizes()) << what;  // the groups' gradients summed back to nkv heads
    }
}

// On CPU selective-op keeps nothing (upstream's save list has SDPA's CUDA ops only); the varlen
// path's segments always name the varlen flash op.
TEST(KeptAttention, CpuKeepsNothingAndSegmentsNameVarlenFlash) {
  const auto in = qkv(4, 4);
  EXPECT_EQ(op_sac_attention_op(in.q, in.k, in.v, at::Tensor(), {}), KeptAttentionOp::None);
  EXPECT_EQ(op_sac_attention_op(in.q, in.k, in.v, document_mask(), {}), KeptAttentionOp::None);
  VarlenSegments s{at::tensor(std::vector<int32_t>{0, 16, 32}), 16};
  EXPECT_EQ(op_sac_attention_op(in.q, in.k, in.v, at::Tensor(), s), KeptAttentionOp::FlashVarlen);
  EXPECT_STREQ(kept_attention_op_name(KeptAttentionOp::Efficient), "efficient");
}

namespace {
// The estimate's term of that name in fsdp2's peak for a pack batch (tiny, B = 2, T = 64); -1: none.
int64_t term(const std::string& precision, bool gloo, const std::string& name) {
  zb::backends::EngineSpec spec;
  spec.model = preset("tiny");
  spec.precision = precision;
  spec.train.micro_batch = 2;
  spec.train.seq_len = 64;
  spec.train.batching = "pack";
  const auto e = zb::backends::backend("fsdp2").training.estimate_peak(spec, zb::backends::Topology(1), 0, gloo);
  for (const auto& t : e.terms)
    if (t.name == name) return t.bytes;
  return -1;
}
}  // namespace

// A GPU run in 16-bit takes the varlen path: no [B, 1, T, T] mask, the int32 lengths instead (at
// most B*T + 1 of them); a CPU run and a GPU run in fp32 keep the mask.
TEST(AttentionPath, TheGpuEstimateIn16BitHasLengthsNotTheMask) {
  EXPECT_EQ(term("mixed", /*gloo=*/false, "document mask"), -1);
  EXPECT_EQ(term("mixed", false, "document lengths"), 4 * (2 * 64 + 1));
  EXPECT_EQ(term("mixed", /*gloo=*/true, "document mask"), 2 * 64 * 64 * 2);
  EXPECT_EQ(term("mixed", true, "document lengths"), -1);
  EXPECT_EQ(term("fp32", false, "document mask"), 2 * 64 * 64 * 4);
}
