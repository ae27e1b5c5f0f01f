// fsdp_wrap.hpp — which modules FSDP1 makes units of, as accelerate's fsdp_auto_wrap_policy asks:
// TRANSFORMER_BASED_WRAP (a unit per decoder block, the root holding embedding, final norm and LM
// head), NO_WRAP (one unit, the root, holding every parameter) and SIZE_BASED_WRAP (FSDP1's
// _recursive_wrap under size_based_auto_wrap_policy over the model's module tree, run here on
// numbers). Owns: that decision and each flat parameter's members in FSDP's flattening order
// (the root module's named_parameters() minus the wrapped children's). Must not: allocate.
// Upstream: accelerate utils/dataclasses.py FullyShardedDataParallelPlugin (__post_init__,
// set_auto_wrap_policy: SIZE_BASED_WRAP with min_num_params 0 passes no policy, i.e. NO_WRAP),
// torch/distributed/fsdp/wrap.py (_recursive_wrap, size_based_auto_wrap_policy).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/fsdp/fsdp_options.hpp"
#include "models/model_config.hpp"

namespace zb::backends::fsdp {

enum class Wrapping {
  kPerBlock,    // a flat parameter per decoder block, and the root's (embedding, final norm, LM head)
  kWholeModel,  // one flat parameter, the root's, with every parameter of the model
};

// The modules FSDP1's _recursive_wrap wraps under size_based_auto_wrap_policy(min_num_params), in
// wrap (post-)order, named as in the reference model (scripts/crossval/model.py, HF Llama's
// names): "model.embed_tokens", "model.layers.0.mlp", "model", "lm_head", ... The root itself is
// never among them (FSDP wraps it; only_wrap_children).
std::vector<std::string> size_based_wrapped_modules(const models::ModelConfig& cfg, int64_t min_num_params);

// The wrapping the options ask for on this model. SIZE_BASED_WRAP runs as kWholeModel when the
// policy wraps nothing (or min_num_params <= 0: accelerate passes no policy), as kPerBlock when it
// wraps exactly the decoder blocks; any other set of units throws UsageError naming the modules.
Wrapping wrapping(const FsdpOptions& o, const models::ModelConfig& cfg);

// One member of a flat parameter: `count` consecutive parameters of model unit `unit` (its
// unit_param_specs order) from index `first`.
struct FlatMember {
  int unit = 0, first = 0, count = 0;
};
// Each flat parameter's members in flattening order: kPerBlock, unit u's whole spec list for each
// u; kWholeModel, one flat parameter: embedding, blocks 1..L, final norm, LM head.
std::vector<std::vector<FlatMember>> flat_units(const models::ModelConfig& cfg, Wrapping w);
// Each flat parameter's parameter specs, in flattening order.
std::vector<std::vector<models::ParamSpec>> flat_unit_specs(const models::ModelConfig& cfg, Wrapping w);

}  // namespace zb::backends::fsdp
