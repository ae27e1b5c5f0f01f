// CUDA path: the stream layer on real CUDA streams, the engines on one GPU over NCCL (W = 1)
// against the same run on CPU, NCCL collective timing, and the CUPTI tracer. Every test skips
// with a visible reason when this build has no CUDA path or no GPU is visible — and fails instead
// under ZEROBENCH_REQUIRE_GPU=1 (scripts/gpu-first.sh sets it: there a skip would hide a gate).
// The gates of gpu-first's cuda-tests cell (CudaEnvironment, CudaComm, CudaTimer, CudaMemory) are here.
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "backends/backend_info.hpp"
#include "backends/common/comm.hpp"
#include "backends/common/streams.hpp"
#include "profiler/activity.hpp"
#include "profiler/nvtx_capture.hpp"
#include "profiler/tracer.hpp"
#include "runtime/device.hpp"
#include "runtime/env_gate.hpp"
#include "runtime/memory.hpp"
#include "runtime/world.hpp"
#include "tests/gpu_required.hpp"
#include "tests/thread_world.hpp"

using namespace zb;

namespace {
// One rank on GPU 0 over NCCL (a 1-rank process group on a HashStore).
runtime::World gpu_world() {
  auto store = c10::make_intrusive<c10d::HashStore>();
  return runtime::init_world_on_store(store, 0, 1, runtime::pick_device("cuda", 0), std::chrono::seconds(60));
}
}  // namespace

TEST(CudaStreams, SideStreamsAreRealAndTheGuardMakesThemCurrent) {
  ZB_REQUIRE_GPU();
  backends::common::Streams s(runtime::pick_device("cuda", 0));
  const auto side = s.create("side");
  EXPECT_NE(s.c10_stream(side), s.c10_stream(s.compute()));
  auto a = at::ones({1 << 20}, at::TensorOptions().device(at::kCUDA));
  at::Tensor b;
  {
    backends::common::Streams::Guard g(s, side);
    const auto dev = runtime::pick_device("cuda", 0);
    EXPECT_EQ(c10::impl::VirtualGuardImpl(dev.type()).getStream(dev), s.c10_stream(side));
    s.wait_stream(side, s.compute());  // `a` was written on the compute stream
    b = a * 2;
    s.record_stream(b, s.compute());
  }
  EXPECT_EQ(s.current(), s.compute());
  s.wait_stream(s.compute(), side);
  const auto e = s.record(s.compute());
  s.synchronize(e);
  EXPECT_TRUE(s.query(e));
  EXPECT_EQ(b.sum().item<double>(), 2.0 * (1 << 20));
}

TEST(CudaEngines, Fp32TrainingOnOneGpuMatchesTheCpuRun) {
  ZB_REQUIRE_GPU();
  for (const std::string backend : {"fsdp", "zero3", "ddp", "fsdp2"}) {
    auto spec = test_support::small_spec(2);
    spec.precision = "fp32";
    auto cpu = test_support::train_backend(backend, spec, 1);
    auto world = gpu_world();
    auto engine = backends::create_engine(backend, spec, world);
    auto data = models::make_data_source(spec.train.data, spec.model.vocab, spec.train.seed);
    backends::common::Comm side(world.side_channel());
    auto result = bench::run_training(*engine, spec, *data, side);
    ASSERT_EQ(result.steps.size(), cpu.losses.size()) << backend;
    for (size_t i = 0; i < cpu.losses.size(); ++i)
      EXPECT_NEAR(result.steps[i].loss, cpu.losses[i], 1e-4 * std::abs(cpu.losses[i])) << backend << " step " << i;
    EXPECT_LE(test_support::relative_param_error(engine->full_parameters(), cpu.params), 1e-4) << backend;
    // NCCL collective timing: every collective has a device time (none untimed).
    for (const auto& c : result.comm_total) EXPECT_EQ(c.untimed, 0) << backend << ": " << engine->comm().timing_error();
  }
}

