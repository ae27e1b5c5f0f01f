// The stream layer's dependency log (what each CUDA stream waits for, recorded on CPU) and the
// engines' schedules read from it: FSDP-mode as FSDP1 (all-gathers on the unshard stream that
// waits for compute once per iteration, gradient work on the post-backward stream), ZeRO3-mode
// as DeepSpeed (reduce-scatters waited only on the reduce-and-partition stream, the host and
// compute stream wait for it at the end of backward), per-module fetch in backward, and
// accelerate's gradient accumulation (no_sync / sync_each_batch); FSDP2-mode as torch 2.11
// fully_shard (copy-in / all-gather / reduce-scatter / all-reduce streams, held references).
#include <gtest/gtest.h>

#include "backends/backend_info.hpp"
#include "backends/common/comm.hpp"
#include "backends/common/streams.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::common::StreamLogEntry;
using backends::common::Streams;
using Kind = StreamLogEntry::Kind;

namespace {
// The first log entry of kind `k` on `stream` with `label`; fails the test (printing the log) if none.
int64_t find_logged(const Streams& s, Kind k, const std::string& stream, const std::string& label) {
  const auto i = s.find(k, stream, label);
  EXPECT_GE(i, 0) << stream << " " << label << "\n" << s.dump();
  return i;
}
}  // namespace

TEST(StreamLog, HappensBeforeFollowsStreamOrderWaitsEventsAndHostSyncs) {
  Streams s(at::kCPU);
  s.set_logging(true);
  const auto side = s.create("side");
  s.op("a");                       // compute
  {
    Streams::Guard g(s, side);
    s.op("b");                     // side, independent of a
  }
  const auto a = s.find(Kind::kOp, "compute", "a"), b = s.find(Kind::kOp, "side", "b");
  EXPECT_FALSE(s.happens_before(a, b));
  EXPECT_FALSE(s.happens_before(b, a));
  s.wait_stream(side, s.compute());  // side waits for a
  {
    Streams::Guard g(s, side);
    s.op("c");
  }
  const auto c = s.find(Kind::kOp, "side", "c");
  EXPECT_TRUE(s.happens_before(a, c));
  EXPECT_TRUE(s.happens_before(b, c));  // same stream, earlier
  s.op("d");
  const auto d = s.find(Kind::kOp, "compute", "d");
  EXPECT_FALSE(s.happens_before(c, d));  // compute never waited for side
  const auto e = s.record(side, "after c");
  s.wait_event(s.compute(), e);
  s.op("f");
  EXPECT_TRUE(s.happens_before(c, s.find(Kind::kOp, "compute", "f")));
  // A host sync orders everything issued afterwards, on every stream.
  const auto side2 = s.create("other");
  {
    Streams::Guard g(s, side);
    s.op("g");
  }
  s.synchronize_stream(side);
  {
    Streams::Guard g(s, side2);
    s.op("h");
  }
  EXPECT_TRUE(s.happens_before(s.find(Kind::kOp, "side", "g"), s.find(Kind::kOp, "other", "h")));
  EXPECT_FALSE(s.happens_before(d, s.find(Kind::kOp, "side", "g")));
}

TEST(StreamLog, CollectivesRunOnTheCommunicatorStreamAfterTheIssuingStream) {
  test_support::run_ranks(2, [](runtime::World& world) {
    backends::common::Comm comm(world);
    auto& s = comm.streams();
    s.set_logging(true);
    const auto side = s.create("side");
    s.op("compute work");
    auto in = at::ones({4}), out = at::empty({8});
    backends::common::PendingCollective p;
    {
      Streams::Guard g(s, side);
      p = comm.all_gather_async(out, in, "x");
    }
    const auto coll = s.find(Kind::kCollective, "", "all_gather:x");
    ASSERT_GE(coll, 0) << s.dump();
    EXPECT_EQ(s.log()[size_t(coll)].stream, "nccl:world");
    EXPECT_EQ(s.log()[size_t(coll)].other, "side");
    EXPECT_FALSE(s.happens_before(s.find(Kind::kOp, "compute", "compute work"), coll));
    s.op("before wait");
    p.wait();  // the current (compute) stream waits for it
    s.op("after wait");
    EXPECT_FALSE(s.happens_before(coll, s.find(Kind::kOp, "compute", "before wait")));
    EXPECT_TRUE(s.happens_before(coll, s.find(Kind::kOp, "compute", "after wait")));
  });
}

