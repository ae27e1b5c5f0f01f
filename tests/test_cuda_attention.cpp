// Issue 37 leftovers on a GPU (part of test_cuda; every test skips without CUDA, fails under
// ZEROBENCH_REQUIRE_GPU=1): the varlen flash path of packed batches against masked memory-efficient
// attention, the kept-attention Function with the CUDA op pairs against autograd through SDPA, and
// selective-op on CUDA (SDPA's output kept) against full checkpointing, its recompute FLOPs counted.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "backends/backend_info.hpp"
#include "backends/common/comm.hpp"
#include "models/attention.hpp"
#include "models/model_config.hpp"
#include "runtime/device.hpp"
#include "runtime/world.hpp"
#include "tests/gpu_required.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using models::KeptAttentionOp;

namespace {
const at::TensorOptions kCuda = at::TensorOptions().device(at::kCUDA);

// A packed batch's document ids [2, 128]: documents cut at the row's end, a row ending in padding.
at::Tensor packed_document_ids() {
  std::vector<int64_t> ids;
  const std::vector<std::pair<int64_t, int64_t>> row0 = {{0, 40}, {1, 50}, {2, 38}}, row1 = {{2, 30}, {3, 70}, {-1, 28}};
  for (const auto* row : {&row0, &row1})
    for (const auto& [id, n] : *row) ids.insert(ids.end(), size_t(n), id);
  return at::tensor(ids, at::kLong).view({2, 128});
}
// The block-diagonal causal mask of those ids, additive in `dtype` [B, 1, T, T] (forward_logits').
at::Tensor additive_mask(const at::Tensor& ids, at::ScalarType dtype) {
  const int64_t T = ids.size(1);
  const auto allowed = at::logical_and(ids.unsqueeze(2).eq(ids.unsqueeze(1)), at::ones({T, T}, at::kBool).tril());
  return at::zeros(allowed.sizes(), at::TensorOptions().dtype(dtype))
      .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity())
      .unsqueeze(1)
      .to(at::kCUDA);
}
struct Run {
  at::Tensor out, dq, dk, dv;
};
using AttentionFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;
// q [2, 4, 128, 64], k/v [2, nkv, 128, 64] in dtype on the GPU, seeded; the output [B, T, H] and grads.
Run run(at::ScalarType dtype, int64_t nkv, const AttentionFn& attention) {
  at::manual_seed(3);
  const auto o = kCuda.dtype(dtype);
  auto q = at::randn({2, 4, 128, 64}, o).requires_grad_(true), k = at::randn({2, nkv, 128, 64}, o).requires_grad_(true),
       v = at::randn({2, nkv, 128, 64}, o).requires_grad_(true);
  const auto g = at::randn({2, 128, 256}, o);
  auto out = attention(q, k, v);
  out.backward(g);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}
// bf16: |a - b| <= 2e-2 + 2e-2 |b| elementwise (two kernels' bf16 roundings of the same attention).
void expect_close_bf16(const Run& a, const Run& b, const std::string& what) {
  for (const auto& [x, y, name] : {std::tuple{a.out, b.out, "out"}, {a.dq, b.dq, "dq"}, {a.dk, b.dk, "dk"}, {a.dv, b.dv, "dv"}})
    EXPECT_TRUE(at::allclose(x.to(at::kFloat), y.to(at::kFloat), 2e-2, 2e-2))
        << what << " " << name << " max |diff| " << (x.to(at::kFloat) - y.to(at::kFloat)).abs().max();
}
void expect_equal(const Run& a, const Run& b, const std::string& what) {
  EXPECT_TRUE(at::equal(a.out, b.out)) << what << " out";
  EXPECT_TRUE(at::equal(a.dq, b.dq)) << what << " dq";
  EXPECT_TRUE(at::equal(a.dk, b.dk)) << what << " dk";
  EXPECT_TRUE(at::equal(a.dv, b.dv)) << what << " dv";
}
}  // namespace

// The varlen path (bf16, --batching pack on CUDA) against the masked path it replaces (SDPA with the
// additive mask: memory-efficient attention), MHA and GQA, padding rows included.
TEST(CudaAttention, VarlenFlashMatchesMaskedEfficientOnAPackedBatch) {
  ZB_REQUIRE_GPU();
  const auto ids = packed_document_ids();
  auto segments = models::varlen_segments(ids);
  EXPECT_EQ(segments.max_len, 70);
  segments.cum_seq = segments.cum_seq.to(at::kCUDA);
  const auto mask = additive_mask(ids, at::kBFloat16);
  for (const int64_t nkv : {4, 2}) {
    const auto masked = run(at::kBFloat16, nkv, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return models::block_attention(q, k, v, mask, {});
    });
    const auto varlen = run(at::kBFloat16, nkv, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return models::block_attention(q, k, v, at::Tensor(), segments);
    });
    expect_close_bf16(varlen, masked, nkv == 4 ? "mha" : "gqa");
  }
}