TEST(CudaProfiler, CuptiRecordsKernelsOfAStep) {
  ZB_REQUIRE_GPU();
  if (!profiler::cupti_built()) ZB_SKIP_OR_FAIL("CUPTI tracer not built");
  auto tracer = profiler::make_cupti_tracer();
  const int64_t before_ns = profiler::now_ns();
  tracer->start();
  auto a = at::randn({1024, 1024}, at::TensorOptions().device(at::kCUDA));
  auto b = at::mm(a, a);
  runtime::synchronize(a.device());
  tracer->stop();
  const int64_t after_ns = profiler::now_ns();
  const auto acts = tracer->take();
  int kernels = 0;
  for (const auto& x : acts) {
    kernels += x.kind == profiler::ActivityKind::kKernel;
    // Our steady_clock (the timestamp callback), not the GPU's: inside the host's bounds, with
    // 10 ms for CUPTI's conversion (another clock domain would be off by far more).
    EXPECT_GE(x.start_ns, before_ns - 10'000'000) << x.name;
    EXPECT_LE(x.end_ns, after_ns + 10'000'000) << x.name;
  }
  EXPECT_GT(kernels, 0);
  // Only the enabled kinds arrive, every one timed and readable (cupti_records.hpp's skips are
  // for what should not happen).
  const auto skipped = tracer->skipped_records();
  EXPECT_EQ(skipped.other_kind, 0);
  EXPECT_EQ(skipped.no_timestamp, 0);
  EXPECT_EQ(skipped.unreadable_buffers, 0);
}

// The skip helper itself: under ZEROBENCH_REQUIRE_GPU=1 on a machine without a GPU, the CUDA
// tests must fail, not skip (run here as a child process with the variable set).
TEST(CudaRequireGpu, ASkipBecomesAFailureWhenTheGpuIsRequired) {
  if (runtime::cuda_built() && runtime::cuda_available()) GTEST_SKIP() << "a GPU is visible: nothing would skip";
  const std::string self = "/proc/" + std::to_string(getpid()) + "/exe";
  const auto run = [&](const std::string& env) {
    std::string out;
    FILE* p = popen((env + " '" + self + "' --gtest_filter=CudaProfiler.CuptiRecordsKernelsOfAStep 2>&1").c_str(), "r");
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    const int status = p ? pclose(p) : -1;
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
  };
  const auto skipped = run("ZEROBENCH_REQUIRE_GPU=0");
  EXPECT_EQ(skipped.first, 0) << skipped.second;
  EXPECT_NE(skipped.second.find("[  SKIPPED ]"), std::string::npos) << skipped.second;
  const auto failed = run("ZEROBENCH_REQUIRE_GPU=1");
  EXPECT_NE(failed.first, 0) << failed.second;
  EXPECT_NE(failed.second.find("ZEROBENCH_REQUIRE_GPU=1: a skip fails"), std::string::npos) << failed.second;
}

// Environment gate: CUDA available, exactly one libcudart, libnccl and libcupti in this process
// once CUDA, an NCCL group and the CUPTI tracer are all up (runtime/env_gate.hpp).
TEST(CudaEnvironment, ExactlyOneCudartNcclAndCuptiAreLoaded) {
  ZB_REQUIRE_GPU();
  auto world = gpu_world();
  auto t = at::ones({1024}, at::TensorOptions().device(world.device));
  std::vector<at::Tensor> tensors{t};
  world.pg->allreduce(tensors)->wait();
  std::unique_ptr<profiler::ActivityTracer> tracer;
  if (profiler::cupti_built()) tracer = profiler::make_cupti_tracer();
  const auto maps = runtime::read_self_maps();
  EXPECT_EQ(runtime::check_one_cuda_stack(maps, /*require_each=*/true), "");
  for (const auto& [family, files] : runtime::loaded_cuda_libraries(maps))
    for (const auto& f : files) std::cout << family << ": " << f << "\n";
}

// A W=1 NCCL all-reduce through the process group (Comm): device time > 0 from NCCL's events,
// and CUPTI sees its kernel and classifies it as communication.
TEST(CudaComm, OneRankNcclAllReduceHasDeviceTimeAndCuptiCallsItCommunication) {
  ZB_REQUIRE_GPU();
  if (!profiler::cupti_built()) ZB_SKIP_OR_FAIL("CUPTI tracer not built");
  auto world = gpu_world();
  ASSERT_EQ(world.pg_backend, "nccl");
  backends::common::Comm comm(world);
  auto t = at::ones({int64_t(16) << 20}, at::TensorOptions().device(world.device));  // 64 MiB fp32
  comm.all_reduce_sum(t, "warm-up");  // NCCL's communicator comes up on the first collective
  runtime::synchronize(world.device);
  auto tracer = profiler::make_cupti_tracer();
  tracer->start();
  const auto before = comm.stats();
  comm.all_reduce_sum(t, "gate");
  runtime::synchronize(world.device);
  comm.collect_device_times();
  tracer->stop();
  const auto delta = backends::common::stats_delta(comm.stats(), before);
  const auto& ar = delta[size_t(backends::common::CollectiveKind::kAllReduce)];
  EXPECT_EQ(ar.count, 1);
  EXPECT_EQ(ar.bytes, int64_t(64) << 20);
  EXPECT_EQ(ar.untimed, 0) << comm.timing_error();
  EXPECT_GT(ar.time_s, 0.0) << comm.timing_error();
  int comm_kernels = 0;
  for (const auto& a : tracer->take())
    if (a.kind == profiler::ActivityKind::kKernel && profiler::classify(a) == profiler::KernelClass::kCommunication) {
      ++comm_kernels;
      EXPECT_GT(a.end_ns, a.start_ns) << a.name;
    }
  EXPECT_GE(comm_kernels, 1);
  EXPECT_DOUBLE_EQ(t[0].item<double>(), 1.0);  // a 1-rank sum leaves the values as they were
}

