// ZeRO stages 1/2 with offload_optimizer device cpu (backends/zero12/zero12_offload.*): bytes by
// location on every rank against a closed form worked out here from the model's shapes (W=2, and
// W=3 with alignment padding), the host<->device copies of each step against the closed form,
// losses against the same run without offload (bitwise with torch's AdamW on the host and no
// clipping; within fp32 rounding with DeepSpeedCPUAdam), planted faults the gates catch, and the
// DeepSpeed keys and flags that select offload.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "backends/backend_info.hpp"
#include "backends/zero12/zero12_config.hpp"
#include "backends/zero12/zero12_engine.hpp"
#include "backends/zero12/zero12_offload.hpp"
#include "backends/zero12/zero12_options.hpp"
#include "config/deepspeed_config.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"
#include "tests/zero12_support.hpp"

using namespace zb;
using backends::zero12::Zero12Options;

namespace {

Zero12Options offload(const std::string& host_optimizer = backends::zero12::kCpuAdam) {
  Zero12Options o;
  o.offload_optimizer = "cpu";
  o.host_optimizer = host_optimizer;
  return o;
}

struct RankRun {
  std::vector<double> losses, norms;
  std::vector<backends::common::OffloadTraffic> traffic;  // per step
  backends::ModelStateBytes bytes;
  nlohmann::json options;
};

std::vector<RankRun> run(int stage, const backends::EngineSpec& spec, int w) {
  std::vector<RankRun> out(static_cast<size_t>(w));
  std::mutex m;
  test_support::run_ranks(w, [&](runtime::World& world) {
    auto [engine, r] = test_support::train_on(world, "zero" + std::to_string(stage), spec);
    RankRun rr;
    for (const auto& s : r.steps) {
      rr.losses.push_back(s.loss);
      rr.norms.push_back(s.grad_norm);
      rr.traffic.push_back(s.offload);
    }
    rr.bytes = r.model_state_bytes;
    rr.options = engine->resolved_options();
    std::lock_guard<std::mutex> lock(m);
    out[size_t(world.rank)] = std::move(rr);
  });
  return out;
}

// Written out from stage_1_and_2.py's cpu_offload allocations (see zero12_offload.hpp): the flat
// buffer padded to 2W on the device with the largest parameter's temp gradient buffer; on the host
// the fp32 partition, its fp32 .grad, two fp32 Adam states, a model-dtype copy of the partition,
// the host temp buffer, and (stage 2 with accumulation) every touching parameter's whole gradient.
backends::ModelStateBytes closed_form(int stage, const backends::EngineSpec& spec, int w, int rank) {
  const auto numels = test_support::zero12_flat_numels(spec.model);
  int64_t n = 0, largest = 0;
  for (auto x : numels) {
    n += x;
    largest = std::max(largest, x);
  }
  const int64_t padded = (n + 2 * w - 1) / (2 * w) * (2 * w), P = padded / w;
  const int64_t e = spec.precision == "bf16" ? 2 : 4;
  int64_t touching = 0, off = 0;
  for (auto x : numels) {
    if (off < (rank + 1) * P && off + x > rank * P) touching += x;
    off += x;
  }
  backends::ModelStateBytes b;
  b.params = padded * e;
  b.grads = largest * e;
  b.host.params = P * e;
  b.host.master_params = P * 4;
  b.host.optimizer = 2 * P * 4;
  b.host.grads = P * 4 + largest * e + (stage == 2 && spec.train.grad_accum > 1 ? touching * e : 0);
  b.host.pinned = true;
  return b;
}

}  // namespace

TEST(Zero12Offload, BytesByLocationEqualTheClosedFormOnEveryRank) {
  for (int stage : {1, 2})
    for (int w : {2, 3})
      for (const std::string precision : {"fp32", "bf16"})
        for (int64_t accum : {int64_t(1), int64_t(2)}) {
          const auto spec = test_support::zero12_spec(stage, precision, accum, offload());
          const auto ranks = run(stage, spec, w);
          for (int r = 0; r < w; ++r) {
            SCOPED_TRACE("zero" + std::to_string(stage) + " " + precision + " W=" + std::to_string(w) + " accum " +
                         std::to_string(accum) + " rank " + std::to_string(r));
            const auto expected = closed_form(stage, spec, w, r);
            EXPECT_EQ(ranks[size_t(r)].bytes, expected);
            EXPECT_EQ(backends::backend("zero" + std::to_string(stage)).training.expected_bytes(spec, w, r), expected);
          }
        }
}

