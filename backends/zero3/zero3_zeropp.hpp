// zero3_zeropp.hpp — ZeRO++ in ZeRO3-mode, as DeepSpeed 0.19.8 runs it:
//  - hpZ (zero_hpz_partition_size N): groups of N consecutive ranks (utils/groups.py
//    _create_zero_param_parallel_group, N = min(N, W), which must divide W). When a gathered
//    parameter is released, each rank keeps a secondary partition: [padded / N] of it, slice
//    rank_in_group, zero past numel (partition_parameters.py _partition -> _partition_param_sec).
//    A parameter that has one is gathered from it within the group (all_gather_coalesced:
//    `use_secondary_tensor` -> ds_process_group = zero_param_process_group, world_size = N);
//    one without is gathered over the world. A prefetch bucket is split in two calls, with and
//    without secondary (partitioned_param_coordinator.py __all_gather_params_). The step drops
//    them all (stage3.py _post_step -> invalidate_secondary_tensor), so each step's first
//    forward gathers over the world and what is re-gathered later (backward, later
//    micro-batches) comes from within the group. The secondaries are parameter copies: they
//    are counted in the `params` category (they are allocated beside ds_tensor on the device,
//    remote_device; DeepSpeed's see_memory_usage shows them in the allocated bytes).
//  - qwZ (zero_quantized_weights): every all_gather_coalesced of parameters quantizes its input
//    (this rank's partition, or the cat of the bucket's partitions; secondary ones too) with
//    CUDAQuantizer: int8, symmetric, weight_quant_groups(numel) groups, fp32 scales; gathers the
//    int8 data then the scales (two all-gathers), dequantizes to fp16 then the parameter's dtype
//    (AllGatherHandle / AllGatherCoalescedHandle.wait). _post_step's persistent re-gather
//    (Init._all_gather -> _allgather_params_coalesced, quantize only for ds_quant_scale
//    tensors) is not quantized. The secondary partition is cut from the dequantized parameter.
//    Departure: _all_gather_sequential dequantizes param.ds_numel elements in W * groups groups
//    (misaligned when W does not divide numel); here the padded buffer is dequantized.
//  - zero_quantized_nontrainable_weights: stores non-trainable parameters quantized; every
//    parameter here trains: accepted, no effect (listed in config.ignored).
//  - qgZ (zero_quantized_gradients): the quantized all-to-all gradient reduction, zero3_qgz.hpp.
// Owns: the pure functions below (shared by the engine, its closed form and the estimate).
// Must not: allocate tensors.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/zero3/zero3_layout.hpp"

namespace zb::backends::zero3 {

// min(zero_hpz_partition_size, W), 1 when off or W == 1; throws UsageError when it does not divide W.
int effective_hpz(const Zero3Options& o, int world);
// Ranks of `rank`'s hpZ group: [rank / hpz * hpz, + hpz).
std::vector<int> hpz_group_ranks(int rank, int hpz);
// qwZ: throws UsageError naming the parameter whose partition (or secondary partition) cannot be
// grouped as CUDAQuantizer asserts (a multiple of 8 elements, ...).
void check_quantizable(const std::vector<ParamLayout>& layout, int hpz);

// Closed forms (tests/test_zeropp.cpp checks the engine against them).
// Bytes of the secondary partitions live between a step's forward and its optimizer step: one
// for each parameter released since the last step (every non-persistent one; the persistent
// ones too in the step that records the trace).
int64_t secondary_bytes(const std::vector<ParamLayout>& layout, int hpz, int64_t elem_bytes, bool with_persistent);
// qwZ: the bytes one quantized all-gather of `numel` elements per rank moves over `group` ranks
// (int8 data + fp32 scales), and the two collectives it issues.
struct QuantizedGatherBytes {
  int64_t data = 0, scales = 0;
};
QuantizedGatherBytes quantized_gather_bytes(int64_t numel_per_rank, int group);

}  // namespace zb::backends::zero3