TEST(StreamLog, EnqueuedWorkIsDeferredOnCpuUntilItsStreamIsWaitedFor) {
  Streams s(at::kCPU);
  s.set_mode(backends::common::StreamMode::kDeferred);  // (test_streams_eager runs the rest eagerly)
  s.set_logging(true);
  const auto side = s.create("side");
  int ran = 0;
  s.enqueue(side, std::vector<backends::common::PendingCollective>{}, "w1", [&] { ++ran; });
  EXPECT_EQ(ran, 0);  // deferred: the host did not block
  EXPECT_GE(s.find(Kind::kOp, "side", "w1"), 0);  // ... but logged in issue order
  s.enqueue(side, std::vector<backends::common::PendingCollective>{}, "w2", [&] { ran += 10; });
  EXPECT_EQ(ran, 1);  // the next piece ran the previous one (one stays in flight)
  s.wait_stream(s.compute(), side);
  EXPECT_EQ(ran, 11);
  s.enqueue(s.compute(), std::vector<backends::common::PendingCollective>{}, "w3", [&] { ran += 100; });
  EXPECT_EQ(ran, 111);  // the compute stream is the host: it runs at once
}

TEST(StreamLog, HeldTensorsAreReleasedAfterTheWaitersWaitForTheirEvent) {
  // FSDP2's AllGatherState: keep the all-gather output until the all-gather streams waited for
  // the copy-out event, instead of record_stream.
  Streams s(at::kCPU);
  s.set_logging(true);
  const auto copy_in = s.create("all_gather_copy_in"), all_gather = s.create("all_gather");
  s.op("copy-out");
  auto out = at::ones({8});
  backends::common::HeldTensors held{{out}, s.record(s.compute(), "copy-out done")};
  EXPECT_TRUE(held.held());
  EXPECT_GT(out.use_count(), 1);
  held.release(s, {copy_in, all_gather});
  EXPECT_FALSE(held.held());
  EXPECT_EQ(out.use_count(), 1);
  {
    Streams::Guard g(s, all_gather);
    s.op("next all-gather");
  }
  EXPECT_TRUE(s.happens_before(s.find(Kind::kOp, "compute", "copy-out"), s.find(Kind::kOp, "all_gather", "next")));
  EXPECT_EQ(s.log()[size_t(s.find(Kind::kWaitEvent, "all_gather_copy_in", ""))].target,
            s.find(Kind::kRecordEvent, "compute", "copy-out done"));
}

namespace {
using backends::fsdp::FsdpOptions;

struct Logged {
  std::unique_ptr<backends::Engine> engine;
  bench::TrainResult result;
};

// Trains one step on W thread-ranks with rank 0's dependency log on; returns rank 0's engine.
Logged logged_run(const std::string& backend, const backends::EngineSpec& spec, int w) {
  Logged out;
  std::mutex m;
  test_support::run_ranks(w, [&](runtime::World& world) {
    auto engine = backends::create_engine(backend, spec, world);
    if (world.rank == 0) engine->comm().streams().set_logging(true);
    auto data = models::make_data_source("random", spec.model.vocab, 1);
    backends::common::Comm side(world.side_channel());
    auto result = bench::run_training(*engine, spec, *data, side);
    if (world.rank == 0) {
      std::lock_guard<std::mutex> lock(m);
      out.engine = std::move(engine);
      out.result = std::move(result);
    }
  });
  return out;
}

backends::EngineSpec one_step(const std::string& backend, const std::string& precision, int layers) {
  auto spec = test_support::small_spec(1);
  spec.model.layers = layers;
  spec.precision = precision;
  spec.train.steps = 1;
  spec.train.warmup = 0;
  if (backend == "fsdp") spec.options = backends::fsdp::to_json(FsdpOptions{});
  if (backend == "fsdp2") spec.options = backends::fsdp2::to_json(backends::fsdp2::Fsdp2Options{});
  return spec;
}

// The entry that waits (kind, on `stream`) for the entry `target`, or -1.
int64_t waiter_of(const Streams& s, Kind kind, const std::string& stream, int64_t target) {
  for (const auto& e : s.log())
    if (e.kind == kind && e.stream == stream && e.target == target) return e.seq;
  return -1;
}
}  // namespace

