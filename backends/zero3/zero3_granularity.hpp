// zero3_granularity.hpp — `stage3_module_granularity_threshold` for zerobench's model, as DeepSpeed
// 0.19.8 decides it (deepspeed/runtime/zero/parameter_offload.py DeepSpeedZeRoOffload.__init__ ->
// _set_z3_leaf_modules_by_threshold, _get_granularity_recursively).
// Upstream: every module with parameters gets a granularity: a torch leaf module (no children) and
// a torch container (ModuleList, ...) sys.maxsize; any other module (its own parameters + its
// children's) // (its children's layer counts + 1), or sys.maxsize above Z3_MAX_LEAF_SIZE (1e9)
// parameters. When the smallest granularity is <= the threshold, the modules at or below it become
// z3 leaf modules (their whole subtree fetched as one unit); otherwise DeepSpeed only logs a warning
// and nothing changes.
// zerobench's model is HF transformers' LlamaForCausalLM (models/): LlamaForCausalLM{model, lm_head},
// LlamaModel{embed_tokens, layers: ModuleList, norm, rotary_emb (no parameters)},
// LlamaDecoderLayer{self_attn, mlp, input_layernorm, post_attention_layernorm},
// LlamaAttention{q_proj, k_proj, v_proj, o_proj}, LlamaMLP{gate_proj, up_proj, down_proj}.
// Owns: those granularities, and the refusal. Must not: fetch anything (leaf-module fetching is not
// implemented: a threshold that would create leaf modules is refused with one line).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "models/model_config.hpp"

namespace zb::backends::zero3 {

struct ModuleGranularity {
  std::string module;       // the class with the smallest granularity (DeepSpeed's min_granularity_layer)
  int64_t granularity = 0;  // its value (min_granularity_value); INT64_MAX when none is finite
};

ModuleGranularity min_module_granularity(const models::ModelConfig& cfg);

// threshold 0: nothing. Otherwise throws UsageError naming the key when DeepSpeed would set leaf
// modules (min granularity <= threshold); returns what the report says about it.
nlohmann::json check_module_granularity(int64_t threshold, const models::ModelConfig& cfg);

}  // namespace zb::backends::zero3
