// swizzled_quant.cpp — qgZ's swizzle_quant, quantized_reduction and dequantize with ATen ops (see
// swizzled_quant.hpp for the upstream lines followed and what differs).
#include "backends/deepspeed_family/swizzled_quant.hpp"

#include "backends/deepspeed_family/blockwise_quant.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::deepspeed_family {

namespace {
// swizzled_quantize.cu launch_swizzled_quant_impl: 16-byte loads (8 halves) per thread, at most 512
// threads and total_unroll 10 (5 steps of 512 x 16 halves): larger groups launch no kernel.
constexpr int64_t kHalvesPerLoad = 8;
constexpr int64_t kMaxGroupElems = 5 * 512 * 2 * kHalvesPerLoad;  // 40960
}  // namespace

void check_swizzle_shape(int64_t numel, int64_t groups, int nodes, int devices, const std::string& what) {
  const int64_t ranks = int64_t(nodes) * devices;
  auto refuse = [&](const std::string& why) {
    throw UsageError("zero_quantized_gradients: " + what + " (" + std::to_string(numel) + " elements in " +
                     std::to_string(groups) + " quantization groups over " + std::to_string(nodes) + " nodes x " +
                     std::to_string(devices) + " ranks): " + why +
                     "; DeepSpeed's swizzle_quant kernel is undefined there (csrc/quantization/swizzled_quantize.cu)");
  };
  if (groups <= 0 || numel % groups != 0) refuse("the groups do not divide the elements");
  if (groups % ranks != 0) refuse("the groups are not a multiple of the world (groups_per_partition is floored)");
  const int64_t per_group = numel / groups;
  if (per_group % kHalvesPerLoad != 0) refuse("a group is not a multiple of 8 elements (16-byte loads)");
  if (per_group > kMaxGroupElems) refuse("a group of more than 40960 elements launches no kernel");
}

Int4Quantized swizzle_quant(const at::Tensor& x, int64_t groups, int nodes, int devices) {
  check_swizzle_shape(x.numel(), groups, nodes, devices, "swizzle_quant");
  const auto q = quantize_blockwise(x.reshape({-1}), groups, 4, /*symmetric=*/true);  // group order of x
  const int64_t gpp = groups / (int64_t(nodes) * devices);                            // groups_per_partition
  const int64_t bytes_per_group = q.data.numel() / groups;
  // Input partition z = n * devices + l (node n, local l) goes to output partition l * nodes + n:
  // [nodes, devices, gpp, ...] -> [devices, nodes, gpp, ...].
  Int4Quantized out;
  out.groups = groups;
  out.data = q.data.view({nodes, devices, gpp, bytes_per_group}).transpose(0, 1).contiguous().view({-1});
  out.scales = q.params.view({nodes, devices, gpp, 1}).transpose(0, 1).contiguous().view({groups, 1});
  return out;
}

at::Tensor dequantize_int4(const at::Tensor& data, const at::Tensor& scales, int64_t groups) {
  return dequantize_blockwise_fp32(data, scales, groups, 4, /*symmetric=*/true).to(at::kHalf);
}

Int4Quantized quantized_reduction(const at::Tensor& data, const at::Tensor& scales, int64_t in_groups,
                                  int64_t out_groups, int devices) {
  TORCH_CHECK(data.numel() % devices == 0 && in_groups % devices == 0, "quantized_reduction: ", data.numel(),
              " bytes and ", in_groups, " groups over ", devices, " pieces");
  const int64_t piece_bytes = data.numel() / devices;  // elems_per_in_tensor
  const int64_t piece_groups = in_groups / devices;    // groups_per_in_tensor
  TORCH_CHECK(piece_bytes % out_groups == 0, "quantized_reduction: ", out_groups, " output groups of ", piece_bytes,
              " bytes");
  const auto pieces = data.view({devices, piece_bytes});
  const auto piece_scales = scales.reshape({devices, piece_groups});
  // dequant_reduce: reduce::init<Add, __half2>() = 0, then piece 0, 1, ... added in fp16 (ATen's
  // fp16 add computes in fp32 and rounds once: equal to the __hadd2 result, as fp32 has more than
  // 2 x 11 + 2 significand bits).
  at::Tensor sum = at::zeros({piece_bytes * 2}, data.options().dtype(at::kHalf));
  for (int j = 0; j < devices; ++j) sum = sum + dequantize_int4(pieces[j], piece_scales[j], piece_groups);
  const auto q = quantize_blockwise(sum, out_groups, 4, /*symmetric=*/true);
  return {q.data, q.params, out_groups};
}

}  // namespace zb::backends::deepspeed_family
