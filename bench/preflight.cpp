// preflight.cpp — see preflight.hpp.
#include "backends/backend_info.hpp"
#include "bench/preflight.hpp"

#include <algorithm>
#include <cstdio>

#include "runtime/errors.hpp"
#include "runtime/memory.hpp"

namespace zb::bench {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

void check_memory(const std::string& backend, const backends::EngineSpec& spec, const backends::Topology& topo,
                  int ranks_sharing, at::Device device) {
  const auto& info = backends::backend(backend);
  if (!info.estimate_peak) return;
  // Ranks differ only in padding ownership: the first and the last bound them.
  auto estimate = info.estimate_peak(spec, topo, 0, device.is_cpu());
  if (topo.world > 1) {
    auto last = info.estimate_peak(spec, topo, topo.world - 1, device.is_cpu());
    if (last.peak_bytes() > estimate.peak_bytes()) estimate = last;
  }
  int64_t total = -1;
  const int64_t available = runtime::available_bytes(device, &total);
  if (available < 0) return;
  const double need = double(estimate.peak_bytes()) * double(std::max(1, ranks_sharing));
  if (need <= double(available)) return;
  const backends::PeakEstimate::Term* largest = nullptr;
  for (const auto& t : estimate.terms)
    if (!largest || t.bytes > largest->bytes) largest = &t;
  std::string msg = "memory pre-flight: each rank needs an estimated " + human_bytes(double(estimate.peak_bytes())) +
                    " at its peak (" + estimate.peak_phase();
  if (largest) msg += "; largest term " + largest->name + " " + human_bytes(double(largest->bytes));
  msg += ")";
  if (ranks_sharing > 1) msg += " x " + std::to_string(ranks_sharing) + " ranks on this " +
                                (device.is_cuda() ? std::string("GPU") : std::string("machine")) + " = " + human_bytes(need);
  msg += ", but " + human_bytes(double(available)) + " is available (" +
         (device.is_cuda() ? std::string("cudaMemGetInfo free") : std::string("MemAvailable")) +
         "); pass --no-memory-check to try anyway";
  throw UsageError(msg);
}

}  // namespace zb::bench