TEST(FsdpSchedule, WithoutForwardPrefetchTheNextUnitsAllGatherDoesNotWaitForThisUnitsCompute) {
  const int L = 4;
  auto run = logged_run("fsdp", one_step("fsdp", "mixed", L), 2);
  const auto& s = run.engine->comm().streams();
  for (int u = 1; u < L; ++u) {
    const auto compute_u = s.find(Kind::kOp, "compute", "forward unit" + std::to_string(u));
    const auto ag_next = s.find(Kind::kCollective, "", "all_gather:unit" + std::to_string(u + 1));
    ASSERT_GE(compute_u, 0) << s.dump();
    ASSERT_GE(ag_next, 0) << s.dump();
    // Issued from the unshard stream, which waited for the compute stream only in the root's
    // pre-forward (_wait_for_computation_stream): free to run under unit u's compute.
    EXPECT_EQ(s.log()[size_t(ag_next)].other, "unshard");
    EXPECT_FALSE(s.happens_before(compute_u, ag_next)) << "unit " << u + 1 << "'s all-gather waits for unit " << u
                                                       << "'s compute\n" << s.dump();
    // ... while unit u+1's compute waits for its all-gather.
    EXPECT_TRUE(s.happens_before(ag_next, s.find(Kind::kOp, "compute", "forward unit" + std::to_string(u + 1))));
    // limit_all_gathers: the host waited for unit u-1's reshard before issuing it (two in flight).
    if (u >= 2) {
      EXPECT_TRUE(s.happens_before(s.find(Kind::kOp, "compute", "forward unit" + std::to_string(u - 1)), ag_next));
    }
  }
  // The unshard stream waits for the compute stream once per iteration: in the root's
  // pre-forward (_wait_for_computation_stream); otherwise only for the pre-unshard stream.
  int unshard_waits_on_compute = 0;
  for (const auto& e : s.log())
    if (e.kind == Kind::kWaitStream && e.stream == "unshard") {
      unshard_waits_on_compute += e.other == "compute";
      EXPECT_TRUE(e.other == "compute" || e.other == "pre_unshard") << e.other;
    }
  EXPECT_EQ(unshard_waits_on_compute, 1);
}

