// gpu_skus.cpp — datasheet peaks by exact SKU (see gpu_skus.hpp).
// Figures: NVIDIA's datasheets, dense (the datasheets print with-sparsity numbers, "*"; dense is
// half): A100 (SXM4 and PCIe, 40 and 80 GB) BF16 312 / TF32 156 / FP32 19.5 (A100 datasheet);
// H100 SXM BF16 989 / TF32 494.7 / FP32 67; H100 PCIe 756 / 378 / 51; H100 NVL 835.5 / 417.5 / 60
// (H100 datasheet: 1,979* / 1,513* / 1,671* BF16); H200 SXM as H100 SXM, H200 NVL as H100 NVL
// (H200 datasheet); GH200's Hopper GPU as H100 SXM (GH200 datasheet: 1,979* BF16).
#include "runtime/gpu_skus.hpp"

#include <algorithm>
#include <cctype>

namespace zb::runtime {

namespace {
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return s;
}
bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

constexpr double kA100[3] = {312, 156, 19.5};
}  // namespace

std::optional<GpuSku> gpu_sku(const std::string& device_name, int64_t total_memory_bytes) {
  const std::string n = upper(device_name);
  // "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA H100 80GB HBM3 MIG 3g.40gb": a slice of the GPU.
  if (has(n, " MIG")) return std::nullopt;
  std::optional<GpuSku> sku;
  const bool pcie = has(n, "PCIE"), nvl = has(n, "NVL");
  if (has(n, "GH200")) {
    sku = GpuSku{"GH200", 96, 989, 494.7, 67};  // 96 GB HBM3 (144 GB HBM3e on the later part)
  } else if (has(n, "H200")) {
    sku = nvl ? GpuSku{"H200 NVL", 141, 835.5, 417.5, 60} : GpuSku{"H200", 141, 989, 494.7, 67};
  } else if (has(n, "H100")) {
    if (nvl) sku = GpuSku{"H100 NVL", 94, 835.5, 417.5, 60};
    else if (pcie) sku = GpuSku{"H100 PCIe", 80, 756, 378, 51};
    else sku = GpuSku{"H100 SXM", 80, 989, 494.7, 67};  // "NVIDIA H100 80GB HBM3"
  } else if (has(n, "A100")) {
    // "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe".
    const double gb = has(n, "80GB") ? 80 : 40;
    sku = GpuSku{std::string("A100 ") + (pcie ? "PCIe " : "SXM ") + (gb == 80 ? "80GB" : "40GB"), gb, kA100[0], kA100[1],
                 kA100[2]};
  }
  if (!sku) return std::nullopt;
  // A device with much less memory than its SKU is a slice of it (a MIG instance whose name does
  // not say so): its compute is a fraction too. 0.9: the usable total is ~93-99% of nominal.
  if (total_memory_bytes > 0 && double(total_memory_bytes) < 0.9 * sku->memory_gb * 1e9) return std::nullopt;
  return sku;
}

std::optional<double> sku_peak_tflops(const GpuSku& sku, const std::string& math) {
  if (math == "bf16" || math == "fp16") return sku.bf16_tflops;
  if (math == "tf32") return sku.tf32_tflops;
  if (math == "fp32") return sku.fp32_tflops;
  return std::nullopt;
}

}  // namespace zb::runtime
