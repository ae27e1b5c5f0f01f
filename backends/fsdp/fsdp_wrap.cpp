// fsdp_wrap.cpp — see fsdp_wrap.hpp.
#include "backends/fsdp/fsdp_wrap.hpp"

#include "backends/fsdp_family/module_tree.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::fsdp {

namespace {

using fsdp_family::Module;

// torch/distributed/fsdp/wrap.py _recursive_wrap with size_based_auto_wrap_policy: recurse into a
// module whose not-yet-wrapped numel is >= min_num_params, then wrap it if what its children left
// unwrapped still is (ModuleList excluded; the root only wraps children). Returns the numel wrapped
// below and including `m`.
int64_t recursive_wrap(const Module& m, int64_t min_num_params, bool only_wrap_children, std::vector<std::string>& out) {
  const int64_t nonwrapped = m.numel();
  if (nonwrapped < min_num_params) return 0;  // policy(recurse=True) is false: not even looked into
  int64_t wrapped = 0;
  for (const auto& c : m.children) wrapped += recursive_wrap(c, min_num_params, false, out);
  const int64_t remainder = nonwrapped - wrapped;
  if (!only_wrap_children && remainder >= min_num_params && !m.module_list) {
    out.push_back(m.name);
    return nonwrapped;
  }
  return wrapped;
}

}  // namespace

std::vector<std::string> size_based_wrapped_modules(const models::ModelConfig& cfg, int64_t min_num_params) {
  std::vector<std::string> out;
  if (min_num_params > 0) recursive_wrap(fsdp_family::module_tree(cfg), min_num_params, /*only_wrap_children=*/true, out);
  return out;
}

Wrapping wrapping(const FsdpOptions& o, const models::ModelConfig& cfg) {
  if (o.auto_wrap_policy == "TRANSFORMER_BASED_WRAP") return Wrapping::kPerBlock;
  if (o.auto_wrap_policy == "NO_WRAP") return Wrapping::kWholeModel;
  if (o.auto_wrap_policy != "SIZE_BASED_WRAP")
    throw UsageError("fsdp auto_wrap_policy must be TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP, got '" +
                     o.auto_wrap_policy + "'");
  const auto wrapped = size_based_wrapped_modules(cfg, o.min_num_params);
  if (wrapped.empty()) return Wrapping::kWholeModel;
  bool blocks = int64_t(wrapped.size()) == cfg.layers;
  for (size_t i = 0; blocks && i < wrapped.size(); ++i) blocks = wrapped[i] == "model.layers." + std::to_string(i);
  if (blocks) return Wrapping::kPerBlock;
  throw UsageError("fsdp auto_wrap_policy SIZE_BASED_WRAP with min_num_params " + std::to_string(o.min_num_params) +
                   " wraps " + fsdp_family::module_list_text(wrapped) + " of " + cfg.preset +
                   " (torch's size_based_auto_wrap_policy): units smaller or larger than a decoder block are not "
                   "implemented; zerobench runs SIZE_BASED_WRAP when it wraps nothing (as NO_WRAP) or exactly the "
                   "decoder blocks");
}

std::vector<std::vector<FlatMember>> flat_units(const models::ModelConfig& cfg, Wrapping w) {
  const auto specs = models::unit_param_specs(cfg);
  std::vector<std::vector<FlatMember>> out;
  if (w == Wrapping::kPerBlock) {
    for (size_t u = 0; u < specs.size(); ++u) out.push_back({{int(u), 0, int(specs[u].size())}});
    return out;
  }
  // The root module's named_parameters(): model.embed_tokens, model.layers.*, model.norm, lm_head.
  std::vector<FlatMember> whole{{models::kRootUnit, 0, 1}};
  for (size_t u = 1; u < specs.size(); ++u) whole.push_back({int(u), 0, int(specs[u].size())});
  whole.push_back({models::kRootUnit, 1, 2});
  out.push_back(std::move(whole));
  return out;
}

std::vector<std::vector<models::ParamSpec>> flat_unit_specs(const models::ModelConfig& cfg, Wrapping w) {
  const auto specs = models::unit_param_specs(cfg);
  std::vector<std::vector<models::ParamSpec>> out;
  for (const auto& members : flat_units(cfg, w)) {
    std::vector<models::ParamSpec> unit;
    for (const auto& m : members)
      for (int i = m.first; i < m.first + m.count; ++i) unit.push_back(specs[size_t(m.unit)][size_t(i)]);
    out.push_back(std::move(unit));
  }
  return out;
}

}  // namespace zb::backends::fsdp
