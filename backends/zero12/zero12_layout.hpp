// zero12_layout.hpp — what ZeRO stages 1/2 work out before allocating anything: the dtypes of a
// precision mode, the one flat parameter buffer (DeepSpeedZeroOptimizer's bit16_groups_flat: every
// parameter in module.parameters() order, aligned at the end to nccl_start_alignment_factor x W
// elements), its W equal partitions, which parameters each rank's partition touches
// (params_in_partition), and the run's ShardLayout. Owns: those pure functions, shared by the
// engine, its closed form and the memory estimate. Must not: allocate tensors.
// Upstream: deepspeed/runtime/zero/stage_1_and_2.py __init__ (nccl_start_alignment_factor = 2,
// alignment = 2 * dp world size, flatten_dense_tensors_aligned -> runtime/utils.py
// align_dense_tensors: one zero pad at the end; get_data_parallel_partitions: equal narrows;
// get_partition_info / initialize_gradient_partition: params_in_partition, first_offset).
#pragma once
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "backends/engine.hpp"
#include "backends/shard_layout.hpp"
#include "backends/zero12/zero12_options.hpp"

namespace zb::backends::zero12 {

struct Dtypes {
  at::ScalarType model;  // flat parameters, compute, gradients, the IPG bucket
  at::ScalarType comm;   // the gradient all-reduce (communication_data_type)
};
// Throws UsageError for a precision zero1/zero2 do not offer or a refused dtype mix.
Dtypes dtypes_for(const std::string& precision, const Zero12Options& o);

inline constexpr int64_t kNcclStartAlignmentFactor = 2;  // stage_1_and_2.py: 4-byte alignment / sizeof(fp16)

struct FlatParam {
  int unit = 0, index = 0;  // models::unit_param_specs position
  int64_t numel = 0, offset = 0;  // offset in the flat buffer
};

struct FlatLayout {
  int world = 1;
  std::vector<FlatParam> params;   // flat-buffer order (module.parameters() order, round-robin reordered when asked)
  std::vector<int> module_order;   // indices into `params` in module.parameters() order (bit16_groups)
  int64_t numel = 0;              // sum of the parameters
  int64_t padded = 0;             // numel aligned up to 2 x W
  int64_t partition = 0;          // padded / W: each rank's partition_size
  // Indices into `params` of those overlapping rank r's [r*P, (r+1)*P) (params_in_partition).
  std::vector<int> params_in_partition(int rank) const;
  // Their summed numel: the grads_in_partition buffer copy_grads_in_partition allocates.
  int64_t grads_in_partition_numel(int rank) const;
};

// The crossval model's module.parameters() order (scripts/crossval/model.py LlamaForCausalLM:
// model.embed_tokens, model.layers[*] in spec order, model.norm, lm_head): unit 0's embedding,
// every block unit, then unit 0's final norm and LM head.
// round_robin (round_robin_gradients): _round_robin_reorder — parameter i goes to bucket i % W,
// the flat buffer holds bucket 0's parameters, then bucket 1's, ... (each in module order).
FlatLayout flat_layout(const models::ModelConfig& cfg, int world, bool round_robin = false);

// BackendInfo::training.shard_layout: the optimizer state partitioned over the whole world. Its per-unit
// padding is a view (each unit rounded up to a multiple of W); the real pad is flat_layout's one.
ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo);

}  // namespace zb::backends::zero12
