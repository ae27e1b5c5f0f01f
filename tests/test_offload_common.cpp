// What every offloading engine shares (issue 23), checked without an engine: the host buffers and
// the counted copies (backends/common/host_offload), the estimate's device/host split and the
// pre-flight's host gate (a planted host peak larger than the machine must be refused), the
// projection's copy lanes (hand-built programs with exact answers), the calibration's offload
// rates (fitted from a micro JSON, a preset's PCIe figure, the file round trip), and the report's
// model-state bytes with their host half.
#include <gtest/gtest.h>

#include "analysis/projection/calibration.hpp"
#include "analysis/projection/simulate.hpp"
#include "backends/common/host_offload.hpp"
#include "backends/engine.hpp"
#include "bench/run/preflight.hpp"
#include "runtime/errors.hpp"

using namespace zb;
using backends::common::Action;
using backends::common::ExecModel;
using backends::common::Program;
using nlohmann::json;

TEST(HostOffload, CopiesMoveTheBytesAndCountThem) {
  const auto host = backends::common::host_empty({1000}, at::kFloat, /*pin=*/true, at::kCPU);
  EXPECT_TRUE(host.device().is_cpu());
  EXPECT_FALSE(host.is_pinned());  // pinning needs a CUDA device: on CPU an ordinary buffer
  auto dev = at::arange(1000, at::kFloat);
  backends::common::HostCopies copies;
  copies.to_host(host, dev);
  EXPECT_TRUE(at::equal(host, dev));
  EXPECT_NE(host.data_ptr(), dev.data_ptr());  // a separate buffer, not an alias
  auto back = at::zeros({1000}, at::kFloat);
  copies.to_device(back, host);
  EXPECT_TRUE(at::equal(back, dev));
  const auto t = copies.traffic();
  EXPECT_EQ(t.d2h_bytes, 4000);
  EXPECT_EQ(t.h2d_bytes, 4000);
  EXPECT_EQ(t.d2h_copies, 1);
  EXPECT_EQ(t.h2d_copies, 1);
  const auto d = copies.traffic() - backends::common::OffloadTraffic{1000, 0, 1, 0};
  EXPECT_EQ(d.h2d_bytes, 3000);
  EXPECT_EQ(d.h2d_copies, 0);
  // bf16 halves the bytes.
  auto h16 = backends::common::host_empty({10}, at::kBFloat16, false, at::kCPU);
  copies.to_host(h16, at::ones({10}, at::kBFloat16));
  EXPECT_EQ(copies.traffic().d2h_bytes, 4020);
}

namespace {
backends::PeakEstimate offload_estimate(bool host_is_device) {
  backends::PeakEstimate e;
  e.terms = {{"params", "resident", 100, ""},
             {"activations", "forward_backward", 50, ""},
             {"host optimizer states", "resident", 400, "", "host"},
             {"host grads", "optimizer_step", 30, "", "host"},
             {"grads", "end_of_backward", 20, ""}};
  e.host_is_device = host_is_device;
  return e;
}
}  // namespace

TEST(OffloadEstimate, DevicePeakExcludesHostTermsUnlessTheyShareItsMemory) {
  const auto gpu = offload_estimate(false);
  EXPECT_EQ(gpu.peak_bytes(), 150);       // params + activations (loss head / backward)
  EXPECT_EQ(gpu.host_peak_bytes(), 430);  // host resident + its optimizer-step moment
  EXPECT_EQ(gpu.phase_bytes("resident", "host"), 400);
  const auto cpu = offload_estimate(true);
  // One memory: resident 500, largest moment: optimizer_step 30 vs loss head 50 -> 550.
  EXPECT_EQ(cpu.peak_bytes(), 550);
  EXPECT_EQ(cpu.peak_phase(), "loss_head");
  const json j = backends::to_json(gpu);
  EXPECT_EQ(j["host_peak_bytes"], 430);
  EXPECT_EQ(j["peak_includes_host"], false);
  EXPECT_EQ(j["terms"][2]["location"], "host");
  EXPECT_FALSE(j["terms"][0].contains("location"));
  // Without host terms the JSON is what it always was.
  backends::PeakEstimate plain;
  plain.terms = {{"params", "resident", 100, ""}};
  EXPECT_FALSE(backends::to_json(plain).contains("host_peak_bytes"));
}

TEST(OffloadEstimate, PreflightRefusesAHostPeakTheMachineCannotHold) {
  const auto e = offload_estimate(false);
  // 8 ranks x 430 host bytes = 3440: fits in 4000, not in 3000 (the planted small machine).
  EXPECT_NO_THROW(bench::check_estimate_fits(e, 8, at::kCPU, true, 4000));
  try {
    bench::check_estimate_fits(e, 8, at::kCPU, true, 3000);
    FAIL() << "a host peak larger than MemAvailable was let through";
  } catch (const UsageError& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("host memory for offloaded states"), std::string::npos) << m;
    EXPECT_NE(m.find("host optimizer states"), std::string::npos) << m;  // the largest host term
    EXPECT_NE(m.find("MemAvailable"), std::string::npos) << m;
  }
  // The device check ignores host terms on a GPU run: 150 fits in 200.
  EXPECT_NO_THROW(bench::check_estimate_fits(e, 1, at::Device(at::kCUDA, 0), false, 200));
  EXPECT_THROW(bench::check_estimate_fits(e, 1, at::Device(at::kCUDA, 0), false, 149), UsageError);
  EXPECT_NO_THROW(bench::check_estimate_fits(e, 1, at::kCPU, false, -1));  // unknown: no check
}

