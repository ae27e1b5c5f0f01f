// backend_info.hpp — the backend descriptor and the registry: the one place a backend is known.
// Owns: BackendInfo (what a backend registers: its name, description and precisions, then one
// facet per concern — training, config, analysis, crossval, lifecycle — each read by its own
// consumers, docs/architecture.md "The backend descriptor") and the registry (built-in backends
// plus any a program registers with register_backend, e.g. the toy backend in tests/). Must not:
// name a backend outside registry.cpp's list. Kept apart from engine.hpp so that growing the
// descriptor recompiles only the files that look a backend up, not every engine.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/checkpoint_layout.hpp"
#include "backends/common/projection_program.hpp"
#include "backends/config_hooks.hpp"
#include "backends/crossval_reference.hpp"
#include "backends/engine.hpp"
#include "backends/precision_plan.hpp"
#include "backends/shard_layout.hpp"
#include "backends/topology.hpp"

namespace zb::runtime {
struct World;  // runtime/world.hpp
}  // namespace zb::runtime

namespace zb::backends {

// -- training: running and sizing a job. Consumers: create_engine (registry.cpp), bench/run
// (run_command, preflight, model_info, run_options), the closed-form and estimate tests.
struct TrainingFacet {
  std::function<std::unique_ptr<Engine>(const EngineSpec&, const runtime::World&)> create;
  // Closed-form engine-owned bytes per rank for `rank` of the job (padding included). The
  // topology, not a bare world size: a shard group may be a node (HYBRID_SHARD), not the world.
  std::function<ModelStateBytes(const EngineSpec&, const Topology&, int rank)> expected_bytes;
  // Pre-flight peak estimate for `rank` of the job (may be empty: no estimate, no check);
  // `gloo`: collectives run through Gloo in host memory (CPU), which stages some of them. Each
  // built-in backend's formulas live in its folder (<x>/<x>_estimate.cpp, on the shared terms of
  // memory_estimate.hpp); the registry marks a Gloo run's host terms as device memory.
  std::function<PeakEstimate(const EngineSpec&, const Topology&, int rank, bool gloo)> estimate_peak;
  // The dtypes the engine holds and moves each piece of model state in, for spec.precision and
  // spec.options (from the same dtype rules the engine allocates with). Throws UsageError for a
  // precision the backend does not offer.
  std::function<PrecisionPlan(const EngineSpec&)> precision_plan;
  // The run's shard layout (backends/shard_layout.hpp) for spec.options on `topo` — world, node
  // size, shard and replicate groups, per-unit padding — worked out once by the backend's own
  // rule; its engine builds its process groups from it, its expected_bytes and estimate_peak read
  // it, and the report writes it (config.shard_layout). Throws UsageError as the engine would. May
  // be empty for a program's own backend (no config.shard_layout is written then).
  std::function<ShardLayout(const EngineSpec&, const Topology&)> shard_layout;
  // Whether these options load the initial weights on rank 0 and broadcast them (the default
  // --load-strategy with --model-dir). Empty: never.
  std::function<bool(const BackendOptions& options)> broadcasts_initial_weights;
  // The offload choices the backend offers (docs/metrics.md "Offload"; model-info, tables), each
  // as the options that select it merged over the defaults (e.g. {"offload_params", true}), in
  // the order model-info lists them after the no-offload row. Empty: the backend does not offload.
  struct OffloadChoice {
    std::string label;       // "CPUOffload(offload_params=True)", "offload_optimizer=cpu", ...
    nlohmann::json options;  // merged over EngineSpec::options
  };
  std::vector<OffloadChoice> offload_choices;
};

// -- config: config files and CLI flags. Consumers: bench/run (config_resolve, run_options).
struct ConfigFacet {
  // How strongly this backend claims a config file (0: not at all). The highest claim runs the
  // file (ties: the first registered); any claim above 0 also means `--backend <name>` does not
  // conflict with the file. Empty: no config file picks this backend.
  std::function<int(const ConfigIdentity&)> claim;
  // The accelerate distributed_type(s) it claims, for the refusal of one nobody claims ("FSDP",
  // "MULTI_GPU/MULTI_CPU/NO"). Empty: none of its own (e.g. a second reader of FSDP files).
  std::string claim_text;
  // Reads a claimed file: out.precision, out.train, out.options and out.provenance (sources,
  // applied/ignored notes, warnings); the caller sets out.backend. Throws UsageError naming the
  // key. Empty exactly when claim is.
  std::function<void(const ConfigInput&, ResolvedConfig& out)> read;
  // Its own command-line flags and their help (bench/run/run_options registers them; a flag
  // several backends declare is registered once, with the first one's help). Empty: none.
  std::vector<BackendFlag> flags;
  // How a refusal names its flags given with another backend: "<flags_title> options (--a, --b,
  // ...) need --backend <name>". Empty when flags is.
  std::string flags_title;
  // Applies the flags the command line gave over spec.options (the config file's options when
  // `from_file`, else empty), noting each as "command line, over the config file" when from_file,
  // and validates the result. Empty when flags is and the options need no completion.
  std::function<void(const FlagValues&, bool from_file, EngineSpec& spec, config::ConfigNotes& notes)> apply_flags;
};

// A mode a backend adds to `zerobench study precision` (bench/study/study.cpp): the run is
// `--backend <name> --precision <precision>`, labelled `label`.
struct StudyMode {
  std::string label, precision;
  bool reference = false;   // the study's fp32 reference (one backend declares it; it always runs)
  bool lr_x_world = false;  // run with lr x W, only under --scale-lr-by-world-size (the blog's observation)
};

// -- analysis: what the commands that compare, model or study runs ask of a backend. Consumers:
// bench/compare (option_effects), analysis/projection (projection), bench/study (precision
// study modes).
struct AnalysisFacet {
  // What changing each of its options does (bench/compare's config differences); empty: none
  // described (a differing key then shows "no description").
  std::vector<OptionEffect> option_effects;
  // The program of one optimizer step the projection simulates (backends/<x>/<x>_program.cpp),
  // the elements one rank's optimizer steps over, and whether the engine records per-unit times.
  // `projection.program` empty: `project` does not model the backend and says so.
  common::ProjectionHooks projection;
  std::vector<StudyMode> precision_study_modes;  // in the order the study runs them
};

// -- lifecycle: checkpoints and the lifecycle study. Consumers: bench/lifecycle/ (checkpoint,
// checkpoint_preflight, study_lifecycle) and lifecycle_study_backend().
struct LifecycleFacet {
  CheckpointLayout checkpoint = default_checkpoint_layout();  // checkpoint_layout.hpp
  bool study_default = false;  // the backend `study lifecycle` runs unless --backend names one
};

// What a backend registers: its name, precisions and one facet per concern. A facet left as
// constructed means "not offered" wherever its comment says so (training.create is required).
struct BackendInfo {
  std::string name;
  std::string description;
  std::vector<std::string> precisions;
  TrainingFacet training;
  ConfigFacet config;
  AnalysisFacet analysis;
  // -- crossval (bench/crossval*): the real framework `zerobench crossval` checks this backend
  // against (crossval_reference.hpp); nullopt: none.
  std::optional<CrossvalReference> crossval;
  LifecycleFacet lifecycle;
};

// The built-in backends (registry.cpp) followed by those added with register_backend, in order.
const std::vector<BackendInfo>& registered_backends();
// Adds a backend (before the first lookup that needs it; a name already known is a UsageError).
// A program that links its own backend calls this once at start-up: one line per backend.
void register_backend(BackendInfo info);
// The backend `zerobench study lifecycle` runs by default (the one with lifecycle.study_default).
std::string lifecycle_study_backend();
const BackendInfo& backend(const std::string& name);  // throws UsageError naming it
// Throws UsageError unless `backend` is registered and `precision` is one of its modes.
void validate_precision(const std::string& backend, const std::string& precision);
std::unique_ptr<Engine> create_engine(const std::string& name, const EngineSpec& spec, const runtime::World& world);

}  // namespace zb::backends
