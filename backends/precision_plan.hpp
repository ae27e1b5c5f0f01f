// precision_plan.hpp — the typed precision plan of a run: which dtype each piece of model state
// is held and moved in (the blog's Table 2: load, flat/sharded parameters, compute, reduction,
// gradients, masters, optimizer states). Each backend works it out from its own dtype rules
// (BackendInfo::training.precision_plan) — the same functions its engine builds its tensors from — and
// every report carries it under config.precision_plan, one set of keys for every backend.
// Owns: the struct and its JSON form. Must not: know a particular backend.
#pragma once
#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace zb::backends {

struct PrecisionPlan {
  at::ScalarType load = at::kFloat;     // the weights as loaded, before any upcast the engine makes
  at::ScalarType params = at::kFloat;   // the persistent (flat, sharded or partitioned) parameters
  at::ScalarType compute = at::kFloat;  // unsharded parameters, matmuls and activations
  at::ScalarType reduce = at::kFloat;   // gradients on the wire (all-reduce / reduce-scatter)
  at::ScalarType grads = at::kFloat;    // the gradient the optimizer reads (flat, sharded, partition)
  std::optional<at::ScalarType> master;  // a separate master copy the optimizer updates (none: params)
  at::ScalarType optimizer_states = at::kFloat;  // AdamW exp_avg / exp_avg_sq
  std::string notes;                    // what the table cannot say (e.g. the loss returned in bf16)
};

// "fp32" | "bf16" | "fp16" (any other dtype: c10's name).
std::string dtype_short_name(at::ScalarType t);
// c10's name (Float, BFloat16, Half, ...), as the engines' resolved options write their dtypes
// (the <X>Resolved records' to_json; dtype_key reads it back); `if_none` for a dtype not set or not
// known ("" for most records, "None" for FSDP2's MixedPrecisionPolicy fields).
std::string dtype_long_name(const std::optional<at::ScalarType>& t, const char* if_none = "");
// A dtype by its short or c10 name (fp32/Float, bf16/BFloat16, fp16/Half, fp64/Double), as
// engines' resolved options and reports write them; nullopt for "" and "None" (a dtype left
// unset, e.g. a MixedPrecisionPolicy field); UsageError naming `what` for any other name.
std::optional<at::ScalarType> dtype_named(const std::string& name, const std::string& what);
// A resolved-options record's dtype key (the backends' <x>_resolved_from_json): the dtype its
// string names (dtype_named), nullopt when the key is absent or not a string.
std::optional<at::ScalarType> dtype_key(const nlohmann::json& j, const char* key);
// {"load","params","compute","reduce","grads","master" (null = none),"optimizer_states","notes"}
nlohmann::json to_json(const PrecisionPlan& p);

}  // namespace zb::backends