TEST(OffloadProjection, CopiesRunOnTheirOwnLanesOnTheDeviceAndOnTheHostOnCpu) {
  Program p;
  const int h2d = p.copy(true, "unit1 shard", 1000, 2.0, false);
  p.compute("F0", 3.0);  // overlaps the copy on CUDA
  p.wait(h2d);
  p.compute("F1", 1.0);
  const int d2h = p.copy(false, "unit1 grad", 1000, 4.0, /*after_compute=*/true);
  const int h2d2 = p.copy(true, "unit2 shard", 1000, 1.0, false);  // the other direction's lane
  p.host_wait(d2h);
  p.host_wait(h2d2);
  const auto gpu = analysis::projection::simulate(p, ExecModel::kAsyncDevice);
  // h2d [0,2] under F0 [0,3]; F1 [3,4]; d2h after F1 [4,8]; the second h2d [2,3] (its lane free at 2).
  EXPECT_DOUBLE_EQ(gpu.step_s, 8.0);
  EXPECT_DOUBLE_EQ(gpu.copy_s, 3.0 + 4.0);  // [0,3] (two h2d back to back) and [4,8]
  EXPECT_DOUBLE_EQ(gpu.exposed_copy_s, 4.0);  // the d2h after the last compute
  EXPECT_DOUBLE_EQ(gpu.compute_s, 4.0);
  const auto cpu = analysis::projection::simulate(p, ExecModel::kHostIsDevice);
  EXPECT_DOUBLE_EQ(cpu.step_s, 2.0 + 3.0 + 1.0 + 4.0 + 1.0);  // the training thread does every copy
  EXPECT_DOUBLE_EQ(cpu.exposed_copy_s, 7.0);
  int copies = 0;
  for (const auto& s : gpu.spans) copies += s.copy ? 1 : 0;
  EXPECT_EQ(copies, 3);
}

