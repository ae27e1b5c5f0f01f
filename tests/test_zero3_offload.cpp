// ZeRO3-mode offload (offload_optimizer / offload_param, device cpu; backends/zero3/zero3_offload.*):
// losses against the same run without offload (bitwise where DeepSpeed only moves bytes; bounded
// where its numerics differ), model-state bytes by location against the closed form on every rank,
// host<->device traffic per step against the closed form, the stream order of the copies,
// DeepSpeedCPUAdam's arithmetic, and the DeepSpeed-config keys that select offload.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <mutex>

#include "backends/backend_info.hpp"
#include "backends/zero3/zero3_config.hpp"
#include "backends/zero3/zero3_cpu_adam.hpp"
#include "backends/zero3/zero3_offload.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "config/deepspeed_config.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::zero3::Zero3Options;
using Kind = backends::common::StreamLogEntry::Kind;

namespace {

enum class Off { kNone, kOptimizer, kParam, kBoth };

Zero3Options with(Off off, Zero3Options o = {}) {
  if (off == Off::kOptimizer || off == Off::kBoth) o.offload_optimizer.device = "cpu";
  if (off == Off::kParam || off == Off::kBoth) o.offload_param.device = "cpu";
  return o;
}

backends::EngineSpec spec_for(const std::string& precision, int64_t accum, const Zero3Options& o) {
  auto s = test_support::small_spec(accum);
  s.precision = precision;
  s.options = backends::zero3::to_json(o);
  return s;
}

struct RankRun {
  std::vector<double> losses, norms;
  std::vector<backends::common::OffloadTraffic> traffic;  // per step
  backends::ModelStateBytes bytes;
  backends::common::CollectiveStats last_ag;
  nlohmann::json options;
};

// Trains on W thread-ranks; one RankRun per rank.
std::vector<RankRun> run(const backends::EngineSpec& spec, int w) {
  std::vector<RankRun> out(static_cast<size_t>(w));
  std::mutex m;
  test_support::run_ranks(w, [&](runtime::World& world) {
    auto [engine, r] = test_support::train_on(world, "zero3", spec);
    RankRun rr;
    for (const auto& s : r.steps) {
      rr.losses.push_back(s.loss);
      rr.norms.push_back(s.grad_norm);
      rr.traffic.push_back(s.offload);
    }
    rr.bytes = r.model_state_bytes;
    rr.last_ag = r.comm_last_step[size_t(backends::common::CollectiveKind::kAllGather)];
    rr.options = engine->resolved_options();
    std::lock_guard<std::mutex> lock(m);
    out[size_t(world.rank)] = std::move(rr);
  });
  return out;
}

}  // namespace

// offload_param only moves bytes (partitions to the host, a device copy before each all-gather,
// the updated master copied out): the same run, bit for bit, with and without persistence.
TEST(Zero3Offload, OffloadParamAloneIsBitwiseTheRunWithoutOffload) {
  for (int w : {1, 2, 3}) {
    for (int64_t threshold : {int64_t(0), int64_t(100000)}) {
      Zero3Options o;
      o.stage3_param_persistence_threshold = threshold;
      const auto base = run(spec_for("bf16", 2, o), w);
      const auto off = run(spec_for("bf16", 2, with(Off::kParam, o)), w);
      SCOPED_TRACE("W=" + std::to_string(w) + " persistence " + std::to_string(threshold));
      EXPECT_EQ(off[0].losses, base[0].losses);
      EXPECT_EQ(off[0].norms, base[0].norms);
      EXPECT_GT(off[0].traffic.back().h2d_bytes, 0);
    }
  }
}