TEST(FsdpSchedule, GradientCastReduceAndAccumulateRunOnThePostBackwardStream) {
  const int L = 3;
  auto run = logged_run("fsdp", one_step("fsdp", "mixed", L), 2);
  const auto& s = run.engine->comm().streams();
  int grad_ops = 0;
  for (const auto& e : s.log()) {
    if (e.kind == Kind::kOp && e.label.rfind("grad ", 0) == 0) {
      EXPECT_EQ(e.stream, "post_backward") << e.label;
      ++grad_ops;
    }
    if (e.kind == Kind::kCollective && e.label.rfind("reduce_scatter:", 0) == 0) {
      EXPECT_EQ(e.other, "post_backward") << e.label;
    }
    if (e.kind == Kind::kWaitCollective && s.log()[size_t(e.target)].label.rfind("reduce_scatter:", 0) == 0) {
      EXPECT_EQ(e.stream, "post_backward") << "a reduce-scatter is waited for off the post-backward stream";
    }
  }
  EXPECT_EQ(grad_ops, 2 * (L + 1));  // cast/pad/predivide and post-divide/accumulate per unit
  for (int u = 0; u <= L; ++u) {
    const auto rs = s.find(Kind::kCollective, "", "reduce_scatter:unit" + std::to_string(u));
    // After the unit's gradient computation (post_backward_stream.wait_stream(current_stream())) ...
    EXPECT_TRUE(s.happens_before(s.find(Kind::kOp, "compute", "backward unit" + std::to_string(u)), rs));
    // ... and the compute stream does not wait for it before the final callback, so the next
    // unit's backward runs under it.
    if (u > 0) {
      EXPECT_FALSE(s.happens_before(rs, s.find(Kind::kOp, "compute", "backward unit" + std::to_string(u - 1))));
    }
  }
  // _post_backward_final_callback: current_stream.wait_stream(_post_backward_stream).
  const auto final_wait = s.find(Kind::kWaitStream, "compute", "", /*last=*/true);
  EXPECT_EQ(s.log()[size_t(final_wait)].other, "post_backward");
  EXPECT_TRUE(s.happens_before(s.find(Kind::kOp, "post_backward", "accumulate unit0", true), final_wait));
}

TEST(FsdpAccumulation, NoSyncReducesOncePerStepUnlessSyncEachBatch) {
  const int L = 2;
  using K = backends::common::CollectiveKind;
  auto counts = [&](int accum, bool sync_each) {
    auto spec = one_step("fsdp", "fp32", L);
    spec.train.grad_accum = accum;
    spec.train.sync_each_batch = sync_each;
    spec.train.steps = 2;
    auto run = logged_run("fsdp", spec, 2);
    return std::make_pair(run.result.comm_last_step[size_t(K::kReduceScatter)].count,
                          run.result.comm_last_step[size_t(K::kAllGather)].count);
  };
  const auto one = counts(1, false), two = counts(2, false), two_each = counts(2, true);
  EXPECT_EQ(one.first, L + 1);
  EXPECT_EQ(two.first, L + 1) << "no_sync: one reduce-scatter per unit per step";
  EXPECT_EQ(two_each.first, 2 * (L + 1)) << "sync_each_batch: one per unit per micro-batch";
  // FULL_SHARD still gathers every micro-batch (forward, and the blocks again in backward).
  EXPECT_EQ(two.second, 2 * one.second);
  EXPECT_EQ(two_each.second, 2 * one.second);
}

TEST(FsdpAccumulation, NoSyncHoldsUnshardedGradientsAndStillMatchesTheReference) {
  for (const bool each : {false, true}) {
    auto spec = test_support::small_spec(2);
    spec.precision = "fp32";
    spec.train.sync_each_batch = each;
    spec.options = backends::fsdp::to_json(FsdpOptions{});
    SCOPED_TRACE(each ? "sync_each_batch" : "no_sync");
    test_support::expect_matches_reference("fsdp", spec, 2);
  }
}

