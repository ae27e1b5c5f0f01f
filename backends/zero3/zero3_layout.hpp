// zero3_layout.hpp — what ZeRO3-mode works out before it allocates anything: the dtypes of a
// precision mode and the config's communication_data_type / grad_accum_dtype, each parameter's
// padded partition and sub-group, the IPG buffer's size, and the run's ShardLayout
// (BackendInfo::training.shard_layout: every parameter partitioned over the whole data-parallel world,
// no hpZ/MiCS). Owns: those pure functions, shared by the engine (zero3_engine.cpp and the files
// that implement it), its closed form and the memory estimate. Must not: allocate tensors.
// Upstream: deepspeed/runtime/zero/partition_parameters.py (_partition_param: padding to a
// multiple of W), stage3.py (_create_fp16_sub_groups, _setup_for_real_optimizer).
#pragma once
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "backends/engine.hpp"
#include "backends/shard_layout.hpp"
#include "backends/zero3/zero3_options.hpp"

namespace zb::backends::zero3 {

struct Dtypes {
  at::ScalarType model;       // partitions, all-gather, compute
  at::ScalarType comm;        // gradient reduce-scatter (and the IPG bucket)
  at::ScalarType grad_accum;  // gradient partitions
};
// Throws UsageError for a precision ZeRO3-mode does not offer.
Dtypes dtypes_for(const std::string& precision, const Zero3Options& o);

// stage3.py _setup_for_real_optimizer: with contiguous_gradients one IPG buffer per
// communication dtype, torch.empty(reduce_bucket_size, dtype=comm dtype), allocated once.
int64_t ipg_buffer_bytes(const Zero3Options& o, const Dtypes& d);

struct ParamLayout {
  int unit = 0, index = 0;
  std::vector<int64_t> shape;
  int64_t numel = 0, padded = 0, part_numel = 0, part_offset = 0;
  int sub_group = 0;
  bool persistent = false;
  // DeepSpeed's ds_id: the position in module.parameters() (zero.Init numbers parameters as they
  // are made: the embedding, each block, the final norm, the LM head), which is not the unit
  // order of this layout (the root unit's norm and LM head first). The order upstream sorts a
  // bucket in (__avg_scatter_grads) and sums a sub-group's norms in (get_grad_norm_direct).
  int ds_id = 0;
};

// `ids` (indices into `layout`) sorted by ds_id.
std::vector<int> in_ds_id_order(std::vector<int> ids, const std::vector<ParamLayout>& layout);

// _partition_param: pad each parameter to a multiple of W; rank r keeps [r*P, (r+1)*P).
// _create_fp16_sub_groups: consecutive parameters until their partitions reach sub_group_size.
std::vector<ParamLayout> param_layouts(const models::ModelConfig& cfg, int world, const Zero3Options& o,
                                       int* sub_groups);

// BackendInfo::training.shard_layout: ZeRO-3 partitions over the whole data-parallel group (the world),
// each unit's padding the sum of its parameters' (each to a multiple of W).
ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo);

}  // namespace zb::backends::zero3