// Each step's copies: the closed form (zero12_offload_form.cpp), and for stage 1 (one fp32 copy
// of each parameter's part in the partition, one copy of the partition back) the same written out
// here: P - (the partition's part of the alignment pad) fp32 elements out, P model-dtype in.
TEST(Zero12Offload, TrafficPerStepEqualsTheClosedForm) {
  for (int stage : {1, 2})
    for (int w : {2, 3})
      for (int64_t accum : {int64_t(1), int64_t(3)}) {
        const auto spec = test_support::zero12_spec(stage, "bf16", accum, offload());
        const auto ranks = run(stage, spec, w);
        for (int r = 0; r < w; ++r) {
          SCOPED_TRACE("zero" + std::to_string(stage) + " W=" + std::to_string(w) + " accum " + std::to_string(accum) +
                       " rank " + std::to_string(r));
          const auto expected = backends::zero12::expected_step_traffic(spec, w, r, stage);
          for (const auto& t : ranks[size_t(r)].traffic) {
            EXPECT_EQ(t.d2h_bytes, expected.d2h_bytes);
            EXPECT_EQ(t.d2h_copies, expected.d2h_copies);
            EXPECT_EQ(t.h2d_bytes, expected.h2d_bytes);
            EXPECT_EQ(t.h2d_copies, expected.h2d_copies);
          }
          if (stage == 1) {
            int64_t n = 0;
            for (auto x : test_support::zero12_flat_numels(spec.model)) n += x;
            const int64_t padded = (n + 2 * w - 1) / (2 * w) * (2 * w), P = padded / w;
            const int64_t pad_here = std::max<int64_t>(0, (r + 1) * P - std::max<int64_t>(n, r * P));
            EXPECT_EQ(expected.d2h_bytes, (P - pad_here) * 4);
            EXPECT_EQ(expected.h2d_bytes, P * 2);
            EXPECT_EQ(expected.h2d_copies, 1);
          }
        }
      }
}

// With torch.optim.AdamW on the host and no clipping, offload only moves bytes (the norm is
// summed differently — per-parameter fp64 norms, squared in Python floats, an fp32 all-reduce —
// so it agrees to rounding, not bitwise): the losses are bitwise those of the run without
// offload. DeepSpeedCPUAdam's fused order (zero3_cpu_adam.hpp) changes the update by rounding:
// the first loss is the same bitwise, the rest within 1e-5 relative; with clipping on, both.
TEST(Zero12Offload, LossesEqualTheRunWithoutOffload) {
  for (int stage : {1, 2}) {
    auto base_spec = test_support::zero12_spec(stage, "fp32", 2, Zero12Options{});
    base_spec.train.grad_clip = 0;
    auto torch_spec = test_support::zero12_spec(stage, "fp32", 2, offload(backends::zero12::kTorchAdamW));
    torch_spec.train.grad_clip = 0;
    const auto base = run(stage, base_spec, 2);
    const auto torch_adam = run(stage, torch_spec, 2);
    SCOPED_TRACE("zero" + std::to_string(stage));
    EXPECT_EQ(torch_adam[0].losses, base[0].losses);
    for (size_t i = 0; i < base[0].norms.size(); ++i)
      EXPECT_NEAR(torch_adam[0].norms[i], base[0].norms[i], 1e-6 * base[0].norms[i]) << i;
    for (bool clip : {false, true}) {
      auto b = base_spec, c = test_support::zero12_spec(stage, "fp32", 2, offload());
      if (clip) b.train.grad_clip = c.train.grad_clip = 0.05;
      else c.train.grad_clip = 0;
      const auto base2 = run(stage, b, 2);
      const auto cpu_adam = run(stage, c, 2);
      ASSERT_EQ(cpu_adam[0].losses.size(), base2[0].losses.size());
      EXPECT_EQ(cpu_adam[0].losses[0], base2[0].losses[0]);
      bool differs = false;
      for (size_t i = 0; i < base2[0].losses.size(); ++i) {
        EXPECT_NEAR(cpu_adam[0].losses[i], base2[0].losses[i], 1e-5 * std::abs(base2[0].losses[i])) << i;
        differs = differs || cpu_adam[0].losses[i] != base2[0].losses[i];
      }
      EXPECT_TRUE(differs) << "DeepSpeedCPUAdam's order is not torch's: some later loss should differ in its last bits";
      EXPECT_EQ(cpu_adam[0].options["host_optimizer"], backends::zero12::kCpuAdam);
    }
  }
}

