// ddp_config.hpp — ddp's side of config files and the command line (its descriptor's
// config/CLI hooks, assigned in ddp_engine.cpp backend_info()): accelerate's MULTI_GPU /
// MULTI_CPU / NO configs (DistributedDataParallel through accelerate's native AMP) and
// --bucket-cap-mb. Must not: read a file's format (config/ does) or parse a command line.
#pragma once
#include <vector>

#include "backends/config_hooks.hpp"
#include "backends/precision_plan.hpp"

namespace zb::backends::ddp {

// DistributedDataParallel's options zerobench reads (torch/nn/parallel/distributed.py).
struct DdpOptions {
  double bucket_cap_mb = 25;  // gradient all-reduce bucket size in MiB (DDP's default)
};
nlohmann::json to_json(const DdpOptions& o);
DdpOptions ddp_options_from_json(const nlohmann::json& j);  // keys as in to_json; throws UsageError
// The options a spec carries (EngineSpec::options): the struct resolution stored, or a raw object
// parsed once by ddp_options_from_json. Every reader of a spec's options goes here.
const DdpOptions& ddp_options(const BackendOptions& options);

// What the engine resolved (DdpEngine::resolved_options(), the report's config.backend.options):
// its options and the dtypes it worked out. to_json and ddp_resolved_from_json are the one
// mapping between the record and the report's keys; the projection program reads the record.
struct DdpResolved {
  DdpOptions options;
  std::optional<at::ScalarType> param_dtype, storage_dtype;  // absent from a report: not known
  bool sync_each_batch = false;
  std::string optimizer;  // what steps the parameters (a description)
};
nlohmann::json to_json(const DdpResolved& r);
DdpResolved ddp_resolved_from_json(const nlohmann::json& j);

int config_claim(const ConfigIdentity& id);
void read_config(const ConfigInput& in, ResolvedConfig& out);
std::vector<BackendFlag> cli_flags();
// BackendInfo::analysis.option_effects: what changing each option does (bench/compare's config diff).
std::vector<OptionEffect> option_effects();
void apply_flags(const FlagValues& given, bool from_file, EngineSpec& spec, config::ConfigNotes& notes);

}  // namespace zb::backends::ddp
