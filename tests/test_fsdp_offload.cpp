// FSDP-mode CPUOffload(offload_params=True) (backends/fsdp/fsdp_offload.hpp): offload only moves
// bytes, so a run with it equals the run without bitwise (losses, grad norms, parameters) in every
// precision and strategy; bytes by location and host<->device traffic per step equal the closed
// forms derived from FSDP1's code (fsdp_offload_estimate.hpp) on every rank; the dependency log
// orders each host->device copy before its all-gather and each gradient copy back after its
// reduce-scatter, synchronised before the optimizer reads it; a planted fault (the gradient copy
// back skipped) is caught by those gates; FSDP1's refusal (accumulation outside no_sync) exits 2.
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>

#include "backends/backend_info.hpp"
#include "backends/common/alloc_safety.hpp"
#include "backends/fsdp/fsdp_engine.hpp"
#include "backends/fsdp/fsdp_offload_estimate.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::fsdp::FsdpOptions;
using backends::fsdp::ShardingStrategy;

namespace {
backends::EngineSpec offload_spec(const std::string& precision, int64_t accum, bool offload,
                                  ShardingStrategy st = ShardingStrategy::kFullShard, int hybrid = 0) {
  auto s = test_support::small_spec(accum);
  s.precision = precision;
  s.train.steps = 3;
  s.train.warmup = 0;
  FsdpOptions o;
  o.sharding_strategy = st;
  o.hybrid_shard_group_size = hybrid;
  o.offload_params = offload;
  s.options = backends::fsdp::to_json(o);
  return s;
}

// Rank 0's steps and full parameters; every rank's bytes, per-step traffic and the closed forms'.
struct Run {
  std::vector<bench::StepRecord> steps;
  std::vector<at::Tensor> params;
  std::vector<backends::ModelStateBytes> bytes;  // per rank
  std::vector<backends::common::OffloadTraffic> last_step;  // per rank
};
Run train(const backends::EngineSpec& spec, int w, bool skip_grad_copy = false) {
  Run out;
  out.bytes.resize(size_t(w));
  out.last_step.resize(size_t(w));
  std::mutex m;
  test_support::run_ranks(w, [&](runtime::World& world) {
    auto engine = backends::create_engine("fsdp", spec, world);
    if (skip_grad_copy) backends::fsdp::plant_skip_grad_copy(*engine);
    auto data = models::make_data_source("random", spec.model.vocab, 1);
    backends::common::Comm side(world.side_channel());
    auto r = bench::run_training(*engine, spec, *data, side);
    auto params = engine->full_parameters();
    std::lock_guard<std::mutex> lock(m);
    out.bytes[size_t(world.rank)] = r.model_state_bytes;
    out.last_step[size_t(world.rank)] = r.steps.back().offload;
    if (world.rank == 0) {
      out.steps = r.steps;
      out.params = params;
    }
  });
  return out;
}

// The parity gate: "" when the two runs agree bitwise, else what differs first.
std::string bitwise_difference(const Run& a, const Run& b) {
  if (a.steps.size() != b.steps.size()) return "step count";
  for (size_t i = 0; i < a.steps.size(); ++i) {
    if (a.steps[i].loss != b.steps[i].loss) return "loss at step " + std::to_string(i);
    if (a.steps[i].grad_norm != b.steps[i].grad_norm) return "grad norm at step " + std::to_string(i);
  }
  for (size_t u = 0; u < a.params.size(); ++u)
    if (!at::equal(a.params[u], b.params[u])) return "parameters of unit " + std::to_string(u);
  return "";
}

bool same_traffic(const backends::common::OffloadTraffic& a, const backends::common::OffloadTraffic& b) {
  return a.h2d_bytes == b.h2d_bytes && a.d2h_bytes == b.d2h_bytes && a.h2d_copies == b.h2d_copies &&
         a.d2h_copies == b.d2h_copies;
}
std::string str(const backends::common::OffloadTraffic& t) {
  return "h2d " + std::to_string(t.h2d_copies) + " copies " + std::to_string(t.h2d_bytes) + " B, d2h " +
         std::to_string(t.d2h_copies) + " copies " + std::to_string(t.d2h_bytes) + " B";
}
}  // namespace