TEST(OffloadProjection, RatesComeFromMicroOrAPresetAndRefuseWhenUnknown) {
  const json micro = {
      {"context", {{"zerobench_device", "cpu"}, {"zerobench_world_size", "2"}}},
      {"benchmarks",
       {{{"name", "all_reduce/fp32/W:2/bytes:1024"}, {"run_type", "iteration"}, {"real_time", 10.0},
         {"time_unit", "us"}, {"busbw", 1.0}, {"bytes", 1024.0}, {"world_size", 2.0}},
        {{"name", "all_reduce/fp32/W:2/bytes:4096"}, {"run_type", "iteration"}, {"real_time", 20.0},
         {"time_unit", "us"}, {"busbw", 1.0}, {"bytes", 4096.0}, {"world_size", 2.0}},
        {{"name", "offload/h2d/fp32/numel:100"}, {"run_type", "iteration"}, {"real_time", 1.0}, {"GBps", 8.0}},
        {{"name", "offload/h2d/bf16/numel:100"}, {"run_type", "iteration"}, {"real_time", 1.0}, {"GBps", 6.0}},
        {{"name", "offload/d2h/fp32/numel:100"}, {"run_type", "iteration"}, {"real_time", 1.0}, {"GBps", 5.0}},
        {{"name", "offload/host_adamw/fp32/numel:100"}, {"run_type", "iteration"}, {"real_time", 1.0},
         {"ns_per_param", 2.5}}}}};
  const auto c = analysis::projection::Calibration::fit(micro, "micro.json");
  EXPECT_DOUBLE_EQ(c.offload.h2d_gbps, 7.0);  // median of 8 and 6
  EXPECT_DOUBLE_EQ(c.offload.d2h_gbps, 5.0);
  EXPECT_DOUBLE_EQ(c.offload.host_adam_ns_per_param, 2.5);
  EXPECT_DOUBLE_EQ(c.offload.copy_s(true, 7'000'000'000), 1.0);
  EXPECT_DOUBLE_EQ(c.offload.host_optimizer_s(400'000'000), 1.0);
  const auto back = analysis::projection::Calibration::from_json(c.to_json());
  EXPECT_DOUBLE_EQ(back.offload.d2h_gbps, 5.0);
  EXPECT_DOUBLE_EQ(back.offload.host_adam_ns_per_param, 2.5);

  const auto a100 = analysis::projection::Calibration::load("a100-nvlink");
  EXPECT_DOUBLE_EQ(a100.offload.h2d_gbps, 32.0);
  EXPECT_DOUBLE_EQ(a100.offload.copy_s(false, 32'000'000'000), 1.0);
  EXPECT_THROW(a100.offload.host_optimizer_s(1), UsageError);  // a preset has no host optimizer rate
  EXPECT_THROW(backends::common::OffloadRates{}.copy_s(true, 1), UsageError);
}

TEST(OffloadBytes, TheHostHalfIsReportedOnlyWhenSomethingIsOffloaded) {
  backends::ModelStateBytes b{10, 0, 10, 20, 0, {}};
  EXPECT_FALSE(backends::to_json(b).contains("host"));
  b.host.optimizer = 40;
  b.host.master_params = 20;
  b.host.pinned = true;
  const json j = backends::to_json(b);
  EXPECT_EQ(j["host"]["optimizer"], 40);
  EXPECT_EQ(j["host"]["pinned"], true);
  EXPECT_EQ(b.total(), 40);
  EXPECT_EQ(b.all_total(), 100);
  auto c = b;
  c.host.pinned = false;
  EXPECT_FALSE(b == c);  // where the bytes live is part of the closed form
}

// The projection's FSDP1 CPUOffload schedule (backends/fsdp/fsdp_program.cpp) copies exactly what
// the engine copies: per step, every copy's bytes and count each way equal the closed form the
// engine's traffic is tested against (fsdp_offload_estimate.hpp offload_traffic_per_step), for
// each strategy, accumulation, prefetch mode and precision; the host optimizer takes the shard
// at the calibration's rate, and a calibration without one is refused.
#include "backends/backend_info.hpp"
#include "backends/fsdp/fsdp_offload_estimate.hpp"

TEST(OffloadProjection, FsdpProgramCopiesWhatTheEngineCopies) {
  int checked = 0;
  for (const char* strategy : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"})
    for (const char* prefetch : {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"})
      for (const int64_t accum : {1, 2})
        for (const char* precision : {"mixed", "low"})
          for (const bool fwd_prefetch : {false, true}) {
            backends::EngineSpec spec;
            spec.model = models::preset("tiny");
            spec.precision = precision;
            spec.train.grad_accum = accum;
            spec.options = {{"sharding_strategy", strategy}, {"backward_prefetch", prefetch},
                            {"forward_prefetch", fwd_prefetch}, {"offload_params", true}};
            const backends::Topology topo(2);
            const auto want = backends::fsdp::offload_traffic_per_step(spec, topo, 0);
            backends::common::ProgramInput in;
            in.backend = "fsdp";
            in.precision = precision;
            in.options = spec.options.json();
            in.model = spec.model;
            in.train = spec.train;
            in.world = 2;
            in.exec = ExecModel::kAsyncDevice;
            in.costs.forward_s.assign(size_t(spec.model.layers + 1), 1e-3);
            in.costs.backward_s.assign(size_t(spec.model.layers + 1), 2e-3);
            in.offload = {1.0, 1.0, 1.0, "test"};
            const auto& b = backends::backend("fsdp");
            const auto prog =
                b.analysis.projection.program(in, [](auto, const std::string&, int64_t, int, int) { return 1e-4; });
            backends::common::OffloadTraffic got;
            bool host_optimizer = false;
            for (const auto& a : prog.actions()) {
              if (a.kind == Action::kCopy) {
                (a.to_device ? got.h2d_bytes : got.d2h_bytes) += a.bytes;
                ++(a.to_device ? got.h2d_copies : got.d2h_copies);
              }
              host_optimizer = host_optimizer || a.name == "host optimizer";
            }
            const std::string what = std::string(strategy) + " " + prefetch + " accum " + std::to_string(accum) + " " +
                                     precision + (fwd_prefetch ? " forward_prefetch" : "");
            EXPECT_EQ(got.h2d_bytes, want.h2d_bytes) << what;
            EXPECT_EQ(got.h2d_copies, want.h2d_copies) << what;
            EXPECT_EQ(got.d2h_bytes, want.d2h_bytes) << what;
            EXPECT_EQ(got.d2h_copies, want.d2h_copies) << what;
            EXPECT_TRUE(host_optimizer) << what;
            const auto tl = analysis::projection::simulate(prog, ExecModel::kAsyncDevice);
            EXPECT_GT(tl.copy_s, 0) << what;
            ++checked;
          }
  EXPECT_EQ(checked, 72);
  // Without a host optimizer rate (a preset) the projection refuses instead of guessing.
  backends::common::ProgramInput in;
  in.backend = "fsdp";
  in.precision = "mixed";
  in.options = {{"offload_params", true}};
  in.model = models::preset("tiny");
  in.world = 2;
  in.costs.forward_s.assign(size_t(in.model.layers + 1), 1e-3);
  in.costs.backward_s.assign(size_t(in.model.layers + 1), 1e-3);
  in.offload = {32, 32, 0, "preset"};
  EXPECT_THROW(backends::backend("fsdp").analysis.projection.program(
                   in, [](auto, const std::string&, int64_t, int, int) { return 0.0; }),
               UsageError);
}