// The kept ops are the ones SDPA's dispatcher runs (bf16 causal: flash; a mask: efficient; the
// varlen path: its flash op), so the kept output and the op's backward from it are bitwise autograd
// through the plain path.
TEST(CudaAttention, KeptOpsAreSdpasOwnAndTheirBackwardBitwiseAutograds) {
  ZB_REQUIRE_GPU();
  const auto ids = packed_document_ids();
  auto segments = models::varlen_segments(ids);
  segments.cum_seq = segments.cum_seq.to(at::kCUDA);
  struct Case {
    std::string what;
    at::ScalarType dtype;
    int64_t nkv;
    at::Tensor mask;
    models::VarlenSegments segments;
    KeptAttentionOp op;
  };
  const std::vector<Case> cases = {
      {"bf16 causal", at::kBFloat16, 4, {}, {}, KeptAttentionOp::Flash},
      {"bf16 causal gqa", at::kBFloat16, 2, {}, {}, KeptAttentionOp::Flash},
      {"fp32 causal", at::kFloat, 4, {}, {}, KeptAttentionOp::Efficient},
      {"fp32 masked", at::kFloat, 4, additive_mask(ids, at::kFloat), {}, KeptAttentionOp::Efficient},
      {"bf16 varlen gqa", at::kBFloat16, 2, {}, segments, KeptAttentionOp::FlashVarlen},
  };
  for (const auto& c : cases) {
    const auto plain = run(c.dtype, c.nkv, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return models::block_attention(q, k, v, c.mask, c.segments);
    });
    const auto kept = run(c.dtype, c.nkv, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      const auto op = models::op_sac_attention_op(q, k, v, c.mask, c.segments);
      EXPECT_EQ(op, c.op) << c.what << ": got " << models::kept_attention_op_name(op);
      models::KeptAttention ka;
      {
        at::NoGradGuard no_grad;
        ka = models::keep_attention(op, q, k, v, c.mask, c.segments);
      }
      return models::kept_attention(q, k, v, ka);
    });
    expect_equal(kept, plain, c.what);
  }
}

// selective-op on one GPU: the losses of full checkpointing (the first step bitwise: the same
// forward kernels; later steps to 1e-3 relative, FlashAttention-2's backward accumulates dq with
// atomics), and the FLOPs its backward counts are the CUDA closed form (SDPA not recomputed).
TEST(CudaAttention, SelectiveOpLossesFollowFullAndRecomputeIsCounted) {
  ZB_REQUIRE_GPU();
  for (const std::string precision : {"mixed", "fp32"}) {
    std::vector<std::vector<double>> losses;
    for (const auto& ac : {models::ActivationCheckpointing::full(), models::ActivationCheckpointing::selective_op()}) {
      auto spec = test_support::small_spec(2);
      spec.precision = precision;
      spec.train.steps = 3;
      spec.train.seq_len = 64;
      spec.train.activation_checkpointing = ac;
      // fp32: memory-efficient attention, which SDPA's dispatcher admits for equal head counts only
      // (GQA in fp32 runs math, not in the save list: recomputed). mixed (bf16): flash, GQA native.
      if (precision == "fp32") spec.model.kv_heads = spec.model.heads;
      auto world = runtime::init_world_on_store(c10::make_intrusive<c10d::HashStore>(), 0, 1,
                                                runtime::pick_device("cuda", 0), std::chrono::seconds(60));
      auto engine = backends::create_engine("fsdp2", spec, world);
      auto data = models::make_data_source(spec.train.data, spec.model.vocab, spec.train.seed);
      backends::common::Comm side(world.side_channel());
      const auto result = bench::run_training(*engine, spec, *data, side);
      losses.emplace_back();
      for (const auto& s : result.steps) {
        losses.back().push_back(s.loss);
        EXPECT_EQ(s.recompute_flops, spec.train.grad_accum * models::recompute_flops_per_micro_batch(
                                                                 spec.model, spec.train.micro_batch, spec.train.seq_len,
                                                                 ac, /*cuda=*/true))
            << precision << " " << ac.name();
      }
    }
    ASSERT_EQ(losses[0].size(), losses[1].size());
    EXPECT_EQ(losses[0][0], losses[1][0]) << precision;
    for (size_t i = 1; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[1][i], losses[0][i], 1e-3 * std::abs(losses[0][i])) << precision << " step " << i;
  }
}