// Upstream's math is unchanged by offload on one device kind: the shard is copied, not cast
// (flat_param_to), or copied then cast exactly as without offload (_use_low_precision_shard); the
// gradient is copied after the same reduction; clip and AdamW run the same kernels on the host.
TEST(FsdpOffload, EqualsTheRunWithoutOffloadBitwiseInEveryPrecisionAndStrategy) {
  struct Case {
    std::string name, precision;
    int w;
    ShardingStrategy st;
    int hybrid;
    int64_t accum;
  };
  const std::vector<Case> cases = {
      {"fp32 FULL_SHARD W2 accum2", "fp32", 2, ShardingStrategy::kFullShard, 0, 2},
      {"low FULL_SHARD W2", "low", 2, ShardingStrategy::kFullShard, 0, 1},
      {"mixed FULL_SHARD W2 accum2", "mixed", 2, ShardingStrategy::kFullShard, 0, 2},
      {"mixed SHARD_GRAD_OP W2", "mixed", 2, ShardingStrategy::kShardGradOp, 0, 1},
      {"fp32 NO_SHARD W2", "fp32", 2, ShardingStrategy::kNoShard, 0, 1},
      {"mixed HYBRID_SHARD W4 S2", "mixed", 4, ShardingStrategy::kHybridShard, 2, 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto off = train(offload_spec(c.precision, c.accum, false, c.st, c.hybrid), c.w);
    const auto on = train(offload_spec(c.precision, c.accum, true, c.st, c.hybrid), c.w);
    EXPECT_EQ(bitwise_difference(off, on), "");
    ASSERT_EQ(on.steps.size(), 3u);
    EXPECT_GT(on.steps[0].grad_norm, 0.0);
    EXPECT_NE(on.steps[0].loss, on.steps[2].loss);  // it trained
  }
}

// Bytes by location and the traffic of the last step on every rank of W=3 with uneven units
// (vocab 251: root 64384 and block 184576 elements, neither divisible by 3), against the closed
// form and against the numbers worked out here by hand.
TEST(FsdpOffload, BytesByLocationAndTrafficPerStepEqualTheClosedFormOnEveryRank) {
  const int W = 3;
  const int64_t L = 2, accum = 2;
  for (const std::string precision : {"fp32", "low", "mixed"}) {
    for (auto st : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard}) {
      auto spec = offload_spec(precision, accum, true, st);
      spec.model.vocab = 251;
      spec.train.steps = 2;
      const bool sharded = st != ShardingStrategy::kNoShard;
      const int64_t root = sharded ? (64384 + 2) / 3 : 64384, block = sharded ? (184576 + 2) / 3 : 184576;
      const int64_t n = root + L * block, e = precision == "low" ? 2 : 4, units = L + 1;
      backends::ModelStateBytes by_hand;  // nothing on the device at the end of backward
      by_hand.host = {n * e, 0, n * e, 2 * n * e, 0, /*pinned=*/true};
      // Every unshard copies the host shard (2 per unit per micro-batch); one gradient copy back
      // per unit per step; the grad norm's scalar each way when sharded.
      const backends::common::OffloadTraffic traffic_by_hand{2 * accum * n * e + (sharded ? 4 : 0),
                                                             n * e + (sharded ? 4 : 0),
                                                             2 * accum * units + (sharded ? 1 : 0),
                                                             units + (sharded ? 1 : 0)};
      const auto run = train(spec, W);
      for (int r = 0; r < W; ++r) {
        SCOPED_TRACE(precision + " " + backends::fsdp::to_string(st) + " rank " + std::to_string(r));
        const auto closed = backends::backend("fsdp").training.expected_bytes(spec, W, r);
        EXPECT_EQ(closed, by_hand);
        EXPECT_EQ(run.bytes[size_t(r)], closed);
        const auto traffic = backends::fsdp::offload_traffic_per_step(spec, W, r);
        EXPECT_TRUE(same_traffic(traffic, traffic_by_hand)) << str(traffic) << " vs " << str(traffic_by_hand);
        EXPECT_TRUE(same_traffic(run.last_step[size_t(r)], traffic)) << str(run.last_step[size_t(r)]) << " vs "
                                                                     << str(traffic);
      }
    }
  }
  // The count does not depend on prefetch, activation checkpointing (the recompute reuses the
  // gathered parameters it saved) or HYBRID_SHARD (its norm all-reduce is over the shard group).
  {
    auto ckpt = offload_spec("mixed", 2, true);
    ckpt.train.activation_checkpointing = models::ActivationCheckpointing::full();
    auto prefetch = offload_spec("fp32", 1, true);
    FsdpOptions o;
    o.offload_params = true;
    o.forward_prefetch = true;
    o.backward_prefetch = backends::fsdp::BackwardPrefetch::kBackwardPost;
    prefetch.options = backends::fsdp::to_json(o);
    const auto hybrid = offload_spec("low", 1, true, ShardingStrategy::kHybridShard, 2);
    for (const auto& [spec, w] : {std::pair{ckpt, 2}, std::pair{prefetch, 2}, std::pair{hybrid, 4}}) {
      const auto run = train(spec, w);
      for (int r = 0; r < w; ++r) {
        const auto traffic = backends::fsdp::offload_traffic_per_step(spec, backends::Topology(w, w), r);
        EXPECT_TRUE(same_traffic(run.last_step[size_t(r)], traffic))
            << spec.options.dump() << " rank " << r << ": " << str(run.last_step[size_t(r)]) << " vs " << str(traffic);
        EXPECT_EQ(run.bytes[size_t(r)],
                  backends::backend("fsdp").training.expected_bytes(spec, backends::Topology(w, w), r));
      }
    }
  }
  // Without offload: no host bytes, no traffic.
  auto plain = offload_spec("fp32", 1, false);
  EXPECT_EQ(backends::backend("fsdp").training.expected_bytes(plain, 2, 0).host.total(), 0);
  EXPECT_TRUE(same_traffic(backends::fsdp::offload_traffic_per_step(plain, 2, 0), {}));
}

