// Issue 37: --activation-checkpointing none|full|selective-layer:N|selective-op (torchtitan's modes,
// models/activation_checkpointing.hpp). The flag's parsing (a bare flag is full; bad values exit 2
// with one line naming them), torchtitan's every-N-th block rule and op-SAC mm rule, the activation
// terms and recompute FLOPs of each mode, selective-op's gradients bitwise those without
// checkpointing (causal and per-document attention, GQA, fp32 and bf16), and end to end at W = 2 on
// CPU: losses bitwise equal across modes, every rank's measured peak within 5% of its estimate, and
// the recompute FLOPs counted in backward equal to the closed form.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "models/activation_memory.hpp"
#include "models/llama.hpp"
#include "models/model_config.hpp"
#include "reports/report.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using models::ActivationCheckpointing;
using nlohmann::json;
using test_support::run_zerobench;
using test_support::temp_path;

namespace {

// The units (1..L) a mode checkpoints.
std::vector<int64_t> checkpointed(const ActivationCheckpointing& ac, int64_t layers) {
  std::vector<int64_t> out;
  for (int64_t u = 1; u <= layers; ++u)
    if (ac.checkpoints_block(u)) out.push_back(u);
  return out;
}

models::ModelConfig tiny_layers(int64_t layers) {
  auto m = models::preset("tiny");
  m.layers = layers;
  return m;
}

}  // namespace

TEST(ActivationCheckpointingMode, ParsesTorchtitansModesAndTheBareFlagIsFull) {
  EXPECT_EQ(models::parse_activation_checkpointing("none"), ActivationCheckpointing::none());
  EXPECT_EQ(models::parse_activation_checkpointing("full"), ActivationCheckpointing::full());
  EXPECT_EQ(models::parse_activation_checkpointing("true"), ActivationCheckpointing::full());  // CLI11's bare flag
  EXPECT_EQ(models::parse_activation_checkpointing("false"), ActivationCheckpointing::none());
  EXPECT_EQ(models::parse_activation_checkpointing("selective-layer:2"), ActivationCheckpointing::selective_layer(2));
  EXPECT_EQ(models::parse_activation_checkpointing("selective-layer:0"), ActivationCheckpointing::selective_layer(0));
  EXPECT_EQ(models::parse_activation_checkpointing("selective-op"), ActivationCheckpointing::selective_op());
  for (const char* bad : {"selective-layer:", "selective-layer:-1", "selective-layer:x", "selective", "op", "Full",
                          "selective-op:1", "selective_op"})
    EXPECT_FALSE(models::parse_activation_checkpointing(bad)) << bad;
  EXPECT_EQ(ActivationCheckpointing::selective_layer(3).name(), "selective-layer:3");
  EXPECT_EQ(ActivationCheckpointing::selective_op().name(), "selective-op");
  EXPECT_EQ(models::activation_checkpointing_of_report("selective-op", true), ActivationCheckpointing::selective_op());
  // A report's keys: the mode when present, else the boolean every report has.
  EXPECT_EQ(models::activation_checkpointing_of_report("", true), ActivationCheckpointing::full());
  EXPECT_EQ(models::activation_checkpointing_of_report("", false), ActivationCheckpointing::none());
  EXPECT_EQ(models::activation_checkpointing_of_report("selective-layer:2", true),
            ActivationCheckpointing::selective_layer(2));
  // A config file's boolean (accelerate's fsdp_activation_checkpointing) is full unless a mode was chosen.
  EXPECT_EQ(ActivationCheckpointing::none().or_full_if(true), ActivationCheckpointing::full());
  EXPECT_EQ(ActivationCheckpointing::selective_layer(2).or_full_if(true), ActivationCheckpointing::selective_layer(2));
  EXPECT_EQ(ActivationCheckpointing::none().or_full_if(false), ActivationCheckpointing::none());
}

