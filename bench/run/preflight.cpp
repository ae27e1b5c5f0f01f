// preflight.cpp — see preflight.hpp.
#include "backends/backend_info.hpp"
#include "bench/run/preflight.hpp"

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

int ranks_sharing_gpu(int local_ranks, int gpus, int gpu_index) {
  int sharing = 0;
  for (int r = 0; r < local_ranks; ++r) sharing += gpus > 0 && r % gpus == gpu_index ? 1 : 0;
  return sharing;
}

void check_estimate_fits(const backends::PeakEstimate& estimate, int sharing, at::Device device, bool host,
                         int64_t available) {
  const int64_t peak = host ? estimate.host_peak_bytes() : estimate.peak_bytes();
  if (peak <= 0 || available < 0) return;
  const double need = double(peak) * double(std::max(1, sharing));
  if (need <= double(available)) return;
  const backends::PeakEstimate::Term* largest = nullptr;
  for (const auto& t : estimate.terms)
    if ((t.location == "host") == host && (!largest || t.bytes > largest->bytes)) largest = &t;
  std::string msg = std::string("memory pre-flight: each rank needs an estimated ") + human_bytes(double(peak)) +
                    (host ? " of host memory for offloaded states" : std::string(" at its peak (") + estimate.peak_phase());
  if (largest) msg += std::string(host ? " (" : "; ") + "largest term " + largest->name + " " + human_bytes(double(largest->bytes));
  msg += ")";
  if (sharing > 1)
    msg += " x " + std::to_string(sharing) + " ranks on this " +
           (device.is_cuda() ? std::string("GPU") : std::string("machine")) + " = " + human_bytes(need);
  msg += ", but " + human_bytes(double(available)) + " is available (" +
         (device.is_cuda() ? std::string("cudaMemGetInfo free") : std::string("MemAvailable")) +
         "); pass --no-memory-check to try anyway";
  throw UsageError(msg);
}


void check_memory(const std::string& backend, const backends::EngineSpec& spec, const backends::Topology& topo,
                  int ranks_sharing, at::Device device, int ranks_on_host) {
  const auto& info = backends::backend(backend);
  if (!info.training.estimate_peak) return;
  // Ranks differ only in padding ownership: the first and the last bound them.
  auto estimate = info.training.estimate_peak(spec, topo, 0, device.is_cpu());
  if (topo.world > 1) {
    auto last = info.training.estimate_peak(spec, topo, topo.world - 1, device.is_cpu());
    if (last.peak_bytes() > estimate.peak_bytes()) estimate = last;
  }
  check_estimate_fits(estimate, ranks_sharing, device, false, runtime::available_bytes(device));
  if (device.is_cuda()) check_estimate_fits(estimate, ranks_on_host, at::kCPU, true, runtime::available_bytes(at::kCPU));
}

}  // namespace zb::bench
