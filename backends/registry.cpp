// registry.cpp — the list of backends zerobench knows, by name. A new built-in backend adds its
// header's include and one line to registry(); a program with a backend of its own calls
// register_backend once.
#include "backends/ddp/ddp_engine.hpp"
#include "backends/fsdp/fsdp_engine.hpp"
#include "backends/fsdp2/fsdp2_engine.hpp"
#include "backends/zero0/zero0_engine.hpp"
#include "backends/zero3/zero3_engine.hpp"
#include "backends/zero12/zero12_engine.hpp"
#include "backends/backend_info.hpp"
#include "runtime/errors.hpp"

namespace zb::backends {

nlohmann::json to_json(const ModelStateBytes& b) {
  nlohmann::json j = {{"params", b.params},       {"master_params", b.master_params}, {"grads", b.grads},
                      {"optimizer", b.optimizer}, {"buffers", b.buffers}};
  const auto& h = b.host;
  if (h.total() > 0)
    j["host"] = {{"params", h.params},       {"master_params", h.master_params}, {"grads", h.grads},
                 {"optimizer", h.optimizer}, {"buffers", h.buffers},             {"pinned", h.pinned}};
  return j;
}

namespace {
// On a CPU-only run (`gloo`) a built-in backend's offloaded host terms share the memory the peak
// is measured in.
BackendInfo builtin(BackendInfo info) {
  if (!info.training.estimate_peak) return info;
  auto& peak = info.training.estimate_peak;
  peak = [estimate = std::move(peak)](const EngineSpec& spec, const Topology& topo, int rank, bool gloo) {
    auto e = estimate(spec, topo, rank, gloo);
    e.host_is_device = gloo;
    return e;
  };
  return info;
}

std::vector<BackendInfo>& registry() {
  // One line per built-in backend; everything else about it is in its folder (docs/backends.md).
  static std::vector<BackendInfo> all = {
      builtin(ddp::backend_info()),
      builtin(fsdp::backend_info()),
      builtin(zero3::backend_info()),
      builtin(fsdp2::backend_info()),
      builtin(zero12::backend_info(1)),
      builtin(zero12::backend_info(2)),
      builtin(zero0::backend_info()),
  };
  return all;
}
}  // namespace

const std::vector<BackendInfo>& registered_backends() { return registry(); }

void register_backend(BackendInfo info) {
  for (const auto& b : registry())
    if (b.name == info.name) throw UsageError("backend '" + info.name + "' is registered twice");
  registry().push_back(std::move(info));
}

CheckpointLayout default_checkpoint_layout() {
  CheckpointLayout l;
  l.model_file = [](int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; };
  l.optim_file = [](const std::string& /*precision*/, int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; };
  l.is_model_state = [](const std::string& /*name*/) { return false; };
  l.tag = [](int64_t steps_done) { return "step-" + std::to_string(steps_done); };
  return l;
}

std::string lifecycle_study_backend() {
  for (const auto& b : registered_backends())
    if (b.lifecycle.study_default) return b.name;
  return registered_backends().front().name;
}

const BackendInfo& backend(const std::string& name) {
  std::string known;
  for (const auto& b : registered_backends()) {
    if (b.name == name) return b;
    known += (known.empty() ? "" : ", ") + b.name;
  }
  throw UsageError("unknown --backend '" + name + "' (known: " + known + ")");
}

void validate_precision(const std::string& name, const std::string& precision) {
  const auto& info = backend(name);
  std::string list;
  for (const auto& p : info.precisions) {
    if (p == precision) return;
    list += (list.empty() ? "" : "|") + p;
  }
  throw UsageError("--precision '" + precision + "' is not valid for --backend " + name + " (" + list + ")");
}

std::unique_ptr<Engine> create_engine(const std::string& name, const EngineSpec& spec, const runtime::World& world) {
  validate_precision(name, spec.precision);
  return backend(name).training.create(spec, world);
}

}  // namespace zb::backends