// bf16: the same data path with bf16 gradients accumulated on the host (stage 2) and the overflow
// flag from local_overflow: the losses stay within bf16 rounding of the run without offload.
TEST(Zero12Offload, Bf16TrainsCloseToTheRunWithoutOffload) {
  for (int stage : {1, 2}) {
    const auto base = run(stage, test_support::zero12_spec(stage, "bf16", 2, Zero12Options{}), 2);
    const auto off = run(stage, test_support::zero12_spec(stage, "bf16", 2, offload(backends::zero12::kTorchAdamW)), 2);
    EXPECT_EQ(off[0].losses[0], base[0].losses[0]);
    for (size_t i = 0; i < base[0].losses.size(); ++i)
      EXPECT_NEAR(off[0].losses[i], base[0].losses[i], 1e-2 * std::abs(base[0].losses[i])) << i;
    EXPECT_EQ(off[0].options["check_grad_overflow"], true);
  }
}

// The gates above can fail: a skipped copy of the updated partition back to the device leaves
// the weights as they were (the loss parity and the traffic gates fail), and a closed form for
// the wrong configuration does not match.
TEST(Zero12Offload, PlantedFaultsAreCaught) {
  auto spec = test_support::zero12_spec(2, "fp32", 2, offload(backends::zero12::kTorchAdamW));
  spec.train.grad_clip = 0;
  auto base_spec = test_support::zero12_spec(2, "fp32", 2, Zero12Options{});
  base_spec.train.grad_clip = 0;
  const auto base = run(2, base_spec, 2);
  backends::zero12::plant_fault("skip_offload_copy_back");
  std::vector<RankRun> faulty;
  try {
    faulty = run(2, spec, 2);
  } catch (...) {
    backends::zero12::plant_fault("");
    throw;
  }
  backends::zero12::plant_fault("");
  EXPECT_NE(faulty[0].losses, base[0].losses);
  EXPECT_EQ(faulty[0].losses[0], base[0].losses[0]);
  const auto expected = backends::zero12::expected_step_traffic(spec, 2, 0, 2);
  EXPECT_NE(faulty[0].traffic.back().h2d_copies, expected.h2d_copies);
  // A closed form that forgets stage 2's host accumulation buffers (grad_accum 1) is wrong for
  // an accumulating run, in bytes and in copies.
  auto one_micro = spec;
  one_micro.train.grad_accum = 1;
  const auto ok = run(2, spec, 2);
  EXPECT_FALSE(ok[0].bytes == backends::backend("zero2").training.expected_bytes(one_micro, 2, 0));
  EXPECT_NE(ok[0].traffic.back().d2h_bytes, backends::zero12::expected_step_traffic(one_micro, 2, 0, 2).d2h_bytes);
  // And one that takes stage 2's path for stage 1.
  EXPECT_NE(backends::zero12::expected_step_traffic(test_support::zero12_spec(1, "fp32", 2, offload()), 2, 0, 1).d2h_copies,
            expected.d2h_copies);
}

