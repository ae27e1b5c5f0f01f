// fsdp2_layout.hpp — the geometry FSDP2-mode builds before it allocates anything: the dtypes of a
// MixedPrecisionPolicy after clamping (_fsdp_param.py init_dtype_attrs), the (replicate, shard)
// mesh, each parameter's dim-0 Shard layout (_fsdp_param.py _init_sharded_param), the fully_shard
// groups (PyTorch's recipe or accelerate's fsdp2_prepare_model) and the closed-form bytes per rank.
// Owns: those pure functions, shared by the engine (fsdp2_engine.cpp) and the memory estimate
// (fsdp2_estimate.cpp). Must not: allocate tensors or talk to process groups.
#pragma once
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/engine.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "backends/precision_plan.hpp"
#include "backends/shard_layout.hpp"
#include "models/model_config.hpp"

namespace zb::backends::fsdp2 {

// ---------------------------------------------------------------- dtypes (init_dtype_attrs)

struct Dtypes {
  at::ScalarType orig;                   // sharded parameters, sharded gradients, AdamW states
  std::optional<at::ScalarType> param;   // MixedPrecisionPolicy.param_dtype after clamping
  std::optional<at::ScalarType> reduce;  // MixedPrecisionPolicy.reduce_dtype after clamping
  std::optional<at::ScalarType> output;  // MixedPrecisionPolicy.output_dtype
  at::ScalarType compute() const { return param.value_or(orig); }  // unsharded params and their grads
  at::ScalarType comm_reduce() const { return reduce.value_or(compute()); }
};

// Throws UsageError for a precision or policy FSDP2-mode does not offer.
Dtypes dtypes_for(const std::string& precision, const Fsdp2Options& o);
// The run's PrecisionPlan from dtypes_for (BackendInfo::training.precision_plan).
PrecisionPlan precision_plan(const EngineSpec& spec);

// ---------------------------------------------------------------- mesh and layouts

struct Mesh {
  int replicate = 1, shard = 1;
};

// accelerate ParallelismConfig (dp_replicate, dp_shard) -> init_device_mesh((R, S)); a 1-D mesh
// when R == 1. Throws UsageError when R x S is not the world size.
Mesh resolve_mesh(const Fsdp2Options& o, int world);

// One parameter sharded on dim 0 over S ranks (_fsdp_param.py _init_sharded_param): torch.chunk
// gives every rank ceil(dim0/S) rows of padded storage; rank r's local tensor is the rows it
// really owns, min(chunk, dim0 - r*chunk) clamped at 0.
struct ParamLayout {
  int unit = 0, index = 0;
  std::vector<int64_t> shape;
  int64_t numel = 0, dim0 = 0, row = 0, chunk_rows = 0, local_rows = 0;
  int64_t padded_shard_numel() const { return chunk_rows * row; }
  int64_t local_numel() const { return local_rows * row; }
};

ParamLayout layout_param(const models::ParamSpec& spec, int unit, int index, int shard_size, int shard_rank);

// ---------------------------------------------------------------- groups (fully_shard calls)

enum class GroupKind { kRoot, kEmbed, kBlock, kTail };

struct GroupSpec {
  GroupKind kind = GroupKind::kRoot;
  int unit = 0;  // the block of a kBlock group
  std::string label;
  std::vector<std::pair<int, int>> params;   // (unit, index), in the module's parameters() order
  bool reshard_after_forward_false = false;  // root (None -> False in _lazy_init) or accelerate's tail
};

// HF LlamaDecoderLayer registers self_attn (q, k, v, o), mlp (gate, up, down), input_layernorm,
// post_attention_layernorm: its parameters() order, which fixes each weight's slot in the group's
// all-gather buffer. Indices into models' block spec order (attn_norm, wq, wk, wv, wo, mlp_norm,
// gate, up, down).
inline constexpr int kHfBlockOrder[] = {1, 2, 3, 4, 6, 7, 8, 0, 5};

// Whether the decoder blocks get fully_shard calls of their own: TRANSFORMER_BASED_WRAP yes,
// NO_WRAP no; SIZE_BASED_WRAP no when accelerate's size policy selects nothing on this model, and
// anything it selects throws UsageError naming the modules (such groups are not implemented).
bool wraps_blocks(const models::ModelConfig& cfg, const Fsdp2Options& o);

// FSDP states in the root module's named_modules() order (_fsdp_state.py _lazy_init all_states),
// which is also the order their pre-forwards run in.
std::vector<GroupSpec> group_specs(const models::ModelConfig& cfg, const Fsdp2Options& o);

// BackendInfo::training.shard_layout: every parameter Shard(0) over the mesh's dp_shard ranks S (HSDP:
// its own shard and replicate groups, the mesh's rows and columns, when dp_replicate > 1), each
// unit's padding the sum of its parameters' dim-0 padding (ceil(dim0/S)*S rows). Throws
// UsageError when the mesh does not match the world.
ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo);

// Closed form per rank: per parameter, the padded shard (ceil(dim0/S) rows) as sharded parameter
// and as sharded gradient, and two AdamW states over the rows this rank owns — in the sharded
// dtype. S is the layout's shard group: the mesh's dp_shard size (HSDP shards within a replica's S ranks).
ModelStateBytes closed_form_bytes(const EngineSpec& spec, const Topology& topo, int rank);

}  // namespace zb::backends::fsdp2
