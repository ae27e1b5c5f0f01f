// zero12_offload.hpp — ZeRO stages 1/2 with zero_optimization.offload_optimizer device cpu, in
// closed form: which model-state bytes live where, and the host<->device traffic of one optimizer
// step, both derived from DeepSpeed 0.19.8's DeepSpeedZeroOptimizer (the engine's data path is
// zero12_offload.cpp; docs/backends/zero12.md "Offload" has the formulas).
// Owns: those pure functions (zero12_offload_form.cpp). Must not: allocate or copy tensors.
// Upstream: deepspeed/runtime/zero/stage_1_and_2.py (__init__ with cpu_offload:
// single_partition_of_fp32_groups on 'cpu' pinned, param_buffer_of_bit16_for_cpu_offload_groups,
// temp_grad_buffer_for_cpu_offload / _for_gpu_offload; initialize_optimizer_states;
// copy_grads_in_partition; async_accumulate_grad_in_cpu_via_gpu;
// async_inplace_copy_grad_to_fp32_buffer_from_gpu; step).
#pragma once
#include "backends/engine.hpp"
#include "backends/topology.hpp"

namespace zb::backends::zero12 {

// What the engine owns at the end of the last micro-batch's backward with offload_optimizer cpu
// (W ranks, partition P = padded/W, e = model-dtype bytes, L = the largest parameter's numel):
//   device: params = padded*e (bit16_groups_flat), grads = L*e (temp_grad_buffer_for_gpu_offload;
//           every param.grad is None by then), master/optimizer/buffers 0;
//   host:   params = P*e (param_buffer_of_bit16_for_cpu_offload), master = P*4, optimizer = 2*P*4
//           (exp_avg, exp_avg_sq), grads = P*4 (the fp32 partition's .grad) + L*e
//           (temp_grad_buffer_for_cpu_offload) + with stage 2 and grad_accum > 1 the whole
//           gradient of every parameter touching the partition (accumulated_grads_in_cpu);
//   pinned = offload_optimizer.pin_memory.
ModelStateBytes expected_offload_bytes(const EngineSpec& spec, const Topology& topo, int rank, int stage);

// The host<->device copies of one optimizer step on `rank` (G = grad_accum; for each parameter
// touching the partition: n its numel, m the elements inside the partition):
//   stage 2, G > 1: per parameter G+1 device->host copies (G of the whole gradient in the model
//                   dtype: copy_gradients_to_cpu each micro-batch; one of the m elements in fp32 at
//                   the boundary) and G-1 host->device copies of the whole accumulated gradient;
//   otherwise (stage 1 always: its gradients are reduced once, at the boundary, with
//   micro_step_id 0): per parameter one device->host copy of m elements in fp32;
//   plus, per step, one host->device copy of the updated partition, P elements in the model dtype.
common::OffloadTraffic expected_step_traffic(const EngineSpec& spec, const Topology& topo, int rank, int stage);

}  // namespace zb::backends::zero12