// The CUDA schedule, from rank 0's dependency log (deferred CPU streams): each host->device copy
// is issued on the pre-unshard stream and ordered before the unit's all-gather; each gradient
// copy back runs on the post-backward stream after the reduce-scatter it copies; the host
// synchronises after the last copy back, before the optimizer reads the host gradients.
TEST(FsdpOffload, CopiesAreOrderedBeforeTheAllGatherAndAfterTheReduceScatter) {
  using Kind = backends::common::StreamLogEntry::Kind;
  for (const std::string precision : {"fp32", "mixed"}) {
    SCOPED_TRACE(precision);
    auto spec = offload_spec(precision, 1, true);
    spec.train.steps = 1;
    std::unique_ptr<backends::Engine> kept;
    std::mutex m;
    test_support::run_ranks(2, [&](runtime::World& world) {
      auto engine = backends::create_engine("fsdp", spec, world);
      if (world.rank == 0) engine->comm().streams().set_logging(true);
      auto data = models::make_data_source("random", spec.model.vocab, 1);
      backends::common::Comm side(world.side_channel());
      bench::run_training(*engine, spec, *data, side);
      std::lock_guard<std::mutex> lock(m);
      if (world.rank == 0) kept = std::move(engine);
    });
    auto& s = kept->comm().streams();
    s.flush_frees();
    const int units = spec.model.layers + 1;
    // current_stream().synchronize() in the final callback (the limiter's event syncs come earlier).
    const int64_t sync = s.find(Kind::kHostSync, "compute", "stream");
    ASSERT_GE(sync, 0) << "no host synchronisation after the gradient copies";
    for (int u = 0; u < units; ++u) {
      const std::string label = "unit" + std::to_string(u);
      for (const bool last : {false, true}) {  // forward's copy and gather, then backward's
        const auto h2d = s.find(Kind::kOp, "pre_unshard", "offload h2d " + label, last);
        ASSERT_GE(h2d, 0) << label;
        if (u == 0 && last) continue;  // the root stays unsharded: its pre-backward copy has no gather
        const auto ag = s.find(Kind::kCollective, "", "all_gather:" + label, last);
        ASSERT_GE(ag, 0) << label;
        EXPECT_TRUE(s.happens_before(h2d, ag)) << label << (last ? " backward" : " forward") << "\n" << s.dump();
      }
      const auto rs = s.find(Kind::kCollective, "", "reduce_scatter:" + label);
      const auto d2h = s.find(Kind::kOp, "post_backward", "offload d2h " + label);
      ASSERT_GE(rs, 0) << label;
      ASSERT_GE(d2h, 0) << label;
      EXPECT_TRUE(s.happens_before(rs, d2h)) << label;
      EXPECT_FALSE(s.happens_before(d2h, rs)) << label;
      EXPECT_TRUE(s.happens_before(d2h, sync)) << label << ": the host reads the gradient before its copy is done";
    }
    // No block reused before the streams that read it are ordered (the device copies handed to
    // the unshard stream are recorded there, as _all_gather_flat_param does).
    EXPECT_TRUE(backends::common::check_allocator_safety(s).empty());
  }
}

// The planted fault: the gradient copy back (_offload_grad) skipped. The parity gate and the
// traffic gate above must both catch it.
TEST(FsdpOffload, ASkippedGradientCopyBackFailsTheParityAndTrafficGates) {
  const auto spec_off = offload_spec("fp32", 1, false), spec_on = offload_spec("fp32", 1, true);
  const auto off = train(spec_off, 2);
  const auto good = train(spec_on, 2);
  const auto planted = train(spec_on, 2, /*skip_grad_copy=*/true);
  EXPECT_EQ(bitwise_difference(off, good), "");
  EXPECT_NE(bitwise_difference(off, planted), "") << "the parity gate misses a skipped gradient copy";
  const auto traffic = backends::fsdp::offload_traffic_per_step(spec_on, 2, 0);
  EXPECT_TRUE(same_traffic(good.last_step[0], traffic));
  EXPECT_FALSE(same_traffic(planted.last_step[0], traffic)) << "the traffic gate misses a skipped gradient copy";
}