// offload_optimizer changes DeepSpeed's numerics in two places: the global norm (per-parameter
// fp64 norms, their squares summed into an fp32 all-reduce: complete_grad_norm_calculation_for_
// cpu_offload) and the update (DeepSpeedCPUAdam's fused order instead of torch's AdamW). With
// torch.optim.AdamW on the host only the norm differs; either way the first loss is the same
// bitwise and the rest stay within fp32 rounding of the run without offload.
TEST(Zero3Offload, OffloadOptimizerDiffersOnlyByDeepSpeedsNormAndCpuAdamArithmetic) {
  for (const char* host : {backends::zero3::kTorchAdamW, backends::zero3::kCpuAdam}) {
    Zero3Options o = with(Off::kOptimizer);
    o.host_optimizer = host;
    const auto base = run(spec_for("fp32", 2, Zero3Options{}), 2);
    const auto off = run(spec_for("fp32", 2, o), 2);
    SCOPED_TRACE(host);
    ASSERT_EQ(off[0].losses.size(), base[0].losses.size());
    EXPECT_EQ(off[0].losses[0], base[0].losses[0]);
    for (size_t i = 0; i < base[0].losses.size(); ++i) {
      EXPECT_NEAR(off[0].losses[i], base[0].losses[i], 1e-5 * std::abs(base[0].losses[i])) << i;
      EXPECT_NEAR(off[0].norms[i], base[0].norms[i], 1e-5 * std::abs(base[0].norms[i])) << i;
    }
    EXPECT_EQ(off[0].options["host_optimizer"], host);
  }
}

TEST(Zero3Offload, BytesByLocationEqualTheClosedFormOnEveryRank) {
  for (Off off : {Off::kNone, Off::kOptimizer, Off::kParam, Off::kBoth}) {
    for (int w : {1, 2, 3}) {
      for (int64_t threshold : {int64_t(0), int64_t(100000)}) {
        Zero3Options o;
        o.stage3_param_persistence_threshold = threshold;
        o.sub_group_size = 30000;  // several sub-groups: several fp32 gradient buffers on the host
        const auto spec = spec_for("bf16", 1, with(off, o));
        const auto ranks = run(spec, w);
        for (int r = 0; r < w; ++r) {
          const auto expected = backends::backend("zero3").training.expected_bytes(spec, w, r);
          EXPECT_EQ(ranks[size_t(r)].bytes, expected) << "offload " << int(off) << " W=" << w << " rank " << r
                                                      << " threshold " << threshold;
          if (off == Off::kNone) { EXPECT_EQ(expected.host.total(), 0); }
          if (off != Off::kNone) { EXPECT_GT(expected.host.total(), 0); }
        }
      }
    }
  }
}

// Each step's traffic: the closed form (expected_step_traffic) for offload_optimizer's gradient
// copies and the copy of the updated masters, plus one host->device copy of each all-gathered
// partition (an all-gather's output is W times its input: ag.bytes / W).
TEST(Zero3Offload, TrafficPerStepEqualsTheClosedForm) {
  for (Off off : {Off::kOptimizer, Off::kParam, Off::kBoth}) {
    for (int w : {2, 3}) {
      for (int64_t accum : {int64_t(1), int64_t(2)}) {
        Zero3Options o;
        o.sub_group_size = 30000;
        const auto spec = spec_for("bf16", accum, with(off, o));
        const auto ranks = run(spec, w);
        for (int r = 0; r < w; ++r) {
          const auto& rr = ranks[size_t(r)];
          const auto expected = backends::zero3::expected_step_traffic(spec, w, r);
          SCOPED_TRACE("offload " + std::to_string(int(off)) + " W=" + std::to_string(w) + " accum " +
                       std::to_string(accum) + " rank " + std::to_string(r));
          const bool fetches = off != Off::kOptimizer;
          for (const auto& t : rr.traffic) {
            EXPECT_EQ(t.d2h_bytes, expected.d2h_bytes);
            EXPECT_EQ(t.d2h_copies, expected.d2h_copies);
            if (!fetches) { EXPECT_EQ(t.h2d_bytes, expected.h2d_bytes); }
          }
          if (fetches) { EXPECT_EQ(rr.traffic.back().h2d_bytes - expected.h2d_bytes, rr.last_ag.bytes / w); }
        }
      }
    }
  }
}

