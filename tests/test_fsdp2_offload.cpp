// FSDP2-mode's CPUOffloadPolicy(pin_memory) (backends/fsdp2/fsdp2_offload.hpp, torch 2.11
// _fully_shard): training equals the same run without offload bit for bit (it only moves bytes),
// the bytes each rank keeps by location equal the closed form, every step's host<->device
// traffic equals the closed form from upstream's copies, the dependency log orders each
// host->device copy before its all-gather and each gradient's device->host copy after its
// reduction (a planted fault is caught), and the options come from flags and accelerate configs.
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>

#include "backends/backend_info.hpp"
#include "backends/fsdp2/fsdp2_engine.hpp"
#include "backends/fsdp2/fsdp2_offload.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "backends/memory_estimate.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::common::OffloadTraffic;
using backends::common::StreamLogEntry;
using backends::common::Streams;
using backends::fsdp2::Fsdp2Options;
using Kind = StreamLogEntry::Kind;

namespace {
Fsdp2Options offload(bool pin = true) {
  Fsdp2Options o;
  o.offload_policy = "cpu";
  o.offload_pin_memory = pin;
  return o;
}

backends::EngineSpec spec_with(const std::string& precision, int64_t accum, const Fsdp2Options& o) {
  auto s = test_support::small_spec(accum);
  s.precision = precision;
  s.options = backends::fsdp2::to_json(o);
  return s;
}

// The same run with `o` as given and with offload: losses (rank 0, every step) and the full
// parameters after training equal to the last bit.
void expect_bitwise_equal_with_and_without_offload(const std::string& precision, int64_t accum, Fsdp2Options o,
                                                   int w) {
  o.offload_policy = "none";
  const auto plain = test_support::train_backend("fsdp2", spec_with(precision, accum, o), w);
  o.offload_policy = "cpu";
  const auto off = test_support::train_backend("fsdp2", spec_with(precision, accum, o), w);
  ASSERT_EQ(plain.losses.size(), off.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_EQ(plain.losses[i], off.losses[i]) << "step " << i;
  ASSERT_EQ(plain.params.size(), off.params.size());
  for (size_t u = 0; u < plain.params.size(); ++u) EXPECT_TRUE(at::equal(plain.params[u], off.params[u])) << "unit " << u;
}

bool same(const OffloadTraffic& a, const OffloadTraffic& b) {
  return a.h2d_bytes == b.h2d_bytes && a.d2h_bytes == b.d2h_bytes && a.h2d_copies == b.h2d_copies &&
         a.d2h_copies == b.d2h_copies;
}
std::string text(const OffloadTraffic& t) {
  return "h2d " + std::to_string(t.h2d_bytes) + " B / " + std::to_string(t.h2d_copies) + " copies, d2h " +
         std::to_string(t.d2h_bytes) + " B / " + std::to_string(t.d2h_copies) + " copies";
}

// Every rank: model-state bytes (by location) == expected_bytes and every step's traffic ==
// offload_traffic_per_step.
void expect_closed_forms(const backends::EngineSpec& spec, int w) {
  test_support::run_ranks(w, [&](runtime::World& world) {
    auto [engine, r] = test_support::train_on(world, "fsdp2", spec);
    const backends::Topology topo(w, w);
    const auto expected = backends::backend("fsdp2").training.expected_bytes(spec, topo, world.rank);
    EXPECT_TRUE(r.model_state_bytes == expected)
        << "rank " << world.rank << ": " << backends::to_json(r.model_state_bytes).dump() << " vs closed form "
        << backends::to_json(expected).dump();
    const auto per_step = backends::fsdp2::offload_traffic_per_step(spec, topo, world.rank);
    EXPECT_GT(per_step.h2d_bytes, 0);
    for (const auto& s : r.steps)
      EXPECT_TRUE(same(s.offload, per_step)) << "rank " << world.rank << " step " << s.step << ": " << text(s.offload)
                                             << " vs closed form " << text(per_step);
  });
}

// One step on W=2 with rank 0's dependency log; the engine is kept for reading the log.
std::unique_ptr<backends::Engine> logged_step(const backends::EngineSpec& spec, const std::string& fault = "") {
  std::unique_ptr<backends::Engine> kept;
  std::mutex m;
  test_support::run_ranks(2, [&](runtime::World& world) {
    auto engine = backends::create_engine("fsdp2", spec, world);
    backends::fsdp2::plant_offload_fault(*engine, fault);
    if (world.rank == 0) engine->comm().streams().set_logging(true);
    auto data = models::make_data_source("random", spec.model.vocab, 1);
    backends::common::Comm side(world.side_channel());
    bench::run_training(*engine, spec, *data, side);
    if (world.rank == 0) {
      std::lock_guard<std::mutex> lock(m);
      kept = std::move(engine);
    }
  });
  return kept;
}

// What the log must show under offload, as violations (empty: all hold): each host->device copy
// runs on the all-gather copy-in stream and is ordered before its group's all-gather; each
// gradient's device->host copy runs on the reduce-scatter stream after its reduce-scatter and
// before the optimizer's gradient-norm all-reduce; with pinned memory the host synchronises on
// the copy's event (grad_offload_event) before the optimizer.
std::vector<std::string> offload_order_violations(const Streams& s, bool pinned) {
  std::vector<std::string> bad;
  const auto& log = s.log();
  // The last entry before `seq` / the first after it matching (kind, label prefix), or -1.
  auto before = [&](int64_t seq, Kind k, const std::string& label) {
    int64_t found = -1;
    for (const auto& f : log)
      if (f.seq < seq && f.kind == k && f.label.rfind(label, 0) == 0) found = f.seq;
    return found;
  };
  auto after = [&](int64_t seq, Kind k, const std::string& label) {
    for (const auto& f : log)
      if (f.seq > seq && f.kind == k && f.label.rfind(label, 0) == 0) return f.seq;
    return int64_t(-1);
  };
  int h2d = 0, d2h = 0;
  for (const auto& e : log) {
    if (e.kind != Kind::kOp) continue;
    if (e.label.rfind("offload h2d ", 0) == 0) {
      ++h2d;
      const std::string group = e.label.substr(12);
      if (e.stream != "all_gather_copy_in") bad.push_back(e.label + " on " + e.stream);
      const auto ag = after(e.seq, Kind::kCollective, "all_gather:" + group);  // its all-gather
      if (ag < 0 || !s.happens_before(e.seq, ag)) bad.push_back(e.label + " not ordered before its all-gather");
    }
    if (e.label.rfind("grad offload d2h ", 0) == 0) {
      ++d2h;
      const std::string group = e.label.substr(17);
      if (e.stream != "reduce_scatter") bad.push_back(e.label + " on " + e.stream);
      const auto rs = before(e.seq, Kind::kCollective, "reduce_scatter:" + group);
      if (rs < 0 || !s.happens_before(rs, e.seq)) bad.push_back(e.label + " not after its reduce-scatter");
      const auto norm = after(e.seq, Kind::kCollective, "all_reduce:grad_norm");  // this step's optimizer
      if (norm < 0 || !s.happens_before(e.seq, norm)) bad.push_back(e.label + " not before the optimizer");
      const auto ev = after(e.seq, Kind::kRecordEvent, "grad_offload " + group);
      int64_t synced = -1;
      for (const auto& f : log)
        if (f.kind == Kind::kHostSync && f.target == ev) synced = f.seq;
      if (ev < 0 || synced < 0) bad.push_back(e.label + ": the host never synchronises on its copy");
      else if (pinned && norm >= 0 && synced > norm) bad.push_back(e.label + ": host sync after the optimizer");
    }
  }
  if (h2d == 0) bad.push_back("no host->device copy logged");
  if (d2h == 0) bad.push_back("no device->host copy logged");
  return bad;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += x + "\n";
  return out;
}
}  // namespace

// ---------------------------------------------------------------- the same numbers

TEST(Fsdp2Offload, TrainingIsBitwiseTheSameWithAndWithoutOffload) {
  {
    SCOPED_TRACE("fp32 W=2 accum 2 (no_sync)");
    expect_bitwise_equal_with_and_without_offload("fp32", 2, offload(), 2);
  }
  {
    SCOPED_TRACE("mixed W=2 (param_dtype bf16: host shards cast after the copy)");
    expect_bitwise_equal_with_and_without_offload("mixed", 1, offload(false), 2);
  }
  {
    SCOPED_TRACE("mixed W=2 accum 2 sync_each_batch (host gradients accumulated)");
    auto o = offload();
    o.sync_each_batch = true;
    expect_bitwise_equal_with_and_without_offload("mixed", 2, o, 2);
  }
  {
    SCOPED_TRACE("low W=1 (world-size-1 copy path)");
    expect_bitwise_equal_with_and_without_offload("low", 1, offload(), 1);
  }
  {
    SCOPED_TRACE("HSDP 2 x 2 fp32 W=4 (the copy after the replica all-reduce)");
    auto o = offload();
    o.dp_replicate_size = 2;
    expect_bitwise_equal_with_and_without_offload("fp32", 1, o, 4);
  }
}

TEST(Fsdp2Offload, EagerStreamsTakeTheCudaControlFlowAndStayBitwise) {
  ::setenv("ZEROBENCH_STREAMS", "eager", 1);
  expect_bitwise_equal_with_and_without_offload("mixed", 2, offload(), 2);
  ::unsetenv("ZEROBENCH_STREAMS");
}

TEST(Fsdp2Offload, OffloadMatchesTheSingleProcessReference) {
  test_support::expect_matches_reference("fsdp2", spec_with("fp32", 2, offload()), 3);
}

// ---------------------------------------------------------------- bytes and traffic

TEST(Fsdp2Offload, BytesByLocationAndTrafficPerStepEqualTheClosedFormsOnEveryRank) {
  {
    SCOPED_TRACE("mixed W=3, vocab 251 (ranks own different rows), accum 2");
    auto spec = spec_with("mixed", 2, offload());
    spec.model.vocab = 251;
    spec.train.steps = 2;
    expect_closed_forms(spec, 3);
  }
  {
    SCOPED_TRACE("accelerate grouping (embedding re-gathered, tail kept), sync_each_batch, pin false, W=2");
    auto o = offload(false);
    o.grouping = "accelerate";
    o.sync_each_batch = true;
    auto spec = spec_with("fp32", 2, o);
    spec.train.steps = 2;
    expect_closed_forms(spec, 2);
  }
  {
    SCOPED_TRACE("reshard_after_forward=2 at W=4 (backward gathers from device post-forward shards)");
    auto o = offload();
    o.reshard_after_forward = 2;
    auto spec = spec_with("fp32", 1, o);
    spec.train.steps = 2;
    expect_closed_forms(spec, 4);
  }
}

TEST(Fsdp2Offload, ClosedFormHoldsNothingOnTheDeviceAndUnpaddedHostGradients) {
  auto spec = spec_with("fp32", 1, offload());
  spec.model.vocab = 251;
  const backends::Topology topo(3, 3);
  const auto& info = backends::backend("fsdp2");
  auto plain_spec = spec;
  plain_spec.options = backends::fsdp2::to_json(Fsdp2Options{});
  for (int r = 0; r < 3; ++r) {
    const auto b = info.training.expected_bytes(spec, topo, r),
               plain = info.training.expected_bytes(plain_spec, topo, r);
    EXPECT_EQ(b.total(), 0);
    EXPECT_EQ(b.host.params, plain.params);        // padded shards
    EXPECT_EQ(b.host.optimizer, plain.optimizer);  // owned rows
    EXPECT_EQ(2 * b.host.grads, plain.optimizer);  // owned rows, not the padded shard
    EXPECT_TRUE(b.host.pinned);
  }
  EXPECT_LT(info.training.expected_bytes(spec, topo, 2).host.grads,
            info.training.expected_bytes(plain_spec, topo, 2).grads);
  ASSERT_EQ(info.training.offload_choices.size(), 1u);
  EXPECT_EQ(info.training.offload_choices[0].options["offload_policy"], "cpu");
}

// ---------------------------------------------------------------- streams

TEST(Fsdp2Offload, CopiesAreOrderedAroundTheirCollectivesAndAPlantedFaultIsCaught) {
  auto spec = spec_with("mixed", 1, offload());
  spec.train.steps = 1;
  spec.train.warmup = 0;
  {
    auto engine = logged_step(spec);
    const auto bad = offload_order_violations(engine->comm().streams(), true);
    EXPECT_TRUE(bad.empty()) << joined(bad) << engine->comm().streams().dump();
  }
  {
    SCOPED_TRACE("pin_memory=False: each copy blocks the host at once");
    auto plain = spec;
    plain.options = backends::fsdp2::to_json(offload(false));
    auto engine = logged_step(plain);
    const auto bad = offload_order_violations(engine->comm().streams(), false);
    EXPECT_TRUE(bad.empty()) << joined(bad);
  }
  {
    SCOPED_TRACE("planted: host->device copies on the compute stream");
    auto engine = logged_step(spec, "h2d_on_compute");
    const auto bad = offload_order_violations(engine->comm().streams(), true);
    EXPECT_FALSE(bad.empty()) << "the planted fault went unnoticed";
  }
}

// ---------------------------------------------------------------- options and configs

TEST(Fsdp2Offload, FlagsAndAccelerateConfigsSelectCpuOffloadPolicy) {
  const auto out = test_support::temp_path("fsdp2_offload_run.json");
  auto r = test_support::run_zerobench(
      "run --backend fsdp2 --nproc 2 --model tiny --fsdp2-offload-policy cpu --fsdp2-offload-pin-memory false "
      "--steps 2 --warmup 1 --seq-len 16 --micro-batch 1 --quiet --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = reports::read_report(out);
  const auto& opts = report["config"]["backend"]["options"];
  EXPECT_EQ(opts["fully_shard_offload_policy"], "CPUOffloadPolicy(pin_memory=False)");
  const auto& m = report["ranks"][0]["memory"];
  EXPECT_EQ(m["model_states_bytes"], m["model_states_expected_bytes"]);
  EXPECT_EQ(m["model_states_bytes"]["params"], 0);
  EXPECT_GT(m["model_states_bytes"]["host"]["params"].get<int64_t>(), 0);
  EXPECT_EQ(m["model_states_bytes"]["host"]["pinned"], false);

  const auto path = test_support::temp_path("fsdp2_offload.yaml");
  std::ofstream(path) << "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 2\nfsdp_config:\n"
                         "  fsdp_version: 2\n  fsdp_offload_params: true\n  fsdp_auto_wrap_policy: "
                         "TRANSFORMER_BASED_WRAP\n  fsdp_sync_module_states: true\n";
  const auto c = backends::fsdp2::read_accelerate_fsdp2_config(path);
  EXPECT_EQ(c.fsdp2.offload_policy, "cpu");
  EXPECT_TRUE(c.fsdp2.offload_pin_memory);  // accelerate: CPUOffloadPolicy() (pin_memory=True)
  r = test_support::run_zerobench("run --config " + path +
                                  " --steps 1 --warmup 0 --seq-len 16 --micro-batch 1 --quiet --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  report = reports::read_report(out);
  EXPECT_EQ(report["config"]["backend"]["options"]["fully_shard_offload_policy"], "CPUOffloadPolicy(pin_memory=True)");
  EXPECT_EQ(report["ranks"][1]["memory"]["model_states_bytes"]["host"]["pinned"], true);
  EXPECT_GT(report["ranks"][1]["offload"]["total"]["h2d_bytes"].get<int64_t>(), 0) << report["ranks"][1].dump();

  r = test_support::run_zerobench("run --backend fsdp2 --fsdp2-offload-policy disk --steps 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--fsdp2-offload-policy"), std::string::npos) << r.output;
  EXPECT_THROW(backends::fsdp2::fsdp2_options_from_json({{"offload_policy", "nvme"}}), UsageError);
  std::remove(path.c_str());
  std::remove(out.c_str());
}
