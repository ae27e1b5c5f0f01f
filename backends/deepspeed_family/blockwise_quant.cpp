// blockwise_quant.cpp — DeepSpeed's blockwise quantizer with ATen ops (see blockwise_quant.hpp for
// the upstream lines followed and what differs).
#include "backends/deepspeed_family/blockwise_quant.hpp"

#include <string>

#include "runtime/errors.hpp"

namespace zb::backends::deepspeed_family {

int64_t weight_quant_groups(int64_t numel, const std::string& what) {
  constexpr int64_t kTarget = 8000;  // CUDAQuantizer.target_group_size
  auto refuse = [&](const std::string& why) {
    throw UsageError("zero_quantized_weights: " + what + " has " + std::to_string(numel) +
                     " elements per partition: " + why + " (DeepSpeed's CUDAQuantizer asserts the same)");
  };
  if (numel <= 0) refuse("nothing to quantize");
  int64_t groups = (numel + kTarget - 1) / kTarget;  // math.ceil(numel / target_group_size)
  while (groups < numel) {
    if (numel % (8 * groups) == 0) break;
    ++groups;
  }
  if (numel % 8 != 0) refuse("not a multiple of 8");  // no group count can satisfy numel % (8 * groups) == 0
  // `numel / groups > target` is a true division upstream: numel > target * groups.
  while (numel % (8 * groups * 2) == 0 && numel > kTarget * groups) groups *= 2;
  if (numel % (8 * groups) != 0) refuse("not a multiple of 8 * " + std::to_string(groups) + " groups");
  if (double(numel) / double(groups) >= 16000) refuse("a group of 16000 or more");
  if (numel <= groups) refuse("no group size found");
  return groups;
}

at::Tensor pack_int4(const at::Tensor& values) {
  TORCH_CHECK(values.numel() % 2 == 0, "pack_int4: odd number of values");
  auto v = values.reshape({-1, 2}).to(at::kInt);
  // high nibble: the first of the pair; low nibble: the second (PackedInt4{high: x[i+1], low: x[i]}
  // as a little-endian bit field).
  auto byte = (v.select(1, 0).bitwise_and(0xF).bitwise_left_shift(4)).bitwise_or(v.select(1, 1).bitwise_and(0xF));
  return byte.to(at::kByte).view(at::kChar);  // two's-complement bits, as the kernel stores them
}

at::Tensor unpack_int4(const at::Tensor& packed) {
  auto b = packed.view(at::kChar).to(at::kInt);
  auto high = b.bitwise_right_shift(4);                              // arithmetic: sign-extended
  auto low = b.bitwise_left_shift(28).bitwise_right_shift(28);       // (x << 4) >> 4 on 8 bits
  return at::stack({high, low}, 1).flatten().to(at::kChar);
}

BlockwiseQuantized quantize_blockwise(const at::Tensor& x, int64_t groups, int bits, bool symmetric) {
  TORCH_CHECK(bits == 8 || bits == 4, "quantize_blockwise: bits must be 8 or 4, got ", bits);
  TORCH_CHECK(groups > 0 && x.numel() % groups == 0, "quantize_blockwise: ", x.numel(), " elements in ", groups,
              " groups");
  const int64_t per_group = x.numel() / groups;
  TORCH_CHECK(bits == 8 || per_group % 2 == 0, "quantize_blockwise: int4 needs an even group size");
  // The kernel reads __half and computes in float: fp16 rounding first, then exact widening.
  const auto v = x.detach().reshape({groups, per_group}).to(at::kHalf).to(at::kFloat);  // [G, n]
  const float q_range = float(1 << bits);
  const int64_t q_min = -(int64_t(1) << (bits - 1)), q_max = (int64_t(1) << (bits - 1)) - 1;
  BlockwiseQuantized out;
  out.groups = groups;
  out.bits = bits;
  out.symmetric = symmetric;
  at::Tensor scale, scaled;
  if (symmetric) {
    const auto absmax = v.abs().amax(1, /*keepdim=*/true);  // [G, 1]
    // A true division (ATen's `scalar / tensor` would be reciprocal() * scalar; equal here, as
    // q_range is a power of two, but say what the kernel does).
    scale = at::where(absmax == 0, at::ones_like(absmax), at::full_like(absmax, q_range).div(absmax * 2));
    scaled = v * scale;
    out.params = scale.reciprocal();  // [G, 1]: store_scale = 1 / scale
  } else {
    const auto mx = v.amax(1, true), mn = v.amin(1, true);
    scale = at::where(mx == mn, at::ones_like(mx), at::full_like(mx, q_range).div(mx - mn));
    const auto offset = (mx + mn) / 2;
    scaled = (v - offset) * scale;
    out.params = at::cat({scale.reciprocal(), offset}, 1);  // [G, 2]
  }
  // __float2int_rn: round half to even (at::round), NaN to 0 and +-inf to the int32 range (PTX
  // cvt.rni.s32.f32), then clamp to the signed range. (A group holding an inf has scale 0: its
  // finite values give 0 * x = 0, the inf NaN -> 0; its stored 1/scale is inf, so they all
  // dequantize to NaN, and an fp16 overflow stays visible after qgZ's reduction.)
  const auto q = scaled.nan_to_num(0.0).round().clamp(double(q_min), double(q_max)).to(at::kChar).flatten();
  out.data = bits == 8 ? q : pack_int4(q);
  out.params = out.params.contiguous();
  return out;
}

at::Tensor dequantize_blockwise_fp32(const at::Tensor& data, const at::Tensor& params, int64_t groups, int bits,
                                     bool symmetric) {
  const auto q = (bits == 8 ? data.view(at::kChar) : unpack_int4(data)).to(at::kFloat).reshape({groups, -1});
  const auto p = params.to(at::kFloat).reshape({groups, symmetric ? 1 : 2});
  auto x = q * p.narrow(1, 0, 1);
  if (!symmetric) x = x + p.narrow(1, 1, 1);
  return x.flatten();
}

at::Tensor dequantize_blockwise(const BlockwiseQuantized& q, at::ScalarType dtype) {
  return dequantize_blockwise_fp32(q.data, q.params, q.groups, q.bits, q.symmetric).to(at::kHalf).to(dtype);
}

}  // namespace zb::backends::deepspeed_family
