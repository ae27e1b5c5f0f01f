// offload.cpp — the offload benchmarks, all ranks at once (each rank its own copies, as every rank
// of a node offloads together and shares the host's memory bandwidth and PCIe root complexes):
//   offload/h2d/<dtype>/numel:N         one unit's flat shard host -> device (pinned host buffer on
//                                       CUDA: backends/common/host_offload.hpp host_empty + HostCopies)
//   offload/d2h/<dtype>/numel:N         device -> host, the gradient copy-out
//   offload/host_adamw/fp32/numel:N     one AdamW step on host fp32 tensors (common/optim.hpp
//                                       AdamW (fused): at::_fused_adamw_ on CPU), the host optimizer
// Counters: bytes and GBps for the copies, params and ns_per_param for the host optimizer; the
// projection's calibration reads them (calibration.hpp OffloadFit). On a CPU-only machine both
// buffers are host memory: the copies are memcpy, the figure a host-to-host bandwidth.
#include <benchmark/benchmark.h>

#include "analysis/micro/harness.hpp"
#include "backends/common/host_offload.hpp"
#include "backends/common/optim.hpp"

namespace zb::analysis::micro {

namespace {
void register_copy(Harness& h, bool to_device, at::ScalarType dtype, int64_t numel) {
  const std::string d = dtype_name(dtype);
  const std::string name = std::string("offload/") + (to_device ? "h2d/" : "d2h/") + d + "/numel:" + std::to_string(numel);
  const int64_t bytes = numel * int64_t(c10::elementSize(dtype));
  benchmark::RegisterBenchmark(name.c_str(),
                               [&h, to_device, dtype, numel, bytes, d](benchmark::State& state) {
                                 auto host = backends::common::host_empty({numel}, dtype, true, h.device());
                                 host.fill_(1);
                                 auto dev = at::ones({numel}, at::TensorOptions().dtype(dtype).device(h.device()));
                                 backends::common::HostCopies copies;
                                 auto op = [&] { to_device ? copies.to_device(dev, host) : copies.to_host(host, dev); };
                                 op();  // warm-up
                                 const double per_op = h.run_loop(state, op);
                                 state.counters["bytes"] = double(bytes);
                                 state.counters["GBps"] = per_op > 0 ? double(bytes) / per_op / 1e9 : 0.0;
                                 state.SetLabel(d);
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

void register_host_adamw(Harness& h, int64_t numel) {
  const std::string name = "offload/host_adamw/fp32/numel:" + std::to_string(numel);
  benchmark::RegisterBenchmark(name.c_str(),
                               [&h, numel](benchmark::State& state) {
                                 const auto opts = at::TensorOptions().dtype(at::kFloat);  // host
                                 auto param = at::ones({numel}, opts), grad = at::full({numel}, 1e-3, opts);
                                 backends::common::AdamW adam({param}, {});
                                 auto op = [&] { adam.step({grad}, backends::StepHyper{1e-4, 0.9, 0.999}); };
                                 op();  // warm-up
                                 const double per_op = h.run_loop(state, op);
                                 state.counters["params"] = double(numel);
                                 state.counters["ns_per_param"] = per_op > 0 ? per_op / double(numel) * 1e9 : 0.0;
                                 state.SetLabel("fp32");
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}
}  // namespace

void register_offload_benchmarks(Harness& h, const SuiteOptions& o) {
  if (o.exact) {  // micro --for: each copy size of the run (bytes, as fp32 elements where whole), its host AdamW
    for (const bool to_device : {true, false})
      for (const int64_t bytes : to_device ? o.exact->h2d_bytes : o.exact->d2h_bytes)
        register_copy(h, to_device, bytes % 4 == 0 ? at::kFloat : at::kByte, bytes % 4 == 0 ? bytes / 4 : bytes);
    if (o.exact->host_adam_params > 0) register_host_adamw(h, o.exact->host_adam_params);
    return;
  }
  // One decoder block's parameters over W (a rank's shard of a unit, what each copy moves).
  int64_t block = 0;
  for (const auto& p : models::unit_specs(o.model, o.model.layers > 0 ? 1 : models::kRootUnit)) block += p.numel();
  const int64_t shard = (block + h.size() - 1) / h.size();
  for (const auto dtype : o.dtypes)
    for (const bool to_device : {true, false}) register_copy(h, to_device, dtype, shard);
  register_host_adamw(h, shard);
}

}  // namespace zb::analysis::micro
