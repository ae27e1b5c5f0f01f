// compute.cpp — the compute benchmarks, all ranks computing at once (as in training), each
// iteration's time the max over ranks:
//   gemm/<dtype>/<shape>/m:../n:../k:..  the model's own matmul shapes (gemm.hpp) and the square
//                                        shape `zerobench run` probes for its peak; counter tflops
//   copy/<dtype>/unit_flat/numel:N       one unit's flat buffer copied whole (FSDP-mode's
//                                        unshard at W=1, NO_SHARD's compute copy)
//   copy/<dtype>/grouped_out/numel:N     ZeRO3-mode's copy-out of a coalesced all-gather: a
//                                        [W, sum P_i] buffer into each parameter's [W, P_i]
//   copy/<dtype>/grouped_in/numel:N      ZeRO3-mode's bucket fill: each gradient [W, P_i] into
//                                        a [W, sum P_i] buffer, then divided by W
//   cast/<from>_to_<to>/numel:N          FSDP-mode mixed's _mp_shard cast and gradient casts
// Copy and cast counters: bytes (read + written per op) and GBps (1e9 bytes/s). N is a decoder
// block's (and the root unit's) parameter count, the sizes the engines move.
#include <benchmark/benchmark.h>

#include "analysis/micro/gemm.hpp"
#include "analysis/micro/harness.hpp"

namespace zb::analysis::micro {

namespace {
void register_gemm(Harness& h, at::ScalarType dtype, const GemmShape& s) {
  const std::string name = "gemm/" + dtype_name(dtype) + "/" + s.name + "/m:" + std::to_string(s.m) +
                           "/n:" + std::to_string(s.n) + "/k:" + std::to_string(s.k);
  benchmark::RegisterBenchmark(name.c_str(),
                               [&h, dtype, s](benchmark::State& state) {
                                 Gemm gemm(h.device(), dtype, s);
                                 gemm.run();  // warm-up (the probe in gemm.cpp does the same)
                                 const double per_op = h.run_loop(state, [&] { gemm.run(); });
                                 state.counters["flops"] = s.flops();
                                 state.counters["tflops"] = per_op > 0 ? s.flops() / per_op / 1e12 : 0.0;
                                 state.SetLabel(dtype_name(dtype));
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

// A memory-bound op: bytes read + written per call, and the call.
void register_memory(Harness& h, const std::string& name, const std::string& label, int64_t bytes,
                     std::function<std::function<void()>(at::Device)> make) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [&h, bytes, make, label](benchmark::State& state) {
                                 auto op = make(h.device());
                                 op();  // warm-up
                                 const double per_op = h.run_loop(state, op);
                                 state.counters["bytes"] = double(bytes);
                                 state.counters["GBps"] = per_op > 0 ? double(bytes) / per_op / 1e9 : 0.0;
                                 state.SetLabel(label);
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

// The parameter numels of one unit (a decoder block, or the root when the model has none).
std::vector<int64_t> unit_param_numels(const models::ModelConfig& cfg, int unit) {
  std::vector<int64_t> out;
  for (const auto& p : models::unit_specs(cfg, unit)) out.push_back(p.numel());
  return out;
}
}  // namespace

void register_compute_benchmarks(Harness& h, const SuiteOptions& o) {
  const int w = h.size();
  register_offload_benchmarks(h, o);  // host<->device copies and the host optimizer (offload.cpp)
  if (o.exact) {  // micro --for: the projection reads only the square GEMM (its CPU contention probe)
    register_gemm(h, o.exact->gemm_dtype, peak_probe_shape(h.device(), o.exact->gemm_dtype));
    return;
  }
  for (const auto dtype : o.dtypes) {
    register_gemm(h, dtype, peak_probe_shape(h.device(), dtype));
    if (!o.quick)
      for (const auto& s : model_gemm_shapes(o.model, o.tokens)) register_gemm(h, dtype, s);
  }
  std::vector<int> units = {o.model.layers > 0 ? 1 : 0};
  if (!o.quick) units.push_back(models::kRootUnit);
  for (const int unit : units) {
    const auto numels = unit_param_numels(o.model, unit);
    int64_t total = 0, part_total = 0;
    for (auto n : numels) {
      total += n;
      part_total += (n + w - 1) / w;
    }
    for (const auto dtype : o.dtypes) {
      const int64_t e = int64_t(c10::elementSize(dtype));
      const std::string d = dtype_name(dtype);
      register_memory(h, "copy/" + d + "/unit_flat/numel:" + std::to_string(total), d, 2 * total * e,
                      [total, dtype](at::Device dev) {
                        auto src = at::ones({total}, at::TensorOptions().dtype(dtype).device(dev));
                        auto dst = at::empty_like(src);
                        return std::function<void()>([src, dst]() mutable { dst.copy_(src); });
                      });
      const int64_t grouped = int64_t(w) * part_total;  // [W, sum P_i]
      register_memory(h, "copy/" + d + "/grouped_out/numel:" + std::to_string(grouped), d, 2 * grouped * e,
                      [numels, w, part_total, dtype](at::Device dev) {
                        const auto opts = at::TensorOptions().dtype(dtype).device(dev);
                        auto flat = at::ones({w, part_total}, opts);
                        std::vector<at::Tensor> fulls;
                        for (auto n : numels) fulls.push_back(at::empty({w, (n + w - 1) / w}, opts));
                        return std::function<void()>([flat, fulls]() mutable {
                          int64_t off = 0;
                          for (auto& f : fulls) {
                            f.copy_(flat.narrow(1, off, f.size(1)));
                            off += f.size(1);
                          }
                        });
                      });
      register_memory(h, "copy/" + d + "/grouped_in/numel:" + std::to_string(grouped), d, 4 * grouped * e,
                      [numels, w, part_total, dtype](at::Device dev) {
                        const auto opts = at::TensorOptions().dtype(dtype).device(dev);
                        auto flat = at::empty({w, part_total}, opts);
                        std::vector<at::Tensor> grads;
                        for (auto n : numels) grads.push_back(at::ones({w, (n + w - 1) / w}, opts));
                        return std::function<void()>([flat, grads, w]() mutable {
                          int64_t off = 0;
                          for (auto& g : grads) {
                            flat.narrow(1, off, g.size(1)).copy_(g);
                            off += g.size(1);
                          }
                          flat.div_(w);
                        });
                      });
    }
    for (const auto& [from, to] : {std::pair{at::kFloat, at::kBFloat16}, std::pair{at::kBFloat16, at::kFloat}}) {
      const int64_t bytes = total * int64_t(c10::elementSize(from) + c10::elementSize(to));
      const std::string name = "cast/" + dtype_name(from) + "_to_" + dtype_name(to) + "/numel:" + std::to_string(total);
      register_memory(h, name, dtype_name(from) + "->" + dtype_name(to), bytes, [total, from, to](at::Device dev) {
        auto src = at::ones({total}, at::TensorOptions().dtype(from).device(dev));
        auto dst = at::empty({total}, at::TensorOptions().dtype(to).device(dev));
        return std::function<void()>([src, dst]() mutable { dst.copy_(src); });
      });
    }
  }
}

}  // namespace zb::analysis::micro
