// swizzled_quant.hpp — the three quantizer ops ZeRO++ qgZ runs (coalesced_collectives.py
// all_to_all_quant_reduce), with ATen ops: swizzle_quant (int4 symmetric, groups reordered so the
// two all-to-alls deliver each rank its partition), quantized_reduction (dequantize the local
// peers' pieces, sum them, re-quantize) and dequantize (int4 -> fp16).
// Owns: the swizzled group order, the reduction's arithmetic (fp16 sums) and the group counts.
// Must not: communicate (backends/zero3/zero3_qgz.cpp does), or decide which tensors take this path.
//
// Upstream (DeepSpeed 0.19.8, deepspeed/ops/csrc/quantization/ in the installed wheel):
//  - pt_binding.cpp ds_swizzle_quant(x, groups, bits, type, pipeline, nodes, devices_per_node):
//    output int8 [numel / 2] (int4), scales float [groups, 1]; elems_per_group = numel / groups.
//    swizzled_quantize.cu: grid (groups_per_partition / pipeline, pipeline, nodes * devices) with
//    groups_per_partition = groups / (nodes * devices); input group z * gpp + x (partition z = the
//    z-th W-th of the tensor) is written at output group
//    ((z % devices) * nodes + z / devices) * gpp + x (pipeline 1): partitions of node n, local l
//    move to position l * nodes + n ("0 1 2 3 4 5 6 7 becomes 0 4 1 5 2 6 3 7" for 2 x 4).
//    Each group: Params<Symmetric, 4> as in blockwise_quant.hpp (scale 16 / (2 absmax), stored 1/scale).
//  - quant_reduce.cu dequant_reduce, via pt_binding.cpp quantized_reduction(in, scales, in_groups,
//    out_groups, 4, Symmetric, devices): `in` is devices pieces of T bytes; for each element the
//    devices values are dequantized to __half and summed in __half2 arithmetic (piece 0 first;
//    no division), then each of out_groups groups of T / out_groups bytes is re-quantized
//    (Params<Symmetric, 4> on the fp16 sums). Output int8 [T], scales float [out_groups, 1].
//  - dequantize.cu via pt_binding.cpp dequantize<__half>: float(q) * scale stored as __half.
// What differs from the kernels: (1) the input is converted to fp16 by value here; ds_swizzle_quant
// casts the tensor's data pointer to `__half*` without converting, so with a bf16 or fp32
// communication dtype DeepSpeed's kernel reads the tensor's bytes as fp16 (and for fp32 only the
// first half of them) — zerobench quantizes the values, which is what the kernel computes for an
// fp16 tensor; (2) --use_fast_math divisions (blockwise_quant.hpp); (3) the kernels are undefined
// where their launch assumes more than they check (a group not a multiple of 8 elements is read 8
// halves at a time past its end; groups not divisible by the world leave groups unwritten): those
// shapes are refused here (check_swizzle_shape), never silently computed differently.
// Belongs to the DeepSpeed family (backends/deepspeed_family/), used by zero3 (qgZ).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace zb::backends::deepspeed_family {

struct Int4Quantized {
  at::Tensor data;    // int8 [values / 2]: two int4 per byte, first value in the high nibble
  at::Tensor scales;  // float32 [groups, 1]: 1/scale per group (symmetric)
  int64_t groups = 0;
};

// Throws UsageError naming `what` when DeepSpeed's swizzle_quant / quantized_reduction are
// undefined for `numel` elements in `groups` groups over nodes x devices ranks.
void check_swizzle_shape(int64_t numel, int64_t groups, int nodes, int devices, const std::string& what);

// ds_swizzle_quant(x, groups, 4, Symmetric, 1, nodes, devices): x any float dtype (read as fp16).
Int4Quantized swizzle_quant(const at::Tensor& x, int64_t groups, int nodes, int devices);

// quantized_reduction(data, scales, in_groups, out_groups, 4, Symmetric, devices): data int8
// [devices * T], scales float [in_groups] (in_groups / devices per piece).
Int4Quantized quantized_reduction(const at::Tensor& data, const at::Tensor& scales, int64_t in_groups,
                                  int64_t out_groups, int devices);

// dequantize<__half>(data, scales, groups, 4, Symmetric): fp16 [2 * data.numel()].
at::Tensor dequantize_int4(const at::Tensor& data, const at::Tensor& scales, int64_t groups);

}  // namespace zb::backends::deepspeed_family
