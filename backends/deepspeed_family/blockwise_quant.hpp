// blockwise_quant.hpp — DeepSpeed's blockwise int8/int4 quantizer (the one ZeRO++ uses: qwZ's
// weight all-gather, qgZ's gradient all-to-all) written with ATen ops, so it runs on any device.
// Owns: the group layout, the symmetric/asymmetric rule, rounding, clamping, int4 packing, the
// per-group parameters (scales) and CUDAQuantizer's choice of the number of groups.
// Must not: communicate, or decide which tensors are quantized (backends/zero3/zero3_zeropp.hpp).
//
// Upstream (DeepSpeed 0.19.8 / deepspeedai/DeepSpeed@edaa722):
//  - csrc/quantization/pt_binding.cpp quantize_kernel / dequantize<__half>: input read as __half,
//    `groups` contiguous groups of numel/groups elements, output int8 (int4: two per byte),
//    params float32 [groups, 1] (symmetric) or [groups, 2] (asymmetric: scale, offset);
//  - csrc/includes/quantization_utils.h Params<Symmetric>: scale = (1 << bits) / (2 * absmax)
//    (absmax 0 -> scale 1), q = clamp(__float2int_rn(float(x) * scale), -2^(b-1), 2^(b-1)-1),
//    stored param 1/scale; Params<Asymmetric>: scale = (1 << bits) / (max - min) (max == min -> 1),
//    offset = (max + min) / 2, q = clamp(rn((x - offset) * scale)), stored {1/scale, offset};
//    _chunk: int4 packed as PackedInt4{high: x[i+1], low: x[i]} (csrc/includes/quantization.h),
//    i.e. on a little-endian bit-field layout x[i] in the high nibble, x[i+1] in the low one;
//  - csrc/includes/dequantization_utils.h: x = float(q) * param (+ offset), stored as T (__half
//    for `dequantize`, the binding CUDAQuantizer.dequantize calls).
//  - deepspeed/runtime/zero/partition_parameters.py CUDAQuantizer.quantize: the adaptive group count
//    (below) and `param.to(device, dtype=torch.half)` before the kernel.
// What differs from the CUDA kernels (they are built with --use_fast_math, op_builder/builder.py):
// the divisions (1 << bits) / (2 * absmax) and 1 / scale are IEEE-rounded here, approximate
// (div.approx.f32, up to 2 ulp) there; a scale off by an ulp can move a value sitting exactly on a
// rounding boundary by one quantization step. Everything else (fp16 input, fp32 scales, round half
// to even, clamping, group layout, packing) is the same. tests/test_zeropp.cpp checks this file
// bitwise against DeepSpeed's Python reference (scripts/crossval/quantizer_reference.py).
// Belongs to the DeepSpeed family (backends/deepspeed_family/), used by zero3 (qwZ, qgZ) and swizzled_quant.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace zb::backends::deepspeed_family {

struct BlockwiseQuantized {
  at::Tensor data;    // int8 [numel] (bits 8) or [numel / 2] (bits 4: two values per byte)
  at::Tensor params;  // float32 [groups, 1] symmetric (1/scale), [groups, 2] asymmetric (1/scale, offset)
  int64_t groups = 0;
  int bits = 8;
  bool symmetric = true;
};

// CUDAQuantizer.quantize's number of groups for a tensor of `numel` elements: ceil(numel / 8000),
// raised until numel % (8 * groups) == 0, doubled while numel % (16 * groups) == 0 and
// numel / groups > 8000. Throws UsageError naming `what` where DeepSpeed's asserts fail
// (numel not a multiple of 8 * groups, a group of 16000 or more, numel <= groups).
int64_t weight_quant_groups(int64_t numel, const std::string& what);

// x (any float dtype) is read as fp16 (the kernel's __half input), then quantized in `groups`
// contiguous groups. Requires numel % groups == 0 (and, for 4 bits, an even group size).
BlockwiseQuantized quantize_blockwise(const at::Tensor& x, int64_t groups, int bits, bool symmetric);

// The dequantized values in fp32, before the kernel's final store as __half: float(q) * param
// (+ offset). Callers cast: .to(at::kHalf) is what DeepSpeed's `dequantize` returns.
at::Tensor dequantize_blockwise_fp32(const at::Tensor& data, const at::Tensor& params, int64_t groups, int bits,
                                     bool symmetric);

// dequantize<__half> then `.to(dtype)` (CUDAQuantizer.dequantize(..., dtype)).
at::Tensor dequantize_blockwise(const BlockwiseQuantized& q, at::ScalarType dtype);

// int4: two values per byte, x[2i] in the high nibble (upstream's int4x2to2xint4 reads them back).
at::Tensor pack_int4(const at::Tensor& values);  // int8 [n] in [-8, 7], n even -> int8 [n / 2]
at::Tensor unpack_int4(const at::Tensor& packed);  // int8 [n / 2] -> int8 [n], sign-extended

}  // namespace zb::backends::deepspeed_family
