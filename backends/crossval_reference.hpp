// crossval_reference.hpp — what a backend tells `zerobench crossval` (bench/crossval*): the real
// framework it is checked against, the runner that trains it (scripts/crossval/), the framework
// config file both sides read (when the framework is configured by a file), and the catalogue of
// known differences (docs/crossval.md, "Explained, not changed"). Each rule predicts, from
// zerobench's resolved configuration alone (the backend options, the model, the world size, the
// engine's resolved options and process-group backend from zerobench's report), the exact value
// the upstream framework must
// report, and names the upstream file and function that explain it; crossval accepts a difference
// only when the upstream number equals the prediction.
// Must not: read the upstream's output (a rule checked against the upstream's own numbers explains
// nothing), run anything or read files.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/engine.hpp"

namespace zb::backends {

struct StateExplanation {
  int64_t expected = 0;           // the upstream's bytes in this category
  bool zerobench_reports = true;  // whether zerobench reports the category at all
  std::string reason, upstream;   // why; the upstream file: function
};

struct CommExplanation {
  int64_t count = 0, bytes = 0;  // the upstream's calls and bytes of this kind in this step
  std::string reason, upstream;
};

// The relative bounds crossval holds a precision's loss and grad norm to on the CPU, when the
// backend has measured them (docs/crossval.md, "Tolerances"): the largest difference measured
// where both sides do the same arithmetic (0: bitwise), and what was measured.
struct CrossvalBound {
  double loss_rel = 0, grad_norm_rel = 0;
  std::string basis;
};

// What a rule sees: zerobench's resolved run and, from its report (bench/crossval/crossval_rules.cpp reads
// the typed record), the engine's resolved options (config.backend.options, {} when absent: the
// options JSON, as the backend writes it) and the process-group backend (env.pg_backend: gloo |
// nccl, "" when absent).
struct CrossvalCase {
  const EngineSpec& spec;
  int world_size;
  const nlohmann::json& options;
  std::string pg_backend;
};

// What CrossvalReference::reference_setup decides for one mode: a refusal — one line naming the
// reason and the way round; crossval exits 2 with it before anything runs — or a run, possibly with
// documented substitutions: an edit of `reference_options` (what the runner reads as spec.json
// "options"), and/or backend flags added to zerobench's side (`zerobench_flags`, e.g. the same
// substitution made on both sides), each with a line in `substitutions` saying what is substituted
// and why the comparison still holds (the crossval document lists them per mode).
struct ReferenceSetup {
  std::string refusal;
  nlohmann::json reference_options;                    // starts as spec.options
  std::map<std::string, std::string> zerobench_flags;  // "--fsdp2-offload-pin-memory" -> "false"
  std::vector<std::string> substitutions;
};

struct CrossvalReference {
  std::string script;     // the runner in scripts/crossval/
  std::string framework;  // e.g. "DeepSpeed ZeRO-3"
  // A framework configured by one file (DeepSpeed): its format (the config source kind, and
  // "<format>_config" names the file in the runner's spec.json), the file's name in the work
  // directory, the `run` flag that reads it, and the file both sides read for one mode, built
  // from the resolved spec over the user's own file of that format (`user_file`, an empty object
  // when none); lines for the report go to `notes`. When set, the config-file flags that named
  // the run are not forwarded beside it.
  std::string config_format, config_file_name, config_flag;
  std::function<nlohmann::json(const EngineSpec& spec, int world, const nlohmann::json& user_file,
                               std::vector<std::string>& notes)>
      config_file;
  // What the real framework cannot run as resolved on this machine, checked for every mode before
  // anything runs (`device`: "cpu" | "cuda"); see ReferenceSetup. Empty: nothing refused or
  // substituted.
  std::function<void(const EngineSpec& spec, const std::string& device, ReferenceSetup& setup)> reference_setup;
  // Model-state category `category` of rank `rank`; `zb` = zerobench's model_states_bytes of that
  // rank, flat as crossval compares them: {"params": bytes, ..., "host.optimizer": bytes,
  // "host.pinned": 0|1} (an offloaded category is "host.<category>"). Empty or nullopt: no known
  // difference.
  std::function<std::optional<StateExplanation>(const CrossvalCase& c, int rank, const std::string& category,
                                                const nlohmann::json& zb)>
      explain_state;
  // Collectives of `kind` issued by rank `rank` in step `step`, where zerobench issued `zb_count`
  // calls of `zb_bytes`. Empty or nullopt: no known difference.
  std::function<std::optional<CommExplanation>(const CrossvalCase& c, int rank, int64_t step, const std::string& kind,
                                               int64_t zb_count, int64_t zb_bytes)>
      explain_comm;
  // The measured bound of a precision on the CPU; empty or nullopt: crossval's generic bound for
  // the precision (bench/crossval/crossval_compare.cpp tolerance_for).
  std::function<std::optional<CrossvalBound>(const std::string& precision)> measured_bound;
};

// The difference every backend whose reference steps torch.optim.AdamW(fused=True) shares:
// AdamW's per-parameter `step` counter, a 0-dim fp32 tensor for each of `tensors` stepped
// tensors (`which` says which), that zerobench's AdamW also holds but does not count.
StateExplanation adamw_step_counters(int64_t tensors, const std::string& which);

}  // namespace zb::backends