// The event timer against the host's wall clock on a GEMM of known size: the device-side time
// of a long enough region must sit inside the host's bracket of it (sync before and after).
TEST(CudaTimer, EventTimeOfAGemmAgreesWithTheWallClock) {
  ZB_REQUIRE_GPU();
  const auto dev = runtime::pick_device("cuda", 0);
  auto a = at::randn({8192, 8192}, at::TensorOptions().device(dev).dtype(at::kBFloat16));
  auto c = at::mm(a, a);  // warm-up: cuBLAS handle and workspace
  runtime::synchronize(dev);
  auto timer = runtime::make_region_timer(dev);
  const auto w0 = std::chrono::steady_clock::now();
  timer->start();
  for (int i = 0; i < 20; ++i) at::mm_out(c, a, a);  // 20 x 2 x 8192^3 = 22 PFLOP: ~20-60 ms on an H100
  const double event_s = timer->stop_s();
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  EXPECT_GT(event_s, 0.0);
  EXPECT_LE(event_s, wall_s);          // the device cannot take longer than the host waited
  EXPECT_GE(event_s, 0.5 * wall_s);   // and the bracket is mostly GEMM (launches are microseconds)
  std::cout << "20 GEMMs 8192^3 bf16: events " << event_s << " s, wall " << wall_s << " s, "
            << 20 * 2.0 * 8192.0 * 8192.0 * 8192.0 / event_s / 1e12 << " TFLOP/s\n";
}

// Exact allocation accounting: the caching allocator's allocated bytes grow by exactly what
// is allocated (sizes rounded to its 512-byte blocks) and go back exactly on free; the per-step
// peak reset leaves the peak at the current bytes.
TEST(CudaMemory, AllocatedBytesAreExactAndPeaksResetToCurrent) {
  ZB_REQUIRE_GPU();
  const auto dev = runtime::pick_device("cuda", 0);
  runtime::synchronize(dev);
  const int64_t base = runtime::tracked_bytes(dev);
  {
    auto a = at::empty({int64_t(1) << 20}, at::TensorOptions().device(dev).dtype(at::kFloat));  // 4 MiB
    auto b = at::empty({1000}, at::TensorOptions().device(dev).dtype(at::kBFloat16));            // 2000 B -> 2048
    EXPECT_EQ(runtime::tracked_bytes(dev) - base, (int64_t(4) << 20) + 2048);
    runtime::reset_tracked_peak(dev);
    EXPECT_EQ(runtime::tracked_peak_bytes(dev), runtime::tracked_bytes(dev));
    { auto c = at::empty({int64_t(256) << 10}, at::TensorOptions().device(dev).dtype(at::kFloat)); }  // 1 MiB, freed
    EXPECT_EQ(runtime::tracked_peak_bytes(dev) - runtime::tracked_bytes(dev), int64_t(1) << 20);
  }
  EXPECT_EQ(runtime::tracked_bytes(dev), base);
  // The GEMM probe's cached blocks are given back (bench/run/peak.cpp empties the cache after it).
  const auto before = runtime::cuda_memory_stats(dev).reserved_bytes;
  { auto big = at::empty({int64_t(64) << 20}, at::TensorOptions().device(dev).dtype(at::kFloat)); }  // 256 MiB
  EXPECT_GE(runtime::cuda_memory_stats(dev).reserved_bytes - before, int64_t(256) << 20);
  runtime::empty_cuda_cache(dev);
  EXPECT_LE(runtime::cuda_memory_stats(dev).reserved_bytes, before);
}

// Process groups are shut down, not just dropped: the NCCL groups made here are registered for
// the exit handler, and shutting them down empties the registry (ProcessGroupNCCL::shutdown).
TEST(CudaWorld, NcclGroupsAreShutDownAtExit) {
  ZB_REQUIRE_GPU();
  const int before = runtime::live_process_groups();
  auto world = gpu_world();
  auto side = world.side_channel();
  EXPECT_EQ(runtime::live_process_groups(), before + 2);
  runtime::shutdown_process_groups(/*abort=*/false);
  EXPECT_EQ(runtime::live_process_groups(), 0);
}