// With nothing persistent, no reuse and no prefetch every weight is fetched once in forward and
// once in backward per micro-batch once the trace is recorded: 2*G*(sum of partitions)*2 bytes.
TEST(Zero3Offload, OffloadParamFetchesEachPartitionTwicePerMicroBatch) {
  Zero3Options o = with(Off::kParam);
  o.stage3_param_persistence_threshold = 0;
  o.stage3_max_reuse_distance = 0;
  o.stage3_prefetch_bucket_size = 0;
  const int w = 2;
  const auto spec = spec_for("bf16", 2, o);
  int groups = 1;
  int64_t partitions = 0;
  for (const auto& l : backends::zero3::param_layouts(spec.model, w, backends::zero3::zero3_options(spec.options), &groups))
    partitions += l.part_numel;
  const auto ranks = run(spec, w);
  const auto step = backends::zero3::expected_step_traffic(spec, w, 0);
  EXPECT_EQ(ranks[0].traffic.back().h2d_bytes, step.h2d_bytes + 2 * 2 * partitions * 2);
}

// The gates above can fail: a closed form for the wrong configuration does not match.
TEST(Zero3Offload, PlantedFaultsAreCaught) {
  const auto spec = spec_for("bf16", 2, with(Off::kBoth));
  const auto ranks = run(spec, 2);
  auto wrong = spec;
  wrong.options = backends::zero3::to_json(with(Off::kOptimizer));  // forgets offload_param
  EXPECT_FALSE(ranks[0].bytes == backends::backend("zero3").training.expected_bytes(wrong, 2, 0));
  auto one_micro = spec;
  one_micro.train.grad_accum = 1;  // forgets the second micro-batch's copies
  EXPECT_NE(ranks[0].traffic.back().d2h_bytes, backends::zero3::expected_step_traffic(one_micro, 2, 0).d2h_bytes);
}

// On the streams DeepSpeed uses: partitions go to the device on the all-gather stream before
// their all-gather; gradient partitions go to the host on the reduce-and-partition stream after
// their bucket's reduce-scatter was waited for there, and before the host's end-of-backward sync.
TEST(Zero3Offload, StreamLogOrdersTheCopies) {
  auto spec = spec_for("bf16", 1, with(Off::kBoth));
  spec.train.steps = 1;
  spec.train.warmup = 0;
  Zero3Options o = with(Off::kBoth);
  o.stage3_param_persistence_threshold = 0;
  spec.options = backends::zero3::to_json(o);
  std::unique_ptr<backends::Engine> kept;
  std::mutex m;
  test_support::run_ranks(2, [&](runtime::World& world) {
    auto engine = backends::create_engine("zero3", spec, world);
    if (world.rank == 0) engine->comm().streams().set_logging(true);
    auto data = models::make_data_source("random", spec.model.vocab, 1);
    backends::common::Comm side(world.side_channel());
    bench::run_training(*engine, spec, *data, side);
    if (world.rank == 0) {
      std::lock_guard<std::mutex> lock(m);
      kept = std::move(engine);
    }
  });
  const auto& s = kept->comm().streams();
  const auto& log = s.log();
  int to_device = 0, to_host = 0;
  const auto end_sync = s.find(Kind::kHostSync, "reduce_and_partition", "stream");
  ASSERT_GE(end_sync, 0) << s.dump();
  for (const auto& e : log) {
    if (e.kind != Kind::kOp) continue;
    if (e.label.rfind("offload: partition to device", 0) == 0) {
      ++to_device;
      EXPECT_EQ(e.stream, "allgather") << e.seq;
      // The next collective issued from the all-gather stream reads it.
      int64_t next = -1;
      for (const auto& c : log)
        if (c.seq > e.seq && c.kind == Kind::kCollective && c.other == "allgather") {
          next = c.seq;
          break;
        }
      ASSERT_GE(next, 0) << s.dump();
      EXPECT_TRUE(s.happens_before(e.seq, next));
    }
    if (e.label == "partition_grads (offload: grad partitions to host)") {
      ++to_host;
      EXPECT_EQ(e.stream, "reduce_and_partition") << e.seq;
      int64_t rs = -1;  // the last reduce-scatter waited for on that stream before it
      for (const auto& c : log)
        if (c.seq < e.seq && c.kind == Kind::kWaitCollective && c.stream == "reduce_and_partition") rs = c.seq;
      ASSERT_GE(rs, 0) << s.dump();
      EXPECT_TRUE(s.happens_before(rs, e.seq));
      EXPECT_LT(e.seq, end_sync);
    }
  }
  EXPECT_GT(to_device, 0);
  EXPECT_GT(to_host, 0) << s.dump();
}