// The pre-flight estimate with offload (expected_bytes().host resident, zero12_estimate.cpp's
// offload terms) against the measured peak of every rank, within 5% as for the other backends (a
// CPU run: the host's memory is the device's, so the peak counts both); without its host terms
// the same gate fails.
TEST(Zero12Offload, EveryRanksPeakIsWithinFivePercentOfItsEstimate) {
  const auto out = test_support::temp_path("zero12_offload_estimate.json");
  for (const std::string args : {"--backend zero2 --precision bf16 --grad-accum 2",
                                 "--backend zero1 --precision fp32 --zero-reduce-bucket-size 100000 --grad-accum 2",
                                 "--backend zero2 --precision fp32 --zero-reduce-bucket-size 30000 --zero-overlap-comm true"}) {
    const auto r = test_support::run_zerobench("run " + args + " --zero-offload-optimizer cpu --nproc 2 --model tiny "
                                               "--steps 3 --warmup 1 --quiet --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(out);
    const auto report = nlohmann::json::parse(in);
    for (const auto& rk : report["ranks"]) {
      const auto& m = rk["memory"];
      // The program-order peak: collectives' buffers held from issue to wait, as the estimate holds them.
      const double peak = m["peak_program_bytes"].get<double>(), est = m["estimated_peak_bytes"].get<double>();
      EXPECT_GE(peak / est, 0.95) << args;
      EXPECT_LE(peak / est, 1.05) << args;
      EXPECT_TRUE(m["estimate"]["peak_includes_host"].get<bool>());
      if (args.find("zero1") != std::string::npos) {  // the planted fault: the host's resident bytes left out
        const double host = m["estimate"]["host_resident_bytes"].get<double>();
        EXPECT_GT(host, 0);
        EXPECT_GT(peak / (est - host), 1.05) << "without its host terms the estimate must fail the gate";
      }
    }
  }
  std::remove(out.c_str());
}

// On the streams DeepSpeed uses: the gradient copies run inside reduce_ipg_grads' stream context
// (the reduction stream with overlap_comm, else the current — compute — stream), each after the
// bucket's all-reduce issued from that stream; the updated partition goes to the device on the
// compute stream before the all-gather that reads it.
TEST(Zero12Offload, StreamLogOrdersTheCopies) {
  using Kind = backends::common::StreamLogEntry::Kind;
  for (bool overlap : {false, true}) {
    Zero12Options o = offload();
    o.overlap_comm = overlap;
    auto spec = test_support::zero12_spec(2, "bf16", 2, o);
    spec.train.steps = 1;
    spec.train.warmup = 0;
    std::unique_ptr<backends::Engine> kept;
    std::mutex m;
    test_support::run_ranks(2, [&](runtime::World& world) {
      auto engine = backends::create_engine("zero2", spec, world);
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
    const std::string grad_stream = overlap ? "reduction" : "compute";
    int to_host = 0, to_device = 0;
    for (const auto& e : s.log()) {
      if (e.kind != Kind::kOp) continue;
      if (e.label.rfind("offload: grad to host", 0) == 0 || e.label.rfind("offload: fp32 grad to host", 0) == 0 ||
          e.label.rfind("offload: accumulated grad to device", 0) == 0) {
        ++to_host;
        EXPECT_EQ(e.stream, grad_stream) << e.label << s.dump();
        int64_t ar = -1;  // the last bucket all-reduce issued from that stream before it
        for (const auto& c : s.log())
          if (c.seq < e.seq && c.kind == Kind::kOp && c.label.rfind("all_reduce ipg", 0) == 0) ar = c.seq;
        ASSERT_GE(ar, 0) << s.dump();
        EXPECT_TRUE(s.happens_before(ar, e.seq));
      }
      if (e.label == "offload: updated partition to device") {
        ++to_device;
        EXPECT_EQ(e.stream, "compute");
        const auto ag = s.find(Kind::kOp, "compute", "all_gather partitions");
        ASSERT_GE(ag, 0) << s.dump();
        EXPECT_TRUE(s.happens_before(e.seq, ag));
      }
    }
    EXPECT_GT(to_host, 0) << s.dump();
    EXPECT_EQ(to_device, 1);
  }
}

TEST(Zero12Offload, OffloadChoiceIsListed) {
  for (const char* b : {"zero1", "zero2"}) {
    const auto& info = backends::backend(b);
    ASSERT_EQ(info.training.offload_choices.size(), 1u) << b;
    EXPECT_EQ(info.training.offload_choices[0].options["offload_optimizer"]["device"], "cpu");
  }
}

namespace {
config::DeepSpeedConfig read_ds(nlohmann::json j, int stage) {
  j["train_micro_batch_size_per_gpu"] = 4;
  config::TrainerArgs args;
  args.hidden = 64;
  return config::read_deepspeed_json(j, args, config::AutoFill::kHfTrainer,
                                     [stage](const config::DeepSpeedStage& s) { backends::zero12::accept_stage(s, stage); });
}
Zero12Options options_of(const nlohmann::json& j, int stage = 2) {
  return backends::zero12::options_from_deepspeed(read_ds(j, stage), stage);
}
std::string refusal(const nlohmann::json& j, int stage = 2) {
  try {
    options_of(j, stage);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Zero12OffloadConfig, DeepSpeedKeysSelectOffloadAndTheHostOptimizer) {
  auto o = options_of({{"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", false}}}}}});
  EXPECT_TRUE(o.offload());
  EXPECT_FALSE(o.offload_pin_memory);
  EXPECT_EQ(o.host_optimizer, backends::zero12::kCpuAdam);  // accelerate's DeepSpeedCPUAdam for the trainer's AdamW
  o = options_of({{"zero_force_ds_cpu_optimizer", false},
                  {"zero_optimization", {{"stage", 1}, {"offload_optimizer", {{"device", "cpu"}}}}}},
                 1);
  EXPECT_EQ(o.host_optimizer, backends::zero12::kTorchAdamW);
  o = options_of({{"optimizer", {{"type", "AdamW"}, {"params", {{"torch_adam", true}}}}},
                  {"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}}}});
  EXPECT_EQ(o.host_optimizer, backends::zero12::kTorchAdamW);
  // contiguous_gradients false: DeepSpeedZeroOptimizer forces it with CPU offload (refused without).
  o = options_of({{"zero_optimization", {{"stage", 2}, {"contiguous_gradients", false}, {"offload_optimizer", {{"device", "cpu"}}}}}});
  EXPECT_TRUE(o.contiguous_gradients);
  // The deprecated switch, as config.py's new_param_fn maps it.
  EXPECT_TRUE(options_of({{"zero_optimization", {{"stage", 2}, {"cpu_offload", true}}}}).offload());
  // offload_param is stage 3's: ignored below it, as DeepSpeed does.
  EXPECT_FALSE(options_of({{"zero_optimization", {{"stage", 2}, {"offload_param", {{"device", "cpu"}}}}}}).offload());
}

TEST(Zero12OffloadConfig, RefusalsNameTheKey) {
  EXPECT_NE(refusal({{"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "nvme"}}}}}})
                .find("zero_optimization.offload_optimizer.device nvme"),
            std::string::npos);
  EXPECT_NE(refusal({{"zero_optimization", {{"stage", 1}, {"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.5}}}}}}, 1)
                .find("ratio"),
            std::string::npos);
  auto refused = [](nlohmann::json j, const std::string& part) {
    try {
      backends::zero12::zero12_options_from_json(j, 2);
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused({{"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.5}}}}, "offload_optimizer.ratio 0.5");
  refused({{"offload_optimizer", {{"device", "cpu"}, {"bogus", 1}}}}, "offload_optimizer.bogus");
  refused({{"offload_optimizer", {{"device", "disk"}}}}, "'disk'");
  refused({{"offload_optimizer", {{"device", "cpu"}}}, {"host_optimizer", "SGD"}}, "host_optimizer 'SGD'");
}

// End to end through the binary: the LLaMA-Factory ZeRO-2 offload file runs (stage 2, offload cpu
// with pin_memory, DeepSpeedCPUAdam in the resolved options, the host bytes and copies in the
// report); a stage-2 file with offload_param lists it under config.ignored; the flags select
// offload for zero1 and refuse nvme with one line (exit 2).
TEST(Zero12OffloadBinary, ConfigFilesAndFlagsRun) {
  const auto out = test_support::temp_path("zero12_offload_run.json");
  auto read = [&] {
    std::ifstream in(out);
    return nlohmann::json::parse(in);
  };
  auto r = test_support::run_zerobench("run --config " + std::string(zb::bench::source_dir()) +
                                       "/tests/configs/real/llamafactory_ds_z2_offload_config.json --model tiny --steps 2 "
                                       "--warmup 1 --zero-reduce-bucket-size 100000 --quiet --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto doc = read();
  const auto& opts = doc["config"]["backend"]["options"];
  EXPECT_EQ(doc["config"]["backend"]["name"], "zero2") << doc["config"].dump();
  EXPECT_EQ(opts["offload"]["optimizer"], "cpu");
  EXPECT_EQ(opts["offload_optimizer"]["pin_memory"], true);
  EXPECT_EQ(opts["host_optimizer"], backends::zero12::kCpuAdam);
  EXPECT_GT(doc["ranks"][0]["memory"]["model_states_bytes"]["host"]["master_params"].get<int64_t>(), 0);

  const auto file = test_support::temp_path("zero12_offload_param.json");
  {
    std::ofstream f(file);
    f << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})";
  }
  r = test_support::run_zerobench("run --config " + file + " --model tiny --steps 2 --warmup 1 --quiet --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  doc = read();
  bool ignored = false;
  for (const auto& k : doc["config"]["ignored"]) ignored = ignored || k["key"] == "zero_optimization.offload_param.device";
  for (const auto& k : doc["config"]["applied"])
    EXPECT_NE(k["key"].get<std::string>().rfind("zero_optimization.offload_param", 0), 0u) << k.dump();
  EXPECT_TRUE(ignored) << doc["config"].dump();
  EXPECT_EQ(doc["config"]["backend"]["options"]["offload"]["optimizer"], "none");

  r = test_support::run_zerobench("run --backend zero1 --precision bf16 --zero-offload-optimizer cpu "
                                  "--zero-offload-pin-memory false --model tiny --steps 2 --warmup 1 --quiet --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  doc = read();
  EXPECT_EQ(doc["config"]["backend"]["options"]["offload"]["optimizer"], "cpu");
  EXPECT_EQ(doc["ranks"][0]["memory"]["model_states_bytes"]["host"]["pinned"], false);

  r = test_support::run_zerobench("run --backend zero2 --zero-offload-optimizer nvme --model tiny --steps 2 --out " + out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("offload_optimizer.device nvme"), std::string::npos) << r.output;
  std::remove(out.c_str());
  std::remove(file.c_str());
}