// torchtitan's _apply_layer_sac: a counter over the blocks, 1, 2, ...; the block whose count is a
// multiple of N is wrapped (N = 0: every block).
TEST(ActivationCheckpointingMode, SelectiveLayerCheckpointsEveryNthBlockAsTorchtitanCounts) {
  EXPECT_EQ(checkpointed(ActivationCheckpointing::selective_layer(2), 4), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(checkpointed(ActivationCheckpointing::selective_layer(3), 7), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(checkpointed(ActivationCheckpointing::selective_layer(1), 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(checkpointed(ActivationCheckpointing::selective_layer(0), 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(checkpointed(ActivationCheckpointing::selective_layer(5), 4).empty());
  EXPECT_EQ(checkpointed(ActivationCheckpointing::full(), 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(checkpointed(ActivationCheckpointing::selective_op(), 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(checkpointed(ActivationCheckpointing::none(), 3).empty());
  EXPECT_EQ(ActivationCheckpointing::selective_layer(3).checkpointed_blocks(7), 2);
}

// Each mode's activation terms: k of L blocks keep only their input (cNH), the rest their
// activations; the recompute sits in the backward term only when the last block is checkpointed.
TEST(ActivationCheckpointingMode, ActivationTermsAndRecomputeFlopsOfEachMode) {
  const auto m = tiny_layers(4);
  const int64_t B = 2, T = 128, c = 4, N = B * T;
  const int64_t block = models::block_saved_bytes(m, B, T, c);
  const int64_t input = c * N * m.hidden, grads = c * N * m.hidden + 3 * c * N * m.ffn;
  const auto none = models::activation_memory(m, B, T, c, ActivationCheckpointing::none());
  const auto full = models::activation_memory(m, B, T, c, ActivationCheckpointing::full());
  const auto every2 = models::activation_memory(m, B, T, c, ActivationCheckpointing::selective_layer(2));
  const auto every3 = models::activation_memory(m, B, T, c, ActivationCheckpointing::selective_layer(3));
  EXPECT_EQ(none.blocks.bytes, 4 * block);
  EXPECT_EQ(full.blocks.bytes, 4 * input);
  EXPECT_EQ(every2.blocks.bytes, 2 * input + 2 * block);  // blocks 2, 4 checkpointed
  EXPECT_EQ(every3.blocks.bytes, 1 * input + 3 * block);  // block 3
  EXPECT_EQ(none.block_backward.bytes, grads);
  EXPECT_EQ(full.block_backward.bytes, grads + block);
  EXPECT_EQ(every2.block_backward.bytes, grads + block);  // the last block (4) recomputes
  EXPECT_EQ(every3.block_backward.bytes, grads);          // block 4 keeps its activations
  EXPECT_LT(full.peak_bytes(), every2.peak_bytes());
  EXPECT_LT(every2.peak_bytes(), every3.peak_bytes());
  EXPECT_LT(every3.peak_bytes(), none.peak_bytes());

  // Recompute FLOPs: one block's forward per checkpointed block.
  const int64_t fwd = models::block_forward_flops(m, B, T);
  EXPECT_EQ(fwd, 2 * N * models::count_params(m).per_block + 4 * B * m.heads * m.head_dim() * T * T);
  EXPECT_EQ(models::recompute_flops_per_micro_batch(m, B, T, ActivationCheckpointing::full()), 4 * fwd);
  EXPECT_EQ(models::recompute_flops_per_micro_batch(m, B, T, ActivationCheckpointing::selective_layer(2)), 2 * fwd);
  EXPECT_EQ(models::recompute_flops_per_micro_batch(m, B, T, ActivationCheckpointing::none()), 0);
  // selective-op: every block keeps its input and the outputs of wq, wv, w_gate, w_down; its replay
  // saves a block's activations but v and gate (kept); it recomputes wk, wo, w_up and SDPA only.
  const int64_t H = m.hidden, KV = m.kv_dim(), F = m.ffn;
  const auto op = models::activation_memory(m, B, T, c, ActivationCheckpointing::selective_op());
  EXPECT_EQ(op.blocks.bytes, 4 * c * N * (3 * H + KV + F));
  EXPECT_EQ(op.block_backward.bytes, grads + block - c * N * (KV + F));
  EXPECT_LT(full.peak_bytes(), op.peak_bytes());
  EXPECT_LT(op.peak_bytes(), none.peak_bytes());
  EXPECT_EQ(models::op_sac_recomputed_linear_params(m), H * KV + H * H + H * F);
  const int64_t op_block = 2 * N * (H * KV + H * H + H * F) + 4 * B * m.heads * m.head_dim() * T * T;
  EXPECT_EQ(models::recompute_flops_per_micro_batch(m, B, T, ActivationCheckpointing::selective_op()), 4 * op_block);
  EXPECT_LT(op_block, fwd);  // a block's op-SAC replay costs less than its forward
  // torchtitan's mm parity: count % 2 == 0 is recomputed, so the 1st, 3rd, ... are saved.
  EXPECT_TRUE(ActivationCheckpointing::op_sac_saves_mm(1));
  EXPECT_FALSE(ActivationCheckpointing::op_sac_saves_mm(2));
  EXPECT_TRUE(ActivationCheckpointing::op_sac_saves_mm(7));
  // On CUDA selective-op keeps SDPA's output and logsumexp too (4*B*nh*T fp32): kept per block
  // c*N*(4H + KV + F) + 4*B*nh*T, the replay saves that much less, and SDPA is not recomputed.
  const int64_t lse = 4 * B * m.heads * T;
  const auto op_cuda = models::activation_memory(m, B, T, c, ActivationCheckpointing::selective_op(), /*cuda=*/true);
  EXPECT_EQ(op_cuda.blocks.bytes, 4 * (c * N * (4 * H + KV + F) + lse));
  EXPECT_EQ(op_cuda.block_backward.bytes, grads + block - c * N * (H + KV + F) - lse);
  EXPECT_EQ(models::activation_memory(m, B, T, c, ActivationCheckpointing::full(), true).blocks.bytes,
            full.blocks.bytes);  // only selective-op keeps an op's output
  EXPECT_EQ(models::recompute_flops_per_micro_batch(m, B, T, ActivationCheckpointing::selective_op(), /*cuda=*/true),
            4 * 2 * N * (H * KV + H * H + H * F));
  EXPECT_EQ(models::recompute_flops_per_micro_batch(m, B, T, ActivationCheckpointing::full(), true), 4 * fwd);
  EXPECT_EQ(models::op_sac_kept_bytes(m, B, T, c, true) - models::op_sac_kept_bytes(m, B, T, c),
            c * N * H + lse);
  // palm_recompute: palm + the recompute per token, the same count.
  for (const auto& ac : {ActivationCheckpointing::full(), ActivationCheckpointing::selective_layer(2),
                         ActivationCheckpointing::selective_layer(3), ActivationCheckpointing::selective_op()}) {
    for (const bool cuda : {false, true}) {
      const auto f = models::flops_per_token(m, T, ac, cuda);
      EXPECT_DOUBLE_EQ((f.palm_recompute - f.palm) * double(N),
                       double(models::recompute_flops_per_micro_batch(m, B, T, ac, cuda)))
          << ac.name() << (cuda ? " cuda" : " cpu");
    }
  }
}

namespace {
// Weights as plain leaf tensors (requires_grad), in the compute dtype.
struct Leaves : models::UnitParamSource {
  std::vector<std::vector<at::Tensor>> units;
  Leaves(const models::ModelConfig& cfg, at::ScalarType dtype) {
    for (int u = 0; u < int(models::unit_count(cfg)); ++u) {
      units.emplace_back();
      for (const auto& w : models::unflatten_unit(cfg, u, models::init_unit_flat(cfg, u, 7)))
        units.back().push_back(w.to(dtype).detach().requires_grad_(true));
    }
  }
  std::vector<at::Tensor> unit_weights(int unit) override { return units[size_t(unit)]; }
};

struct LossAndGrads {
  at::Tensor loss;
  std::vector<at::Tensor> grads;
  int64_t recomputed = 0;
};

LossAndGrads loss_and_grads(const models::ModelConfig& cfg, at::ScalarType dtype, bool documents,
                            const ActivationCheckpointing& ac) {
  const int64_t B = 2, T = 64;
  Leaves w(cfg, dtype);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto tokens = at::randint(cfg.vocab, {B, T}, gen, at::TensorOptions().dtype(at::kLong));
  const auto targets = at::randint(cfg.vocab, {B, T}, gen, at::TensorOptions().dtype(at::kLong));
  auto rope = models::make_rope_cache(cfg, T, dtype, at::kCPU);
  if (documents) {  // two documents a row: 0..23 and 24..63 (positions restart)
    auto doc = (at::arange(T, at::TensorOptions().dtype(at::kLong)) >= 24).to(at::kLong).repeat({B, 1});
    auto pos = at::arange(T, at::TensorOptions().dtype(at::kLong)) - doc[0] * 24;
    rope = models::document_attention(rope, pos.repeat({B, 1}), doc);
  }
  const int64_t before = models::recomputed_flops();
  LossAndGrads out;
  out.loss = models::forward_loss(cfg, w, tokens, targets, rope, {ac, false});
  out.loss.backward();
  out.recomputed = models::recomputed_flops() - before;
  for (const auto& unit : w.units)
    for (const auto& t : unit) out.grads.push_back(t.grad());
  return out;
}
}  // namespace

// selective-op keeps wq, wv, w_gate, w_down's outputs and replays the rest: the loss and every
// gradient are bitwise those without checkpointing (the kept linears differentiate with the same
// mm calls as at::linear's autograd), with causal and per-document attention, GQA (tiny: 4 heads,
// 2 kv heads), fp32 and bf16; the FLOPs its backward counts are the closed form.
TEST(ActivationCheckpointingMode, SelectiveOpGradientsBitwiseThoseWithoutCheckpointing) {
  at::manual_seed(0);
  const auto m = tiny_layers(3);
  for (const auto dtype : {at::kFloat, at::kBFloat16})
    for (const bool documents : {false, true}) {
      const auto plain = loss_and_grads(m, dtype, documents, ActivationCheckpointing::none());
      const auto op = loss_and_grads(m, dtype, documents, ActivationCheckpointing::selective_op());
      const std::string what = std::string(dtype == at::kFloat ? "fp32" : "bf16") + (documents ? " documents" : " causal");
      EXPECT_TRUE(at::equal(plain.loss, op.loss)) << what;
      ASSERT_EQ(plain.grads.size(), op.grads.size());
      for (size_t i = 0; i < plain.grads.size(); ++i) {
        ASSERT_TRUE(op.grads[i].defined()) << what << " weight " << i;
        EXPECT_TRUE(at::equal(plain.grads[i], op.grads[i])) << what << " weight " << i;
      }
      EXPECT_EQ(plain.recomputed, 0) << what;
      EXPECT_EQ(op.recomputed, models::recompute_flops_per_micro_batch(m, 2, 64, ActivationCheckpointing::selective_op()))
          << what;
    }
}

// selective-op's kept-attention path end to end on CPU, its CUDA ops stood in for by the CPU op
// pair (a test seam: a run never keeps SDPA on CPU): the block keeps SDPA's output and logsumexp
// and its replay differentiates through the op's backward; the loss is bitwise (the same forward
// op SDPA calls), the gradients those without checkpointing to fp32 rounding (1e-5 + 1e-4·|ref|;
// GQA's k/v gradients are summed over repeated heads, SDPA's own GQA path sums in another order),
// and the recompute counted has no SDPA: the CUDA closed form.
TEST(ActivationCheckpointingMode, SelectiveOpKeptAttentionPathOnCpuMatchesNoCheckpointing) {
  const auto m = tiny_layers(3);
  for (const bool documents : {false, true}) {
    const auto plain = loss_and_grads(m, at::kFloat, documents, ActivationCheckpointing::none());
    const bool before = models::set_op_sac_keeps_cpu_attention_for_tests(true);
    const auto op = loss_and_grads(m, at::kFloat, documents, ActivationCheckpointing::selective_op());
    models::set_op_sac_keeps_cpu_attention_for_tests(before);
    const std::string what = documents ? "documents" : "causal";
    EXPECT_TRUE(at::equal(plain.loss, op.loss)) << what;
    ASSERT_EQ(plain.grads.size(), op.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      ASSERT_TRUE(op.grads[i].defined()) << what << " weight " << i;
      EXPECT_TRUE(at::allclose(op.grads[i], plain.grads[i], 1e-4, 1e-5))
          << what << " weight " << i << " max |diff| " << (op.grads[i] - plain.grads[i]).abs().max();
    }
    EXPECT_EQ(op.recomputed,
              models::recompute_flops_per_micro_batch(m, 2, 64, ActivationCheckpointing::selective_op(), /*cuda=*/true))
        << what;
  }
}

TEST(ActivationCheckpointingCli, BadValuesExitTwoWithOneLineNamingThem) {
  for (const std::string bad : {"selective-layer:x", "sometimes", "selective"}) {
    const auto r = run_zerobench("run --backend ddp --model tiny --nproc 1 --steps 1 --warmup 0 "
                                 "--activation-checkpointing " + bad + " --quiet --out /dev/null");
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find("'" + bad + "' is not a mode"), std::string::npos) << r.output;
  }
  // model-info takes the same values; the bare flag is full.
  const auto bare = run_zerobench("model-info tiny --world-size 2 --seq-len 128 --activation-checkpointing --json");
  ASSERT_EQ(bare.exit_code, 0) << bare.output;
  const auto every = run_zerobench("model-info tiny --world-size 2 --seq-len 128 --layers 4 "
                                   "--activation-checkpointing selective-layer:2 --json");
  ASSERT_EQ(every.exit_code, 0) << every.output;
  const auto jb = json::parse(bare.output), je = json::parse(every.output);
  EXPECT_EQ(jb["estimated_peak_bytes_per_rank"]["activation_checkpointing_mode"], "full");
  EXPECT_EQ(je["estimated_peak_bytes_per_rank"]["activation_checkpointing_mode"], "selective-layer:2");
  // selective-op runs on CUDA (keeping SDPA's CUDA output): model-info --device cuda estimates it, and
  // at --device cpu its GPU column holds the CUDA rule's peak, above the CPU rule's (the kept
  // attention output and logsumexp per block; refused before issue 37's leftovers).
  const auto op_cuda = run_zerobench("model-info tiny --world-size 2 --device cuda --activation-checkpointing selective-op");
  EXPECT_EQ(op_cuda.exit_code, 0) << op_cuda.output;
  const auto op = run_zerobench("model-info tiny --world-size 2 --activation-checkpointing selective-op --json");
  ASSERT_EQ(op.exit_code, 0) << op.output;
  const auto jo = json::parse(op.output)["estimated_peak_bytes_per_rank"]["by_device"];
  ASSERT_TRUE(jo["cpu"]["fsdp:fp32"].contains("peak_bytes")) << jo.dump();
  ASSERT_TRUE(jo["cuda"]["fsdp:fp32"].contains("peak_bytes")) << jo.dump();
  EXPECT_FALSE(jo["cuda"]["fsdp:fp32"].contains("refused")) << jo.dump();
}

// At W = 2 on CPU, tiny with 4 blocks, grad-accum 2: the five modes train bitwise alike (a
// recompute is the same fp32 arithmetic); each rank's program-order peak is within [0.95, 1.05]
// of its estimate; the recompute FLOPs counted in backward are the closed form, fewer for
// selective-layer than full, absent without checkpointing.
TEST(ActivationCheckpointingRun, LossesBitwiseEqualPeaksWithinFivePercentAndRecomputeCounted) {
  const auto m = tiny_layers(4);
  const int64_t B = 2, T = 128, accum = 2;
  const std::string base = "run --model tiny --layers 4 --nproc 2 --micro-batch 2 --seq-len 128 --grad-accum 2 "
                           "--steps 2 --warmup 1 --data markov --threads 1 --precision fp32 --quiet";
  const std::vector<std::string> modes = {"", "--activation-checkpointing", "--activation-checkpointing selective-layer:2",
                                          "--activation-checkpointing selective-layer:3",
                                          "--activation-checkpointing selective-op"};
  const std::vector<ActivationCheckpointing> expected = {ActivationCheckpointing::none(), ActivationCheckpointing::full(),
                                                         ActivationCheckpointing::selective_layer(2),
                                                         ActivationCheckpointing::selective_layer(3),
                                                         ActivationCheckpointing::selective_op()};
  const auto out = temp_path("ac_modes.json");
  for (const std::string backend : {"fsdp2", "zero3"}) {
    std::vector<double> losses_none;
    std::map<std::string, int64_t> recompute;
    for (size_t i = 0; i < modes.size(); ++i) {
      const std::string cmd = base + " --backend " + backend + " " + modes[i] + " --out " + out;
      const auto r = run_zerobench(cmd);
      ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
      const auto report = reports::read_report(out);
      const auto& train = report["config"]["train"];
      EXPECT_EQ(train["activation_checkpointing_mode"], expected[i].name()) << cmd;
      EXPECT_EQ(train["activation_checkpointing"], expected[i].enabled()) << cmd;
      std::vector<double> losses;
      for (const auto& s : report["steps"]) losses.push_back(s["loss"].get<double>());
      if (i == 0) {
        losses_none = losses;
      } else {
        EXPECT_EQ(losses, losses_none) << cmd << ": a recomputed block must give the same bits";
      }
      for (size_t k = 0; k < report["ranks"].size(); ++k) {
        const auto& mem = report["ranks"][k]["memory"];
        const double ratio = mem["peak_program_bytes"].get<double>() / mem["estimated_peak_bytes"].get<double>();
        EXPECT_GE(ratio, 0.95) << cmd << " rank " << k << ": the estimate is more than 5% too high";
        EXPECT_LE(ratio, 1.05) << cmd << " rank " << k << ": the estimate is more than 5% too low";
      }
      const auto& summary = report["summary"];
      if (!expected[i].enabled()) {
        EXPECT_FALSE(summary.contains("recompute_flops_per_step")) << cmd;
        continue;
      }
      ASSERT_TRUE(summary.contains("recompute_flops_per_step")) << cmd;
      const int64_t counted = summary["recompute_flops_per_step"].get<int64_t>();
      EXPECT_EQ(counted, accum * models::recompute_flops_per_micro_batch(m, B, T, expected[i])) << cmd;
      recompute[expected[i].name()] = counted;
    }
    EXPECT_EQ(recompute["selective-layer:2"] * 2, recompute["full"]) << backend;
    EXPECT_EQ(recompute["selective-layer:3"] * 4, recompute["full"]) << backend;
    EXPECT_LT(recompute["selective-op"], recompute["full"]) << backend;
  }
  std::remove(out.c_str());
}
