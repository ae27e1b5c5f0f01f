// backend_info.hpp — the backend descriptor and the registry: the one place a backend is known.
// Owns: BackendInfo (what a backend registers: its name, precisions, engine factory, closed-form
// bytes, memory estimate, precision plan, ...) and the registry (built-in backends plus any a
// program registers with register_backend, e.g. the toy backend in tests/). Must not: name a
// backend outside registry.cpp's list. Kept apart from engine.hpp so that growing the descriptor
// recompiles only the files that look a backend up, not every engine.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/engine.hpp"
#include "backends/shard_layout.hpp"

namespace zb::backends {

// What a backend registers: its name, precisions and the closed-form bytes per rank.
struct BackendInfo {
  std::string name;
  std::string description;
  std::vector<std::string> precisions;
  std::function<std::unique_ptr<Engine>(const EngineSpec&, const runtime::World&)> create;
  // Closed-form engine-owned bytes per rank for `rank` of the job (padding included). The
  // topology, not a bare world size: a shard group may be a node (HYBRID_SHARD), not the world.
  std::function<ModelStateBytes(const EngineSpec&, const Topology&, int rank)> expected_bytes;
  // Pre-flight peak estimate for `rank` of the job (may be empty: no estimate, no check);
  // `gloo`: collectives run through Gloo in host memory (CPU), which stages some of them.
  std::function<PeakEstimate(const EngineSpec&, const Topology&, int rank, bool gloo)> estimate_peak;
  // The dtypes the engine holds and moves each piece of model state in, for spec.precision and
  // spec.options (from the same dtype rules the engine allocates with). Throws UsageError for a
  // precision the backend does not offer.
  std::function<PrecisionPlan(const EngineSpec&)> precision_plan;
  // -- shard layout (backends/shard_layout.hpp, consumed by engines, closed forms, estimates, reports)
  // The run's shard layout for spec.options on `topo` — world, node size, shard and replicate
  // groups, per-unit padding — worked out once by the backend's own rule; its engine builds its
  // process groups from it, its expected_bytes and estimate_peak read it, and the report writes it
  // (config.shard_layout). Throws UsageError as the engine would. May be empty for a program's own
  // backend (no config.shard_layout is written then).
  std::function<ShardLayout(const EngineSpec&, const Topology&)> shard_layout;
};

// The built-in backends (registry.cpp) followed by those added with register_backend, in order.
const std::vector<BackendInfo>& registered_backends();
// Adds a backend (before the first lookup that needs it; a name already known is a UsageError).
// A program that links its own backend calls this once at start-up: one line per backend.
void register_backend(BackendInfo info);
// The dtype matmuls run in for a backend's precision mode: fp32 for "fp32", bf16 otherwise.
at::ScalarType compute_dtype(const std::string& backend, const std::string& precision);
const BackendInfo& backend(const std::string& name);  // throws UsageError naming it
// Throws UsageError unless `backend` is registered and `precision` is one of its modes.
void validate_precision(const std::string& backend, const std::string& precision);
std::unique_ptr<Engine> create_engine(const std::string& name, const EngineSpec& spec, const runtime::World& world);

}  // namespace zb::backends
