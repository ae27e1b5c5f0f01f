// CUDA path: the stream layer on real CUDA streams, the engines on one GPU over NCCL (W = 1)
// against the same run on CPU, NCCL collective timing, and the CUPTI tracer. Every test skips
// with a visible reason when this build has no CUDA path or no GPU is visible
// (scripts/gpu-check.sh runs them on a GPU machine).
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include "backends/common/comm.hpp"
#include "backends/common/streams.hpp"
#include "profiler/tracer.hpp"
#include "runtime/device.hpp"
#include "runtime/world.hpp"
#include "tests/thread_world.hpp"

using namespace zb;

namespace {
#define ZB_REQUIRE_GPU()                                                                                 \
  do {                                                                                                   \
    if (!runtime::cuda_built()) GTEST_SKIP() << "this build has no CUDA path (-DZEROBENCH_CUDA=OFF)";  \
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device is visible: CUDA test not run";     \
  } while (0)

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
  if (!profiler::cupti_built()) GTEST_SKIP() << "CUPTI tracer not built";
  auto tracer = profiler::make_cupti_tracer();
  tracer->start();
  auto a = at::randn({1024, 1024}, at::TensorOptions().device(at::kCUDA));
  auto b = at::mm(a, a);
  runtime::synchronize(a.device());
  tracer->stop();
  const auto acts = tracer->take();
  int kernels = 0;
  for (const auto& x : acts) kernels += x.kind == profiler::ActivityKind::kKernel;
  EXPECT_GT(kernels, 0);
}