// The command line and accelerate's key: the run reports the offload (resolved options, bytes by
// location, traffic per step); accumulation outside no_sync is refused with one line, exit 2.
TEST(FsdpOffload, TheFlagAndTheAccelerateKeyRunItAndTheReportShowsIt) {
  const auto out = test_support::temp_path("fsdp_offload.json");
  auto r = test_support::run_zerobench("run --nproc 2 --backend fsdp --precision mixed --model small --layers 2 "
                                       "--micro-batch 1 --seq-len 32 --steps 2 --warmup 0 --fsdp-offload-params --out " +
                                       out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = reports::read_report(out);
  std::remove(out.c_str());
  EXPECT_EQ(report["config"]["backend"]["options"]["cpu_offload"]["offload_params"], true) << report["config"].dump();
  const auto& rank0 = report["ranks"][0];
  const auto& host = rank0["memory"]["model_states_bytes"]["host"];
  EXPECT_GT(host["params"].get<int64_t>(), 0) << rank0["memory"].dump();
  EXPECT_EQ(host["optimizer"].get<int64_t>(), 2 * host["params"].get<int64_t>());
  EXPECT_EQ(rank0["memory"]["model_states_bytes"]["params"].get<int64_t>(), 0);
  EXPECT_GT(rank0["offload"]["last_step"]["h2d_bytes"].get<int64_t>(), 0) << rank0["offload"].dump();

  const auto cfg = test_support::temp_path("fsdp_offload.yaml");
  {
    std::ofstream f(cfg);
    f << "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 2\nfsdp_config:\n"
         "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_offload_params: true\n"
         "  fsdp_sharding_strategy: FULL_SHARD\n";
  }
  const auto out2 = test_support::temp_path("fsdp_offload_cfg.json");
  r = test_support::run_zerobench("run --config " + cfg + " --model small --layers 2 --micro-batch 1 --seq-len 32 "
                                  "--steps 1 --warmup 0 --out " + out2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  report = reports::read_report(out2);
  std::remove(out2.c_str());
  EXPECT_EQ(report["config"]["backend"]["options"]["cpu_offload"]["offload_params"], true);
  EXPECT_GT(report["ranks"][0]["memory"]["model_states_bytes"]["host"]["grads"].get<int64_t>(), 0);

  r = test_support::run_zerobench("run --nproc 2 --backend fsdp --model small --layers 2 --micro-batch 1 --seq-len 32 "
                                  "--steps 1 --warmup 0 --grad-accum 2 --sync-each-batch --fsdp-offload-params");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("offload_params true with sync_each_batch and grad_accum 2"), std::string::npos) << r.output;
  std::remove(cfg.c_str());
}

// crossval's model-state rule (backends/fsdp/fsdp_crossval.cpp) under CPUOffload: the AdamW
// states are the category "host.optimizer" of the flat categories crossval compares, and the
// rule predicts FSDP1's from zerobench's host bytes (the padding's states taken off), exactly as
// it does for the device's "optimizer" without offload. Planted: the rule reading the device's
// optimizer bytes (0 under offload) would predict a negative count.
TEST(FsdpOffload, CrossvalsStateRuleReadsTheHostOptimizerBytesUnderOffload) {
  const auto spec = offload_spec("fp32", 1, true);
  const auto& ref = backends::backend("fsdp").crossval;
  ASSERT_TRUE(ref && ref->explain_state);
  const nlohmann::json options = spec.options.json();
  const backends::CrossvalCase c{spec, 3, options, "gloo"};
  const int64_t host_optimizer = 1'000'000;
  const nlohmann::json zb = {{"params", 0},          {"grads", 0},     {"optimizer", 0}, {"master_params", 0},
                             {"host.params", 500000}, {"host.optimizer", host_optimizer}, {"host.pinned", 1}};
  bool some_padding = false;
  for (int rank = 0; rank < 3; ++rank) {
    const auto host = ref->explain_state(c, rank, "host.optimizer", zb);
    const auto device = ref->explain_state(c, rank, "optimizer", {{"optimizer", host_optimizer}});
    ASSERT_EQ(host.has_value(), device.has_value()) << "rank " << rank;
    if (!host) continue;  // no padding on this rank: nothing to explain
    some_padding = true;
    EXPECT_EQ(host->expected, device->expected) << "rank " << rank;
    EXPECT_GT(host->expected, 0) << "rank " << rank;
    EXPECT_LT(host->expected, host_optimizer) << "rank " << rank;
    EXPECT_EQ((host_optimizer - host->expected) % 8, 0) << "two fp32 states per padding element";
  }
  EXPECT_TRUE(some_padding) << "W=3 pads some unit of the small model";
}
