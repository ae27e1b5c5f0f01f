// crossval_device.cpp — the device and backend of a crossval (see crossval_device.hpp).
#include "bench/crossval/crossval_device.hpp"

#include "runtime/errors.hpp"

namespace zb::bench {

CrossvalDevice resolve_crossval_device(const std::string& device, int world, bool cuda_built, int gpu_count) {
  if (device == "cpu") return {"cpu", "gloo", "cpu"};
  if (device != "cuda") throw UsageError("crossval --device must be cpu or cuda, got '" + device + "'");
  if (!cuda_built)
    throw UsageError("crossval --device cuda: this build has no CUDA path (rebuild with -DZEROBENCH_CUDA=ON)");
  if (gpu_count < 1) throw UsageError("crossval --device cuda: no CUDA device is visible");
  // One GPU per rank, as NCCL requires ("Duplicate GPU detected") and both sides assume
  // (zerobench: runtime/device.cpp pick_device; the runners: torch.cuda.set_device(LOCAL_RANK)).
  // crossval runs real ranks only (no --emulate-world-size), so the way out is fewer ranks.
  if (world > gpu_count)
    throw UsageError("crossval --device cuda --nproc " + std::to_string(world) + ": " + std::to_string(world) +
                     " ranks but " + std::to_string(gpu_count) +
                     " visible GPU(s), and NCCL cannot run two ranks on one GPU; use --nproc " +
                     std::to_string(gpu_count) + " or less, or --device cpu");
  return {"cuda", "nccl", "cuda"};
}

std::vector<std::string> upstream_device_mismatches(const CrossvalDevice& want,
                                                    const std::vector<nlohmann::json>& ranks) {
  std::vector<std::string> out;
  for (size_t k = 0; k < ranks.size(); ++k) {
    const auto& r = ranks[k];
    const nlohmann::json d =
        r.is_object() && r.contains("device") && r["device"].is_object() ? r["device"] : nlohmann::json();
    const std::string kind = d.is_object() ? d.value("kind", std::string()) : std::string();
    const std::string backend = d.is_object() ? d.value("backend", std::string()) : std::string();
    if (kind != want.kind || backend != want.dist_backend)
      out.push_back("upstream rank " + std::to_string(k) + " ran on '" + (kind.empty() ? "?" : kind) + "' with '" +
                    (backend.empty() ? "?" : backend) + "', asked for '" + want.kind + "' with '" + want.dist_backend +
                    "'");
  }
  return out;
}

}  // namespace zb::bench