TEST(Zero3Schedule, ReduceScattersAreWaitedOnlyOnTheirStreamAndByTheHostAtTheEndOfBackward) {
  auto spec = one_step("zero3", "bf16", 2);
  backends::zero3::Zero3Options o;
  o.stage3_param_persistence_threshold = 0;
  o.reduce_bucket_size = 60000;  // a few buckets per backward
  spec.options = backends::zero3::to_json(o);
  auto run = logged_run("zero3", spec, 2);
  const auto& s = run.engine->comm().streams();
  std::vector<int64_t> partitions;
  int buckets = 0;
  for (const auto& e : s.log()) {
    if (e.kind == Kind::kCollective && e.label.rfind("reduce_scatter:", 0) == 0) {
      EXPECT_EQ(e.other, "reduce_and_partition");
      ++buckets;
    }
    if (e.kind == Kind::kWaitCollective && s.log()[size_t(e.target)].label.rfind("reduce_scatter:", 0) == 0) {
      EXPECT_EQ(e.stream, "reduce_and_partition");
    }
    if (e.kind == Kind::kOp && e.label == "partition_grads") partitions.push_back(e.seq);
  }
  ASSERT_GE(buckets, 2) << s.dump();
  const auto end_sync = s.find(Kind::kHostSync, "reduce_and_partition", "stream");
  ASSERT_GE(end_sync, 0) << s.dump();
  // Before the end-of-backward sync neither the compute and all-gather streams nor the host
  // wait for the reduce-and-partition stream or its reduce-scatters. (Collectives on one
  // communicator run in issue order, so an all-gather issued after a reduce-scatter still
  // completes after it on the device — NCCL's order, not a wait DeepSpeed makes.)
  auto on_rp = [&](int64_t seq) { return seq >= 0 && s.log()[size_t(seq)].stream == "reduce_and_partition"; };
  for (const auto& e : s.log()) {
    if (e.seq >= end_sync) break;
    const bool compute_side = e.stream == "compute" || e.stream == "allgather";
    if (compute_side && e.kind == Kind::kWaitStream) {
      EXPECT_NE(e.other, "reduce_and_partition") << e.seq;
    }
    if (compute_side && e.kind == Kind::kWaitEvent) {
      EXPECT_FALSE(on_rp(e.target)) << e.seq;
    }
    if (compute_side && e.kind == Kind::kWaitCollective) {
      EXPECT_NE(s.log()[size_t(e.target)].label.rfind("reduce_scatter:", 0), 0u) << e.seq;
    }
    if (e.kind == Kind::kHostSync) {
      EXPECT_FALSE(on_rp(e.target)) << "the host waited for a bucket at " << e.seq;
    }
  }
  // After it, the compute stream (the optimizer step's norm all-reduce waited there) is ordered
  // after every bucket's partitioning.
  const auto after = s.find(Kind::kWaitCollective, "compute", "grad_norm", /*last=*/true);
  ASSERT_GT(after, end_sync) << s.dump();
  for (auto p : partitions) {
    EXPECT_TRUE(s.happens_before(p, after));
  }
  // Fetches are issued from the all-gather stream; compute waits for that stream.
  for (const auto& e : s.log())
    if (e.kind == Kind::kCollective && e.label.rfind("all_gather:module", 0) == 0) {
      EXPECT_EQ(e.other, "allgather");
    }
}

TEST(Zero3Schedule, BackwardFetchesModuleByModuleInReverseExecutionOrder) {
  auto spec = one_step("zero3", "bf16", 2);
  backends::zero3::Zero3Options o;
  o.stage3_param_persistence_threshold = 0;
  o.stage3_max_reuse_distance = 0;  // released after each use: every weight is fetched again in backward
  o.stage3_prefetch_bucket_size = 0;
  spec.options = backends::zero3::to_json(o);
  auto run = logged_run("zero3", spec, 2);
  const auto& s = run.engine->comm().streams();
  // In the last block, each module's weight is gathered after the module that runs after it in
  // forward has finished its backward (its gradient hook ran): fetches interleave with backward.
  const std::vector<std::string> order = {"w_down", "w_up", "w_gate", "mlp_norm", "wo"};
  int64_t prev_backward = -1;
  for (const auto& name : order) {
    const auto backward_op = s.find(Kind::kOp, "compute", "backward module unit2." + name);
    ASSERT_GE(backward_op, 0) << name << "\n" << s.dump();
    if (prev_backward >= 0) {
      // The first all-gather after the previous module's backward is this module's fetch.
      int64_t ag = -1;
      for (const auto& e : s.log())
        if (e.seq > prev_backward && e.kind == Kind::kCollective && e.label.rfind("all_gather:", 0) == 0) {
          ag = e.seq;
          break;
        }
      EXPECT_GT(ag, prev_backward) << name;
      EXPECT_LT(ag, backward_op) << name;
    }
    prev_backward = backward_op;
  }
  // Two gathers of every weight per step (forward, backward), one call each.
  const int64_t weights = 3 + 9 * spec.model.layers;
  EXPECT_EQ(run.result.comm_last_step[size_t(backends::common::CollectiveKind::kAllGather)].count, 2 * weights);
}

