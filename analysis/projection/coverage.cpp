// coverage.cpp — the sizes a projected step needs and whether a calibration covers them (see coverage.hpp).
#include "analysis/projection/coverage.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace zb::analysis::projection {

namespace {
std::string range_text(int64_t lo, int64_t hi, const char* unit) {
  return lo == hi ? std::to_string(lo) + " " + unit : std::to_string(lo) + " to " + std::to_string(hi) + " " + unit;
}

// `need` sizes outside [min, max] (with the tolerance): "" when none.
std::string outside(const std::set<int64_t>& need, int64_t min, int64_t max, const char* unit) {
  int64_t lo = 0, hi = 0, n = 0;
  for (const int64_t s : need)
    if (!in_range(s, min, max)) {
      lo = n ? std::min(lo, s) : s;
      hi = n ? std::max(hi, s) : s;
      ++n;
    }
  if (n == 0) return "";
  if (n == int64_t(need.size())) return n == 1 ? "outside it" : "all outside it";
  return std::to_string(n) + " outside it: " + range_text(lo, hi, unit);
}

template <class V>
std::pair<int64_t, int64_t> key_range(const std::map<int64_t, V>& m) {
  return m.empty() ? std::pair<int64_t, int64_t>{0, 0} : std::pair{m.begin()->first, m.rbegin()->first};
}
}  // namespace

StepSizes step_sizes(ScheduleInput in) {
  // Zero compute; copies at 1 GB/s and the host optimizer at 1 ns per parameter, so that the
  // program's only compute time is the host optimizer's parameters x 1e-9 s.
  in.costs = UnitCosts{};
  in.costs.forward_s.assign(size_t(in.model.layers + 1), 0.0);
  in.costs.backward_s.assign(size_t(in.model.layers + 1), 0.0);
  in.offload.h2d_gbps = in.offload.d2h_gbps = 1.0;
  in.offload.host_adam_ns_per_param = 1.0;
  StepSizes out;
  std::map<std::tuple<int, std::string, int>, size_t> index;
  const auto program =
      build_program(in, [&](CollectiveKind kind, const std::string& dtype, int64_t bytes, int world, int) {
        if (world > 1) {
          const auto key = std::make_tuple(int(kind), dtype, world);
          auto it = index.find(key);
          if (it == index.end()) {
            it = index.emplace(key, out.collectives.size()).first;
            out.collectives.push_back({kind, dtype, world, {}});
          }
          out.collectives[it->second].bytes.insert(bytes);
        }
        return 0.0;
      });
  double compute_s = 0;
  for (const auto& a : program.actions()) {
    if (a.kind == backends::common::Action::kCopy) (a.to_device ? out.h2d_bytes : out.d2h_bytes).insert(a.bytes);
    if (a.kind == backends::common::Action::kCompute) compute_s += a.duration_s;
  }
  out.host_optimizer_params = int64_t(std::llround(compute_s * 1e9));
  return out;
}

std::string uncovered(const Calibration& cal, const StepSizes& need, const std::string& remedy) {
  if (cal.preset) return "";
  const std::string cal_name = "the calibration (" + cal.source + ")";
  for (const auto& c : need.collectives) {
    const char* kind = backends::common::collective_name(c.kind);
    const std::string what = std::string(kind) + " " + c.dtype;
    const auto* f = cal.nearest_fit(c.kind, c.dtype, c.world);
    const auto [lo, hi] = std::pair{*c.bytes.begin(), *c.bytes.rbegin()};
    const std::string needs = "this step needs " + what + " at W=" + std::to_string(c.world) + " of " +
                              range_text(lo, hi, "bytes") + " (" + std::to_string(c.bytes.size()) + " sizes)";
    if (!f || f->dtype != c.dtype)
      return cal_name + " has no " + what + " measurements; " + needs + "; " + remedy;
    if (f->max_bytes <= 0)
      return cal_name + " records no measured size range for " + what + " (re-fit it from a micro run); " + needs +
             "; " + remedy;
    const auto out = outside(c.bytes, f->min_bytes, f->max_bytes, "bytes");
    if (!out.empty())
      return cal_name + " measured " + what + " at W=" + std::to_string(f->world_size) + " from " +
             range_text(f->min_bytes, f->max_bytes, "bytes") + "; " + needs + ", " + out + "; " + remedy;
  }
  for (const bool to_device : {true, false}) {
    const auto& want = to_device ? need.h2d_bytes : need.d2h_bytes;
    if (want.empty()) continue;
    const auto [lo, hi] = key_range(to_device ? cal.offload_sizes.h2d_s : cal.offload_sizes.d2h_s);
    const char* dir = to_device ? "host-to-device" : "device-to-host";
    const std::string needs = "this step copies " + range_text(*want.begin(), *want.rbegin(), "bytes") + " " + dir + " (" +
                              std::to_string(want.size()) + " sizes)";
    if (hi == 0) return cal_name + " has no measured " + dir + " copy sizes; " + needs + "; " + remedy;
    const auto out = outside(want, lo, hi, "bytes");
    if (!out.empty())
      return cal_name + " measured " + dir + " copies of " + range_text(lo, hi, "bytes") + "; " + needs + ", " + out +
             "; " + remedy;
  }
  if (need.host_optimizer_params > 0) {
    const auto [lo, hi] = key_range(cal.offload_sizes.host_adam_ns);
    const std::string needs = "this step's host AdamW updates " + std::to_string(need.host_optimizer_params) + " parameters";
    if (hi == 0) return cal_name + " has no measured host AdamW sizes; " + needs + "; " + remedy;
    if (!in_range(need.host_optimizer_params, lo, hi))
      return cal_name + " measured host AdamW on " + range_text(lo, hi, "parameters") + "; " + needs + "; " + remedy;
  }
  return "";
}

}  // namespace zb::analysis::projection
