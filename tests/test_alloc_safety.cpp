// The CUDA control flow checked on CPU: the stream layer's eager mode (enqueued work runs at once,
// as on CUDA) against the deferred one, and the caching allocator's safety rule checked over the
// dependency log (backends/common/alloc_safety.hpp) for one step of every engine and precision,
// on real Gloo ranks and in emulation — and failing, naming the tensor and the streams, when an
// early free is planted.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>

#include "backends/backend_info.hpp"
#include "backends/common/alloc_safety.hpp"
#include "backends/common/comm.hpp"
#include "backends/common/storage.hpp"
#include "backends/common/streams.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "runtime/device.hpp"
#include "runtime/errors.hpp"
#include "tests/gpu_required.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::common::AllocSafetyViolation;
using backends::common::StreamLogEntry;
using backends::common::StreamMode;
using backends::common::Streams;
using Kind = StreamLogEntry::Kind;

namespace {

struct Case {
  std::string name, backend, precision;
  nlohmann::json options;
};

// Every engine and precision, FSDP-mode's strategies included (HYBRID_SHARD needs W=4).
std::vector<Case> all_cases() {
  using backends::fsdp::FsdpOptions;
  using backends::fsdp::ShardingStrategy;
  auto fsdp = [](ShardingStrategy st) {
    FsdpOptions o;
    o.sharding_strategy = st;
    return backends::fsdp::to_json(o);
  };
  backends::zero3::Zero3Options z;
  z.stage3_param_persistence_threshold = 0;  // every weight released and fetched again
  z.reduce_bucket_size = 60000;               // several buckets per backward
  const auto zero3 = backends::zero3::to_json(z);
  const auto fsdp2 = backends::fsdp2::to_json(backends::fsdp2::Fsdp2Options{});
  return {{"ddp_fp32", "ddp", "fp32", nullptr},
          {"fsdp_fp32", "fsdp", "fp32", fsdp(ShardingStrategy::kFullShard)},
          {"fsdp_mixed", "fsdp", "mixed", fsdp(ShardingStrategy::kFullShard)},
          {"fsdp_low", "fsdp", "low", fsdp(ShardingStrategy::kFullShard)},
          {"fsdp_mixed_shard_grad_op", "fsdp", "mixed", fsdp(ShardingStrategy::kShardGradOp)},
          {"fsdp_mixed_no_shard", "fsdp", "mixed", fsdp(ShardingStrategy::kNoShard)},
          {"fsdp2_fp32", "fsdp2", "fp32", fsdp2},
          {"fsdp2_mixed", "fsdp2", "mixed", fsdp2},
          {"fsdp2_low", "fsdp2", "low", fsdp2},
          {"zero3_fp32", "zero3", "fp32", zero3},
          {"zero3_bf16", "zero3", "bf16", zero3}};
}

backends::EngineSpec spec_for(const Case& c, int64_t steps = 1) {
  auto spec = test_support::small_spec(1);
  spec.precision = c.precision;
  spec.train.steps = steps;
  spec.train.warmup = 0;
  if (!c.options.is_null()) spec.options = c.options;
  return spec;
}

struct ModeRun {
  std::vector<double> losses;
  std::vector<at::Tensor> params;
  std::vector<std::string> schedule;  // the log without tensor entries, targets renumbered
  std::vector<AllocSafetyViolation> violations;
  backends::common::AllocSafetyStats checked;
  std::vector<std::string> unordered_waits;  // collective waits whose stream is not after the collective
  std::string dump;
};

// Waits on a collective that leave their stream unordered after it: none under the NCCL model
// (the wait orders); in emulation (a no-op wait) those where nothing else orders the stream.
std::vector<std::string> unordered_waits(const Streams& s) {
  std::vector<std::string> out;
  for (const auto& e : s.log())
    if (e.kind == Kind::kWaitCollective && !s.happens_before(e.target, e.seq))
      out.push_back("#" + std::to_string(e.seq) + " [" + e.stream + "] " + e.label);
  return out;
}

// The log's schedule: every entry but uses, allocations and frees (their host timing is what
// the modes change), with targets as indices into this list.
std::vector<std::string> schedule_of(const Streams& s) {
  std::vector<std::string> out;
  std::map<int64_t, size_t> index;
  for (const auto& e : s.log()) {
    if (e.kind == Kind::kUse || e.kind == Kind::kAlloc || e.kind == Kind::kFree) continue;
    index[e.seq] = out.size();
    const std::string target = e.target < 0 ? "" : " ->" + std::to_string(index.count(e.target) ? index[e.target] : -1);
    out.push_back(std::string(backends::common::to_string(e.kind)) + " [" + e.stream + "] " + e.label + " <" +
                  e.other + ">" + target);
  }
  return out;
}

// One run on W thread-ranks (or one emulated rank), every rank logging and checked; rank 0's
// results. `plant`: an early free planted on rank 0 (Streams::plant_early_free).
ModeRun run_mode(const Case& c, const backends::EngineSpec& spec, int w, StreamMode mode, const std::string& plant = "",
                 bool emulated = false, at::Device device = at::kCPU) {
  ModeRun out;
  std::mutex m;
  auto body = [&](runtime::World& world) {
    auto engine = backends::create_engine(c.backend, spec, world);
    auto& s = engine->comm().streams();
    s.set_mode(mode);
    s.set_logging(true);
    if (world.rank == 0) s.plant_early_free(plant);
    auto data = models::make_data_source(spec.train.data, spec.model.vocab, spec.train.seed);
    backends::common::Comm side(world.side_channel());
    auto result = bench::run_training(*engine, spec, *data, side);
    backends::common::AllocSafetyStats checked;
    auto violations = backends::common::check_allocator_safety(s, &checked);
    auto params = engine->full_parameters();
    if (world.rank == 0) {
      std::lock_guard<std::mutex> lock(m);
      for (const auto& st : result.steps) out.losses.push_back(st.loss);
      out.params = params;
      out.schedule = schedule_of(s);
      out.violations = violations;
      out.checked = checked;
      out.unordered_waits = unordered_waits(s);
      out.dump = s.dump();
    } else if (!violations.empty()) {
      ADD_FAILURE() << "rank " << world.rank << ": " << violations.front().message();
    }
  };
  if (emulated) {
    auto world = runtime::init_emulated_world(0, w, device);
    body(world);
  } else {
    test_support::run_ranks(w, body);
  }
  return out;
}

std::string messages(const std::vector<AllocSafetyViolation>& v) {
  std::string s;
  for (const auto& x : v) s += x.message() + "\n";
  return s;
}

}  // namespace