// DeepSpeedCPUAdam's order, element by element, against the formula written out in double
// (agreement to fp32 rounding) and against torch's AdamW (not bitwise: a different order).
TEST(Zero3Offload, CpuAdamFollowsDeepSpeedsUpdate) {
  backends::common::AdamWOptions opts;
  opts.weight_decay = 0.1;
  auto p = at::randn({1000}, at::kFloat);
  auto p0 = p.clone();
  auto g = at::randn({1000}, at::kFloat);
  backends::zero3::CpuAdam adam(p, opts);
  adam.step(g, {1e-2, 0.9, 0.999});
  adam.step(g, {1e-2, 0.9, 0.999});
  // Two steps with the same gradient, in double.
  auto pd = p0.to(at::kDouble), gd = g.to(at::kDouble), md = at::zeros_like(pd), vd = at::zeros_like(pd);
  for (int t = 1; t <= 2; ++t) {
    md = md * 0.9 + gd * 0.1;
    vd = vd * 0.999 + gd * gd * 0.001;
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 / std::sqrt(1 - std::pow(0.999, t));
    pd = pd - 1e-2 * 0.1 * pd;
    pd = pd - (1e-2 / bc1) * md / (vd.sqrt() * bc2 + 1e-8);
  }
  EXPECT_LT((p.to(at::kDouble) - pd).abs().max().item<double>(), 1e-5);
  auto q = p0.clone();
  backends::common::AdamW torch_adam({q}, opts);
  torch_adam.step({g}, {1e-2, 0.9, 0.999});
  torch_adam.step({g}, {1e-2, 0.9, 0.999});
  EXPECT_LT((p - q).abs().max().item<double>(), 1e-5);
  EXPECT_EQ(adam.steps_taken(), 2);
}