// ---------------------------------------------------------------- FSDP2-mode (torch 2.11 fully_shard)

TEST(Fsdp2Schedule, ForwardAllGathersRunOnTheirStreamsUnderThePreviousGroupsCompute) {
  const int L = 4;
  auto run = logged_run("fsdp2", one_step("fsdp2", "mixed", L), 2);
  const auto& s = run.engine->comm().streams();
  auto seq = [&](Kind k, const std::string& stream, const std::string& label) { return find_logged(s, k, stream, label); };
  for (int u = 1; u < L; ++u) {
    const std::string next = "unit" + std::to_string(u + 1);
    const auto compute_u = seq(Kind::kOp, "compute", "forward unit" + std::to_string(u));
    const auto copy_in = seq(Kind::kOp, "all_gather_copy_in", "all_gather copy-in " + next);
    const auto ag = seq(Kind::kCollective, "", "all_gather:" + next);
    ASSERT_GE(ag, 0);
    // foreach_all_gather: copy-in on the copy-in stream, the all-gather issued from the all-gather
    // stream after it (all_gather_stream.wait_stream(all_gather_copy_in_stream)).
    EXPECT_EQ(s.log()[size_t(ag)].other, "all_gather");
    EXPECT_TRUE(s.happens_before(copy_in, ag));
    // Implicit prefetch: neither waits for unit u's compute (nor unit u-1's) ...
    EXPECT_FALSE(s.happens_before(compute_u, copy_in)) << s.dump();
    EXPECT_FALSE(s.happens_before(compute_u, ag)) << next << "'s all-gather waits for unit " << u << "'s compute";
    EXPECT_FALSE(s.happens_before(seq(Kind::kOp, "compute", "forward unit" + std::to_string(u - 1)), ag));
    // ... while unit u+1's copy-out and compute wait for its all-gather event.
    const auto copy_out = seq(Kind::kOp, "compute", "all_gather copy-out " + next);
    EXPECT_TRUE(s.happens_before(ag, copy_out));
    EXPECT_TRUE(s.happens_before(ag, seq(Kind::kOp, "compute", "forward " + next)));
  }
  // AllGatherState: group k's all-gather output is held until group k+1's wait_for_unshard, where
  // both all-gather streams wait its copy-out event — after group k+1's copy-in (which therefore
  // wrote into other memory) and before group k+2's. The last one is released by the root's
  // post-forward.
  for (int k = 0; k <= L; ++k) {
    const std::string label = "unit" + std::to_string(k);
    const auto copy_out_event = seq(Kind::kRecordEvent, "compute", "all_gather copy-out " + label);
    const auto wait_copy_in = waiter_of(s, Kind::kWaitEvent, "all_gather_copy_in", copy_out_event);
    const auto wait_ag = waiter_of(s, Kind::kWaitEvent, "all_gather", copy_out_event);
    ASSERT_GE(wait_copy_in, 0) << label << "\n" << s.dump();
    ASSERT_GE(wait_ag, 0) << label;
    if (k < L) {
      EXPECT_GT(wait_copy_in, seq(Kind::kOp, "all_gather_copy_in", "all_gather copy-in unit" + std::to_string(k + 1)));
    }
    if (k + 2 <= L) {
      EXPECT_LT(wait_copy_in, seq(Kind::kOp, "all_gather_copy_in", "all_gather copy-in unit" + std::to_string(k + 2)));
    }
    if (k == L) {
      EXPECT_GT(wait_ag, seq(Kind::kOp, "compute", "forward unit0"));  // _post_forward of the forward root
    }
  }
  // The all-gather streams wait for the compute stream once per iteration (_root_pre_forward);
  // otherwise the all-gather stream waits only the copy-in stream.
  int waits_on_compute = 0;
  for (const auto& e : s.log())
    if (e.kind == Kind::kWaitStream && (e.stream == "all_gather" || e.stream == "all_gather_copy_in")) {
      waits_on_compute += e.other == "compute";
      EXPECT_TRUE(e.other == "compute" || (e.stream == "all_gather" && e.other == "all_gather_copy_in")) << e.other;
    }
  EXPECT_EQ(waits_on_compute, 2);
}