// ---------------------------------------------------------------- the mode switch

TEST(StreamModes, ZerobenchStreamsPicksTheModeAndRefusesOtherValues) {
  unsetenv("ZEROBENCH_STREAMS");
  EXPECT_EQ(Streams(at::kCPU).mode(), StreamMode::kDeferred);
  setenv("ZEROBENCH_STREAMS", "eager", 1);
  EXPECT_EQ(Streams(at::kCPU).mode(), StreamMode::kEager);
  setenv("ZEROBENCH_STREAMS", "deferred", 1);
  EXPECT_EQ(Streams(at::kCPU).mode(), StreamMode::kDeferred);
  setenv("ZEROBENCH_STREAMS", "eagre", 1);
  try {
    Streams s(at::kCPU);
    ADD_FAILURE() << "ZEROBENCH_STREAMS=eagre accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ZEROBENCH_STREAMS=eagre"), std::string::npos) << e.what();
  }
  unsetenv("ZEROBENCH_STREAMS");
  // The CLI: one line naming the bad value, exit 2.
  const auto r = test_support::run_command("ZEROBENCH_STREAMS=eagre " + std::string(zb::test_support::zerobench_bin()) +
                                           " run --model tiny --layers 1 --steps 1 --warmup 0 --out " +
                                           test_support::temp_path("bad_mode.json") + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("ZEROBENCH_STREAMS=eagre"), std::string::npos) << r.output;
}

TEST(StreamModes, EagerRunsEnqueuedWorkAtOnceLikeCudaAndLogsTheSameEntries) {
  std::vector<std::string> logs[2];
  for (const auto mode : {StreamMode::kDeferred, StreamMode::kEager}) {
    Streams s(at::kCPU);
    s.set_mode(mode);
    s.set_logging(true);
    const auto side = s.create("side");
    int ran = 0;
    s.enqueue(side, std::vector<backends::common::PendingCollective>{}, "w1", [&] { ++ran; });
    EXPECT_EQ(ran, mode == StreamMode::kEager ? 1 : 0) << to_string(mode);
    s.wait_stream(s.compute(), side);
    EXPECT_EQ(ran, 1);
    logs[mode == StreamMode::kEager] = schedule_of(s);
  }
  EXPECT_EQ(logs[0], logs[1]);
}

