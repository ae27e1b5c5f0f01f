// gpu_skus.hpp — the datasheet peak FLOP/s that MFU divides by, by exact GPU SKU. Owns: telling
// the SKU from the device name (as cudaGetDeviceProperties / torch.cuda.get_device_name /
// nvidia-smi print it) and its memory size, and NVIDIA's dense (no sparsity) figures for it.
// A MIG slice (its name says "MIG", or it has far less memory than its SKU) or an unknown name
// has no datasheet figure: the caller measures a GEMM instead (bench/run/peak.cpp).
// Must not: touch a device (pure, tested on CPU with the names the tools print).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace zb::runtime {

struct GpuSku {
  std::string name;                   // "H100 SXM", "H100 PCIe", "H100 NVL", "H200", "H200 NVL", "GH200", "A100 SXM 80GB", ...
  double memory_gb = 0;               // the SKU's nominal memory (GB = 1e9 bytes)
  double bf16_tflops = 0, tf32_tflops = 0, fp32_tflops = 0;  // dense
};

// nullopt: a MIG slice or an unknown device. `total_memory_bytes` <= 0: unknown (name only).
std::optional<GpuSku> gpu_sku(const std::string& device_name, int64_t total_memory_bytes);

// The figure for `math` "bf16" (also fp16), "tf32" (fp32 matmuls on tensor cores) or "fp32" (CUDA cores).
std::optional<double> sku_peak_tflops(const GpuSku& sku, const std::string& math);

}  // namespace zb::runtime