namespace {
config::DeepSpeedConfig read_ds(nlohmann::json j) {
  j["train_micro_batch_size_per_gpu"] = 4;
  config::TrainerArgs args;
  args.hidden = 64;
  return config::read_deepspeed_json(j, args, config::AutoFill::kHfTrainer, backends::zero3::accept_stage);
}
Zero3Options options_of(const nlohmann::json& j) { return backends::zero3::options_from_deepspeed(read_ds(j)); }
std::string refusal(const nlohmann::json& j) {
  try {
    options_of(j);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Zero3OffloadConfig, DeepSpeedKeysSelectOffloadAndTheHostOptimizer) {
  using nlohmann::json;
  auto o = options_of({{"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", false}}}}}});
  EXPECT_TRUE(o.offload_optimizer.enabled());
  EXPECT_FALSE(o.offload_optimizer.pin_memory);
  EXPECT_FALSE(o.offload_param.enabled());
  // No optimizer section: the trainer's AdamW, which accelerate turns into DeepSpeedCPUAdam
  // unless zero_force_ds_cpu_optimizer is false.
  EXPECT_EQ(o.host_optimizer, backends::zero3::kCpuAdam);
  o = options_of({{"zero_force_ds_cpu_optimizer", false},
                  {"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}}}}}});
  EXPECT_EQ(o.host_optimizer, backends::zero3::kTorchAdamW);
  o = options_of({{"optimizer", {{"type", "AdamW"}, {"params", {{"torch_adam", true}}}}},
                  {"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}}}}}});
  EXPECT_EQ(o.host_optimizer, backends::zero3::kTorchAdamW);
  o = options_of({{"zero_optimization", {{"stage", 3}, {"offload_param", {{"device", "cpu"}, {"max_in_cpu", 5e8}}}}}});
  EXPECT_TRUE(o.offload_param.enabled());
  EXPECT_EQ(o.offload_param.max_in_cpu, 500000000);
  // Deprecated switches, as config.py's new_param_fn maps them.
  o = options_of({{"zero_optimization", {{"stage", 3}, {"cpu_offload", true}, {"cpu_offload_param", true}}}});
  EXPECT_TRUE(o.offload_optimizer.enabled());
  EXPECT_TRUE(o.offload_param.enabled());
  EXPECT_TRUE(o.offload_optimizer.pin_memory);
}

TEST(Zero3OffloadConfig, RefusalsNameTheKey) {
  using nlohmann::json;
  EXPECT_NE(refusal({{"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "nvme"}}}}}})
                .find("zero_optimization.offload_optimizer.device nvme"),
            std::string::npos);
  EXPECT_NE(refusal({{"zero_optimization", {{"stage", 3}, {"offload_param", {{"device", "nvme"}}}}}})
                .find("zero_optimization.offload_param.device nvme"),
            std::string::npos);
  EXPECT_NE(refusal({{"zero_optimization", {{"stage", 3}, {"cpu_offload", true}, {"offload_optimizer", {{"device", "cpu"}}}}}})
                .find("zero_optimization.cpu_offload"),
            std::string::npos);
  EXPECT_NE(refusal({{"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.5}}}}}})
                .find("ratio"),
            std::string::npos);
  EXPECT_NE(refusal({{"zero_optimization", {{"stage", 3}, {"offload_param", {{"device", "cpu"}, {"bogus", 1}}}}}})
                .find("zero_optimization.offload_param.bogus"),
            std::string::npos);
  EXPECT_NE(refusal({{"optimizer", {{"type", "AdamW"}, {"params", {{"fp32_optimizer_states", false}}}}},
                     {"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}}}}}})
                .find("fp32_optimizer_states"),
            std::string::npos);
}

// Real DeepSpeed 0.19.8 (scripts/crossval/run_deepspeed.py, DS_ACCELERATOR=cpu, Gloo, W=2) with
// offload_param and offload_optimizer together (both offload paths in one run, in each precision;
// each choice alone is a point of scripts/crossval-sweeps.sh, checked there with these assertions,
// reports/results/cpu/crossval-sweeps/): every step's loss and grad norm agree (bf16 losses
// bitwise; fp32 within 1e-5),
// the collectives agree or are explained, and every rank's bytes agree by category on the device
// and, by location, on the host (the runner reports DeepSpeed's own split). With
// offload_optimizer DeepSpeed builds DeepSpeedCPUAdam from the JSON: its cpu_adam op is compiled
// on first use (about 18 minutes on this shared 2-core machine; cached in
// ~/.cache/torch_extensions afterwards).
TEST(Zero3OffloadCrossval, AgreesWithDeepSpeedWithBothOffloads) {
  using nlohmann::json;
  auto read = [](const std::string& path) {
    std::ifstream f(path);
    return json::parse(f);
  };
  {
    const std::string flags = "--zero3-offload-optimizer cpu --zero3-offload-param cpu";
    const auto out = test_support::temp_path("zero3_offload_crossval.json");
    const auto r = test_support::run_zerobench(
        "crossval --backend zero3 --precision bf16,fp32 --nproc 2 --model tiny --layers 2 --steps 3 --warmup 1 "
        "--micro-batch 2 --seq-len 32 --reduce-bucket-size 50000 --weight-decay 0.1 " + flags + " --out " + out);
    const auto doc = read(out);
    for (const auto& mode : doc["modes"]) {
      const std::string precision = mode["precision"];
      const double tol = precision == "bf16" ? 0.0 : 1e-5;
      EXPECT_LE(mode["max_loss_rel_diff"].get<double>(), tol) << precision << r.output;
      EXPECT_LE(mode["max_grad_norm_rel_diff"].get<double>(), 1e-5) << precision;
      EXPECT_TRUE(mode["comm_differences_explained"].get<bool>()) << precision;
      for (const auto& e : mode["model_states"]) {
        if (e["category"] == "host") continue;  // compared below (crossval_compare reads top-level numbers)
        EXPECT_TRUE(e["equal"].get<bool>() || !e["explanation"].is_null()) << precision << " " << e.dump();
      }
      const std::string work = mode["work_dir"];
      const auto zb = read(work + "/zerobench.json");
      for (int rank = 0; rank < 2; ++rank) {
        const auto up = read(work + "/upstream/rank" + std::to_string(rank) + ".json");
        const auto& zh = zb["ranks"][rank]["memory"]["model_states_bytes"]["host"];
        EXPECT_FALSE(zh.is_null());
        EXPECT_EQ(zh, up["model_states_bytes"]["host"]) << precision << " rank " << rank;
      }
    }
  }
}