// Every engine and precision: the eager run (the CUDA host path) and the deferred run give
// bitwise-equal losses and parameters and issue the same schedule, and neither breaks the
// allocator's rule.
TEST(StreamModes, EveryEngineAndPrecisionTrainsBitwiseEquallyAndSchedulesTheSameInBothModes) {
  for (const auto& c : all_cases()) {
    SCOPED_TRACE(c.name);
    const auto spec = spec_for(c, 2);
    const auto deferred = run_mode(c, spec, 2, StreamMode::kDeferred);
    const auto eager = run_mode(c, spec, 2, StreamMode::kEager);
    ASSERT_EQ(deferred.losses.size(), 2u);
    EXPECT_EQ(deferred.losses, eager.losses);
    ASSERT_EQ(deferred.params.size(), eager.params.size());
    for (size_t u = 0; u < eager.params.size(); ++u) {
      EXPECT_TRUE(at::equal(deferred.params[u], eager.params[u])) << "unit " << u;
    }
    EXPECT_EQ(deferred.schedule, eager.schedule);
    EXPECT_TRUE(deferred.violations.empty()) << messages(deferred.violations);
    EXPECT_TRUE(eager.violations.empty()) << messages(eager.violations) << eager.dump;
    // Not vacuous: frees were checked against uses on other streams (DDP has only the compute
    // stream and frees no logged storage: nothing to check there).
    if (c.backend != "ddp") {
      EXPECT_GT(eager.checked.frees, 0);
      EXPECT_GT(eager.checked.cross_stream_uses, 0);
      EXPECT_GT(deferred.checked.cross_stream_uses, 0);
    }
    std::cout << "[ checked  ] " << c.name << ": frees " << deferred.checked.frees << " / " << eager.checked.frees
              << ", cross-stream uses " << deferred.checked.cross_stream_uses << " / "
              << eager.checked.cross_stream_uses << " (deferred / eager)\n";
  }
}

TEST(StreamModes, HybridShardTrainsBitwiseEquallyInBothModesAndKeepsTheAllocatorRule) {
  backends::fsdp::FsdpOptions o;
  o.sharding_strategy = backends::fsdp::ShardingStrategy::kHybridShard;
  o.hybrid_shard_group_size = 2;
  backends::fsdp2::Fsdp2Options o2;
  o2.dp_replicate_size = 2;
  for (const Case& c : {Case{"fsdp_hybrid", "fsdp", "mixed", backends::fsdp::to_json(o)},
                        Case{"fsdp2_hsdp", "fsdp2", "mixed", backends::fsdp2::to_json(o2)}}) {
    SCOPED_TRACE(c.name);
    const auto spec = spec_for(c);
    const auto deferred = run_mode(c, spec, 4, StreamMode::kDeferred);
    const auto eager = run_mode(c, spec, 4, StreamMode::kEager);
    EXPECT_EQ(deferred.losses, eager.losses);
    EXPECT_EQ(deferred.schedule, eager.schedule);
    EXPECT_TRUE(eager.violations.empty()) << messages(eager.violations);
  }
}

// ---------------------------------------------------------------- the allocator-safety check

TEST(AllocSafety, TheRuleOnAHandWrittenLog) {
  Streams s(at::kCPU);
  s.set_logging(true);
  const auto side = s.create("side");
  auto make_on = [&](backends::common::StreamId id, const std::string& label) {
    Streams::Guard g(s, id);
    auto t = at::ones({16});
    s.op("make " + label, {t});  // first seen on `id`: its allocation stream
    return t;
  };
  {  // used on compute, freed with no record and no wait: a violation naming it and both streams
    auto t = make_on(side, "x");
    s.op("read x", {t});
    t = at::Tensor();
  }
  {  // recorded on the stream that used it: safe
    auto t = make_on(side, "y");
    s.op("read y", {t});
    s.record_stream(t, s.compute(), "y");
    t = at::Tensor();
  }
  {  // held until the allocation stream waited for the use: safe
    auto t = make_on(side, "z");
    s.op("read z", {t});
    backends::common::HeldTensors held{{t}, s.record(s.compute(), "after z")};
    t = at::Tensor();
    held.release(s, {side});
  }
  {  // the same, with the release planted early: a violation
    s.plant_early_free("after w");
    auto t = make_on(side, "w");
    s.op("read w", {t});
    backends::common::HeldTensors held{{t}, s.record(s.compute(), "after w")};
    t = at::Tensor();
    held.release(s, {side});
    s.plant_early_free("");
  }
  const auto v = backends::common::check_allocator_safety(s);
  ASSERT_EQ(v.size(), 2u) << messages(v) << s.dump();
  EXPECT_NE(v[0].tensor.find("make x"), std::string::npos) << v[0].message();
  EXPECT_EQ(v[0].alloc_stream, "side");
  EXPECT_EQ(v[0].use_stream, "compute");
  EXPECT_EQ(v[0].use_label, "read x");
  EXPECT_NE(v[1].tensor.find("make w"), std::string::npos) << v[1].message();
}