TEST(Fsdp2Schedule, ReduceScattersRunOnTheirStreamAndComputeWaitsThemOneGroupLaterAndAtTheEnd) {
  const int L = 3;
  auto run = logged_run("fsdp2", one_step("fsdp2", "mixed", L), 2);
  const auto& s = run.engine->comm().streams();
  auto seq = [&](Kind k, const std::string& stream, const std::string& label) { return find_logged(s, k, stream, label); };
  for (const auto& e : s.log()) {
    if (e.kind == Kind::kCollective && e.label.rfind("reduce_scatter:", 0) == 0) {
      EXPECT_EQ(e.other, "reduce_scatter") << e.label;
    }
    if (e.kind == Kind::kWaitCollective && s.log()[size_t(e.target)].label.rfind("reduce_scatter:", 0) == 0) {
      EXPECT_EQ(e.stream, "reduce_scatter") << "a reduce-scatter is waited for off its stream";
    }
    if (e.kind == Kind::kOp && e.label.rfind("post-reduce ", 0) == 0) {
      EXPECT_EQ(e.stream, "reduce_scatter") << e.label;
    }
    if (e.kind == Kind::kWaitStream && e.stream == "reduce_scatter") {
      EXPECT_EQ(e.other, "compute");  // foreach_reduce: reduce_scatter_stream.wait_stream(current_stream)
    }
  }
  // Post-backward order: unit3, unit2, unit1, then the root (unit0) from the final callback.
  const auto root_backward = seq(Kind::kOp, "compute", "backward unit0");
  const auto norm_wait = s.find(Kind::kWaitCollective, "compute", "grad_norm", /*last=*/true);
  ASSERT_GT(norm_wait, root_backward) << s.dump();
  for (int u = 0; u <= L; ++u) {
    const std::string label = "unit" + std::to_string(u);
    const auto rs = seq(Kind::kCollective, "", "reduce_scatter:" + label);
    const auto post_reduce = seq(Kind::kOp, "reduce_scatter", "post-reduce " + label);
    // After the group's gradient computation and its reduce-scatter copy-in (current stream).
    EXPECT_TRUE(s.happens_before(seq(Kind::kOp, "compute", "backward " + label), rs));
    EXPECT_TRUE(s.happens_before(seq(Kind::kOp, "compute", "reduce_scatter copy-in " + label), rs));
    EXPECT_TRUE(s.happens_before(rs, post_reduce));
    // The optimizer (after the final callback) runs after every post-reduce.
    EXPECT_TRUE(s.happens_before(post_reduce, norm_wait));
    // The post-reduce event is waited only in finalize_backward (after the root's post-backward).
    const auto post_reduce_event = seq(Kind::kRecordEvent, "reduce_scatter", "post_reduce " + label);
    const auto waited = waiter_of(s, Kind::kWaitEvent, "compute", post_reduce_event);
    EXPECT_GT(waited, root_backward) << label << "\n" << s.dump();
    if (u == 0) continue;
    // The next group's backward is not ordered after this reduce-scatter ...
    const std::string prev = "unit" + std::to_string(u - 1);
    EXPECT_FALSE(s.happens_before(rs, seq(Kind::kOp, "compute", "backward " + prev))) << s.dump();
    // ... its post-backward waits this reduce-scatter's event (reduce_scatter_state) before its
    // own copy-in — after which this group's reduce-scatter input is released — but not this
    // group's post-reduce.
    const auto next_copy_in = seq(Kind::kOp, "compute", "reduce_scatter copy-in " + prev);
    const auto rs_wait =
        waiter_of(s, Kind::kWaitEvent, "compute", seq(Kind::kRecordEvent, "reduce_scatter", "reduce_scatter " + label));
    ASSERT_GE(rs_wait, 0) << label << "\n" << s.dump();
    EXPECT_LT(rs_wait, next_copy_in);
    EXPECT_GT(rs_wait, seq(Kind::kOp, "compute", "backward " + prev));
    EXPECT_TRUE(s.happens_before(rs, next_copy_in));
    EXPECT_FALSE(s.happens_before(post_reduce, next_copy_in));
  }
  // The root's reduce-scatter is the last: the final callback waits its event.
  const auto last_rs_wait =
      waiter_of(s, Kind::kWaitEvent, "compute", seq(Kind::kRecordEvent, "reduce_scatter", "reduce_scatter unit0"));
  EXPECT_GT(last_rs_wait, root_backward);
  EXPECT_LT(last_rs_wait, norm_wait);
}

