// fsdp2_options.hpp — FSDP2-mode options, named as PyTorch's `fully_shard` / FSDPModule API and
// accelerate's FullyShardedDataParallelPlugin name them, their JSON round trip, and what an
// accelerate config YAML with `fsdp_version: 2` makes of them.
// Owns: defaults (PyTorch's, or accelerate 1.15's where a config file is read), parsing and
// validation. Must not: run anything.
#pragma once
#include <nlohmann/json.hpp>

#include "backends/backend_options.hpp"
#include "backends/precision_plan.hpp"
#include <string>
#include <vector>

#include "config/accelerate_fsdp2.hpp"

namespace zb::backends::fsdp2 {

// fully_shard(reshard_after_forward=...): True, False, or an int N (reshard to a post-forward
// mesh of N ranks: _fsdp_init.py _get_post_forward_mesh_info). Stored as an int.
inline constexpr int kReshardTrue = -1;
inline constexpr int kReshardFalse = 0;

struct Fsdp2Options {
  int reshard_after_forward = kReshardTrue;  // the root group always keeps PyTorch's None rule (False)
  // MixedPrecisionPolicy fields for --precision mixed: "" = as accelerate 1.15 builds it
  // (FullyShardedDataParallelPlugin.set_mixed_precision("bf16"): param, reduce and output dtype
  // bf16); "none" = None; bf16 | fp32. param_dtype is bf16 under mixed and None otherwise.
  std::string reduce_dtype;
  std::string output_dtype;
  // Which modules get their own fully_shard call:
  //   "root"        fully_shard(each decoder block), then fully_shard(model): the root group holds
  //                 the embedding, final norm and LM head (PyTorch's FSDP2 recipe);
  //   "accelerate"  accelerate 1.15 utils/fsdp_utils.py fsdp2_prepare_model: the embedding its own
  //                 group, [final norm, LM head] one group with reshard_after_forward=False, the
  //                 root holds whatever is left (nothing when blocks are wrapped).
  std::string grouping = "root";
  // TRANSFORMER_BASED_WRAP (one group per decoder block), NO_WRAP (blocks stay in the root) or
  // SIZE_BASED_WRAP (accelerate's size policy: fully_shard on every module but the root with more
  // than min_num_params parameters; zerobench runs it when that is none: NO_WRAP's groups).
  std::string auto_wrap_policy = "TRANSFORMER_BASED_WRAP";
  int64_t min_num_params = 0;  // SIZE_BASED_WRAP's threshold (accelerate launch's default 1e8)
  // 2-D mesh (dp_replicate, dp_shard) as accelerate's ParallelismConfig names it: HSDP when
  // dp_replicate_size > 1. A size of 0 = world size / the other one (not both 0); their product
  // must equal the world size (ParallelismConfig._validate_accelerator).
  int dp_replicate_size = 1;
  int dp_shard_size = 0;
  // Explicit prefetch (FSDPModule.set_modules_to_forward_prefetch / _backward_prefetch): each
  // group prefetches the next N groups in forward order / the previous N in post-forward order.
  // 0 = not set: forward relies on the implicit schedule, backward on FSDP2's default prefetch
  // of one group in reverse post-forward order.
  int modules_to_forward_prefetch = 0;
  int modules_to_backward_prefetch = 0;
  // accelerate GradientAccumulationPlugin.sync_each_batch: false = non-final micro-batches run
  // under set_requires_gradient_sync(False) (accelerate's no_sync for FSDP2).
  bool sync_each_batch = false;
  bool force_sum_reduction_for_comms = false;  // FSDPModule.set_force_sum_reduction_for_comms
  bool activation_checkpointing = false;
  // Rank 0 builds the full weights and broadcasts each parameter (fsdp2_load_full_state_dict).
  bool cpu_ram_efficient_loading = false;
  // Recorded for the report, not acted on (listed as ignored when set from a config file).
  std::string state_dict_type = "SHARDED_STATE_DICT";
  std::string transformer_layer_cls_to_wrap;
  // fully_shard(offload_policy=...) (_fsdp_api.py): "none" = OffloadPolicy() (the default, no
  // offload); "cpu" = CPUOffloadPolicy(pin_memory=offload_pin_memory): sharded parameters,
  // gradients and optimizer states on the host (backends/fsdp2/fsdp2_offload.hpp).
  std::string offload_policy = "none";
  bool offload_pin_memory = true;  // CPUOffloadPolicy.pin_memory (default True, as upstream)
  bool offloads() const { return offload_policy == "cpu"; }
};

// How FSDP2 names the policy: "OffloadPolicy()" or "CPUOffloadPolicy(pin_memory=True|False)".
std::string offload_policy_text(const Fsdp2Options& o);

std::string reshard_after_forward_text(int v);  // "true", "false" or the int
// "true"/"false" (accelerate's str_to_bool spellings) or a positive int; throws UsageError.
int parse_reshard_after_forward(const std::string& key, const std::string& v);

nlohmann::json to_json(const Fsdp2Options& o);
Fsdp2Options fsdp2_options_from_json(const nlohmann::json& j);  // keys as in to_json; throws UsageError
// `o` with its names normalised (auto_wrap_policy upper case, offload_policy lower case) and
// checked; throws UsageError naming the refused value. Resolution calls it once.
Fsdp2Options validated(Fsdp2Options o);
// The options a spec carries (EngineSpec::options): the struct resolution stored, or a raw object
// parsed once by fsdp2_options_from_json. Every reader of a spec's options goes here.
const Fsdp2Options& fsdp2_options(const BackendOptions& options);

// What the engine resolved (the fsdp2 engine's resolved_options(), the report's
// config.backend.options): its options and what fully_shard worked out of them. to_json and
// fsdp2_resolved_from_json are the one mapping between the record and the report's keys; the
// projection program reads the record.
struct Fsdp2Resolved {
  struct Group {  // a fully_shard call with parameters, in forward order
    std::string label;
    int64_t params = 0;
    int reshard_after_forward = kReshardTrue;
  };
  Fsdp2Options options;
  std::string optimizer;  // what steps the shards (a description)
  // The sharded parameters' dtype and MixedPrecisionPolicy's fields (nullopt: None).
  std::optional<at::ScalarType> sharded_param_dtype, mp_param_dtype, mp_reduce_dtype, mp_output_dtype;
  std::optional<at::ScalarType> all_gather_dtype, reduce_scatter_dtype;  // on the wire; absent: not known
  int mesh_dp_replicate = 1, mesh_dp_shard = 0;  // the device mesh (0: not known)
  std::string reduce_scatter_op = "AVG", all_reduce_op = "AVG";  // SUM when the factors divide
  std::optional<double> gradient_predivide_factor, gradient_postdivide_factor;
  std::vector<Group> groups;
};
nlohmann::json to_json(const Fsdp2Resolved& r);
Fsdp2Resolved fsdp2_resolved_from_json(const nlohmann::json& j);

// What an accelerate config with `fsdp_version: 2` makes of the fsdp2 options (config/
// accelerate_fsdp2.hpp reads the file; fsdp2_config.cpp turns it into these options).
using IgnoredKey = config::IgnoredKey;
struct Accelerate2Config {
  Fsdp2Options fsdp2;
  std::string precision;              // "mixed" for mixed_precision bf16, "" for "no" or absent
  int num_processes = 0;              // 0 = not given
  std::vector<std::string> warnings;  // what accelerate itself would warn about
  std::vector<IgnoredKey> ignored;
};
// The file at `path` read as accelerate reads it ("--accelerate-config PATH: " prefixes errors).
Accelerate2Config read_accelerate_fsdp2_config(const std::string& path);
// True when the YAML file at `path` is an accelerate FSDP config with fsdp_version 2.
bool is_accelerate_fsdp2_config(const std::string& path);

}  // namespace zb::backends::fsdp2