TEST(AllocSafety, ResizeToZeroIsAFreeAndARefillANewAllocation) {
  Streams s(at::kCPU);
  s.set_logging(true);
  const auto side = s.create("side");
  auto t = at::ones({16});
  {
    Streams::Guard g(s, side);
    s.op("fill", {t});  // first seen on side
  }
  s.op("read", {t});
  backends::common::free_storage(t);  // resize_(0) with compute's read pending: unsafe
  s.op("after free");
  backends::common::allocate_storage(t, 64);
  s.op("refilled on compute", {t});  // a new generation, allocated on compute
  backends::common::free_storage(t);
  const auto v = backends::common::check_allocator_safety(s);
  ASSERT_EQ(v.size(), 1u) << messages(v) << s.dump();
  EXPECT_EQ(v[0].free_label, "storage resized to 0");
  EXPECT_EQ(v[0].use_label, "read");
}

// A planted early free in each engine's stream calls: the check fails naming the tensor and the
// two streams (in the eager run, the CUDA host order, and in the deferred one).
TEST(AllocSafety, APlantedEarlyFreeInEachEngineIsCaught) {
  struct Planted {
    Case c;
    std::string plant, named, alloc_stream, use_stream;  // `named`: in the tensor's names
  };
  const auto cases = all_cases();
  auto find = [&](const std::string& name) {
    for (const auto& c : cases)
      if (c.name == name) return c;
    return Case{};
  };
  const std::vector<Planted> planted = {
      // FSDP1 _free_unsharded_flat_param without its record_stream(current_stream()).
      {find("fsdp_mixed"), "full_param unit1", "unit1", "unshard", "compute"},
      // FSDP2: the all-gather output released before the all-gather streams wait the copy-out event.
      {find("fsdp2_mixed"), "all_gather copy-out unit1", "all_gather:unit1", "all_gather", "compute"},
      // DeepSpeed free_param without param.data.record_stream(current_stream()).
      {find("zero3_bf16"), "param 4", "forward module unit", "allgather", "compute"},
      // DeepSpeed __add_grad_to_ipg_bucket without the gradient's record_stream on the rp stream.
      {find("zero3_bf16"), "grad 7", "copy grad into IPG bucket", "compute", "reduce_and_partition"},
  };
  for (const auto& p : planted) {
    for (const auto mode : {StreamMode::kEager, StreamMode::kDeferred}) {
      SCOPED_TRACE(p.c.name + " plant '" + p.plant + "' " + to_string(mode));
      const auto run = run_mode(p.c, spec_for(p.c), 2, mode, p.plant);
      ASSERT_FALSE(run.violations.empty()) << "the planted early free was not caught\n" << run.dump;
      bool named = false;
      for (const auto& v : run.violations)
        named |= v.tensor.find(p.named) != std::string::npos && v.alloc_stream == p.alloc_stream &&
                 v.use_stream == p.use_stream;
      EXPECT_TRUE(named) << messages(run.violations);
    }
  }
}

// ---------------------------------------------------------------- emulation in the log