TEST(Fsdp2Schedule, HsdpAllReducesRunOnTheAllReduceStreamAfterTheReduceScatter) {
  const int L = 2;
  auto spec = one_step("fsdp2", "fp32", L);
  backends::fsdp2::Fsdp2Options o;
  o.dp_replicate_size = 2;
  spec.options = backends::fsdp2::to_json(o);
  auto run = logged_run("fsdp2", spec, 4);
  const auto& s = run.engine->comm().streams();
  auto seq = [&](Kind k, const std::string& stream, const std::string& label) { return find_logged(s, k, stream, label); };
  const auto norm_wait = s.find(Kind::kWaitCollective, "compute", "grad_norm", /*last=*/true);
  for (int u = 0; u <= L; ++u) {
    const std::string label = "unit" + std::to_string(u);
    const auto rs = seq(Kind::kCollective, "", "reduce_scatter:" + label);
    const auto ar = seq(Kind::kCollective, "", "all_reduce:" + label);
    ASSERT_GE(ar, 0);
    EXPECT_EQ(s.log()[size_t(ar)].other, "all_reduce");  // all_reduce_stream
    EXPECT_TRUE(s.happens_before(rs, ar));               // all_reduce_stream.wait_stream(reduce_scatter_stream)
    const auto post_reduce = seq(Kind::kOp, "all_reduce", "post-reduce " + label);
    EXPECT_TRUE(s.happens_before(ar, post_reduce));
    EXPECT_TRUE(s.happens_before(post_reduce, norm_wait));
    if (u == 0) continue;
    // Neither the next group's backward nor its reduce-scatter copy-in waits for this all-reduce.
    const std::string prev = "unit" + std::to_string(u - 1);
    EXPECT_FALSE(s.happens_before(ar, seq(Kind::kOp, "compute", "backward " + prev))) << s.dump();
    EXPECT_FALSE(s.happens_before(ar, seq(Kind::kOp, "compute", "reduce_scatter copy-in " + prev)));
    EXPECT_TRUE(s.happens_before(rs, seq(Kind::kOp, "compute", "reduce_scatter copy-in " + prev)));
  }
  // Every wait on an all-reduce collective is on the all-reduce stream (except the norm's own).
  for (const auto& e : s.log())
    if (e.kind == Kind::kWaitCollective && s.log()[size_t(e.target)].label.rfind("all_reduce:unit", 0) == 0) {
      EXPECT_EQ(e.stream, "all_reduce");
    }
}
