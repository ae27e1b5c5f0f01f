// harness.cpp — lockstep timing under Google Benchmark (see harness.hpp).
#include "analysis/micro/harness.hpp"

#include <benchmark/benchmark.h>

#include "runtime/errors.hpp"

namespace zb::analysis::micro {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "fp32";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    case at::kByte: return "u8";  // micro --for's offload copies of a byte count that is no whole fp32
    default: return c10::toString(t);
  }
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "fp32") return at::kFloat;
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  throw UsageError("dtype '" + name + "' must be fp32, bf16 or fp16");
}

Harness::Harness(const runtime::World& world)
    : world_(world),
      side_(world.size > 1 ? world.side_channel() : world),
      comm_(world),
      timer_(runtime::make_region_timer(world.device)) {}

double Harness::max_over_ranks(double v) {
  if (world_.size == 1) return v;
  auto t = at::full({1}, v, at::TensorOptions().dtype(at::kDouble).device(world_.device));
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  side_.pg->allreduce(ts, opts)->wait();
  return t.cpu().item<double>();
}

double Harness::time_iteration(const std::function<void()>& fn) {
  timer_->start();
  fn();
  return max_over_ranks(timer_->stop_s());
}

void Harness::barrier() { max_over_ranks(0.0); }

double Harness::run_loop(benchmark::State& state, const std::function<void()>& fn) {
  barrier();
  double total = 0;
  for (auto _ : state) {
    const double t = time_iteration(fn);
    state.SetIterationTime(t);
    total += t;
  }
  return state.iterations() > 0 ? total / double(state.iterations()) : 0.0;
}

std::vector<int64_t> collective_sizes(int64_t min_bytes, int64_t max_bytes) {
  std::vector<int64_t> out;
  for (int64_t s = min_bytes; s <= max_bytes; s *= 4) out.push_back(s);
  return out;
}

}  // namespace zb::analysis::micro