TEST(EmulatedLog, ACollectiveIsWorkOnTheIssuingStreamAndItsWaitOrdersNothing) {
  auto world = runtime::init_emulated_world(0, 4, at::kCPU);
  backends::common::Comm comm(world);
  auto& s = comm.streams();
  s.set_logging(true);
  const auto side = s.create("side");
  auto in = at::ones({4}), out = at::empty({16});
  s.op("before");
  backends::common::PendingCollective p;
  {
    Streams::Guard g(s, side);
    p = comm.all_gather_async(out, in, "x");
  }
  p.wait();  // compute "waits": with EmulatedBackend nothing to wait for
  s.op("after wait");
  const auto coll = s.find(Kind::kCollective, "", "all_gather:x");
  ASSERT_GE(coll, 0) << s.dump();
  EXPECT_EQ(s.log()[size_t(coll)].stream, "side");  // on the issuing stream, not a communicator's
  EXPECT_EQ(s.log()[size_t(coll)].other, "emulated:world");
  EXPECT_FALSE(s.happens_before(coll, s.find(Kind::kOp, "compute", "after wait"))) << s.dump();
  const auto wait = s.find(Kind::kWaitCollective, "compute", "x");
  ASSERT_GE(wait, 0);
  EXPECT_NE(s.log()[size_t(wait)].label.find("no-op"), std::string::npos);
  // Its tensors are used on the issuing stream (no communicator records them).
  int uses_on_side = 0;
  for (const auto& e : s.log()) uses_on_side += e.kind == Kind::kUse && e.stream == "side" && e.label == "all_gather:x";
  EXPECT_EQ(uses_on_side, 2);
}

// The engines' schedules in emulation: every stream that waits on a collective is ordered after
// it by the engine's own stream waits (no engine relies on Work::wait() alone, which orders
// nothing there), and the allocator rule holds.
TEST(EmulatedLog, EveryEngineStaysOrderedAndAllocatorSafeInEmulation) {
  for (const auto& c : all_cases()) {
    SCOPED_TRACE(c.name);
    for (const auto mode : {StreamMode::kDeferred, StreamMode::kEager}) {
      const auto run = run_mode(c, spec_for(c), 2, mode, "", /*emulated=*/true);
      ASSERT_EQ(run.losses.size(), 1u);
      EXPECT_TRUE(run.violations.empty()) << to_string(mode) << "\n" << messages(run.violations);
      std::string waits;
      for (const auto& w : run.unordered_waits) waits += w + "\n";
      EXPECT_TRUE(run.unordered_waits.empty()) << to_string(mode) << ": waits that order nothing\n" << waits;
    }
  }
}

// The gate above can fail: a collective issued on one stream and waited on another, with no
// stream wait between them, is ordered under NCCL and not in emulation.
TEST(EmulatedLog, AWaitOnAnotherStreamIsUnorderedOnlyInEmulation) {
  for (const bool emulated : {false, true}) {
    SCOPED_TRACE(emulated ? "emulated" : "gloo (NCCL model)");
    std::vector<std::string> unordered;
    auto body = [&](runtime::World& world) {
      backends::common::Comm comm(world);
      auto& s = comm.streams();
      s.set_logging(true);
      const auto side = s.create("side");
      auto in = at::ones({4}), out = at::empty({4 * world.size});
      backends::common::PendingCollective p;
      {
        Streams::Guard g(s, side);
        p = comm.all_gather_async(out, in, "x");
      }
      p.wait();  // on compute
      if (world.rank == 0) unordered = unordered_waits(s);
    };
    if (emulated) {
      auto world = runtime::init_emulated_world(0, 2, at::kCPU);
      body(world);
    } else {
      test_support::run_ranks(2, body);
    }
    EXPECT_EQ(unordered.size(), emulated ? 1u : 0u);
  }
}

// On a GPU (skipped without one): the same engines on real CUDA streams, one GPU playing rank 0
// of an emulated W=2 — the log and the allocator check over the device's own control flow, and
// the losses of the CPU's eager run.
TEST(CudaAllocSafety, EveryEngineOnOneGpuEmulatedKeepsTheAllocatorRuleAndTheCpuLosses) {
  ZB_REQUIRE_GPU();
  for (const auto& c : all_cases()) {
    SCOPED_TRACE(c.name);
    const auto spec = spec_for(c, 2);
    const auto gpu = run_mode(c, spec, 2, StreamMode::kDeferred, "", true, runtime::pick_device("cuda", 0));
    const auto cpu = run_mode(c, spec, 2, StreamMode::kEager, "", true);
    EXPECT_TRUE(gpu.violations.empty()) << messages(gpu.violations);
    EXPECT_TRUE(gpu.unordered_waits.empty());
    ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
    for (size_t i = 0; i < cpu.losses.size(); ++i)
      EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 2e-2 * std::abs(cpu.losses[i])) << "step " << i;
  }
}
