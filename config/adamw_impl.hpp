// adamw_impl.hpp — which of torch.optim.AdamW's three implementations steps the parameters.
// torch/optim/adam.py has a for-loop (`_single_tensor_adam`), a foreach (`_multi_tensor_adam`)
// and a fused (`_fused_adam`: at::_fused_adamw_) implementation of one update; they round
// differently in the last bit, so a run is only bitwise-comparable with the one its user's
// framework picks:
//  - HF Trainer's default `--optim adamw_torch_fused` (transformers >= 4.55 with torch >= 2.8):
//    fused=True;
//  - `--optim adamw_torch`, and DeepSpeed's `torch_adam: true` (engine.py
//    get_optimizer_configuration passes `foreach=params.pop("foreach", None)`): torch's default,
//    foreach=None, which `_default_to_fused_or_foreach` turns into foreach where every parameter is
//    on a foreach device (CUDA) and the for-loop elsewhere (CPU: DeepSpeed's offloaded fp32
//    partitions, a CPU run);
//  - an explicit foreach=true/false or fused=true in DeepSpeed's optimizer params.
// Owns: the enum, its names, and the device rule for kTorchDefault.
#pragma once
#include <stdexcept>
#include <string>

namespace zb::config {

enum class AdamWImpl {
  kFused,         // fused=True: at::_fused_adamw_ over the tensor lists
  kTorchDefault,  // foreach=None, fused=None: foreach on CUDA, the for-loop elsewhere
  kForeach,       // foreach=True: the _foreach_* ops
  kForLoop,       // foreach=False: one tensor at a time
};

// "fused", "default", "foreach", "for-loop" (the report's config.train.adamw_impl).
inline const char* adamw_impl_name(AdamWImpl i) {
  switch (i) {
    case AdamWImpl::kFused: return "fused";
    case AdamWImpl::kTorchDefault: return "default";
    case AdamWImpl::kForeach: return "foreach";
    case AdamWImpl::kForLoop: return "for-loop";
  }
  return "fused";
}

inline AdamWImpl adamw_impl_from_name(const std::string& s) {
  if (s == "fused") return AdamWImpl::kFused;
  if (s == "default") return AdamWImpl::kTorchDefault;
  if (s == "foreach") return AdamWImpl::kForeach;
  if (s == "for-loop") return AdamWImpl::kForLoop;
  throw std::invalid_argument("adamw_impl '" + s + "' is not fused, default, foreach or for-loop");
}

// kTorchDefault resolved as torch resolves foreach=None for parameters on `cuda` (a CUDA device)
// or not: torch.optim.optimizer._default_to_fused_or_foreach (foreach kernels: cuda, xpu).
inline AdamWImpl resolve_adamw_impl(AdamWImpl i, bool cuda) {
  if (i != AdamWImpl::kTorchDefault) return i;
  return cuda ? AdamWImpl::kForeach : AdamWImpl::kForLoop;
}

// The constructor's implementation keywords: "fused=True", "foreach=None", "foreach=True",
// "foreach=False".
inline std::string adamw_kwargs(AdamWImpl i) {
  switch (i) {
    case AdamWImpl::kFused: return "fused=True";
    case AdamWImpl::kTorchDefault: return "foreach=None";
    case AdamWImpl::kForeach: return "foreach=True";
    case AdamWImpl::kForLoop: return "foreach=False";
  }
  return "fused=True";
}

// The constructor call it stands for, for reports: "torch.optim.AdamW(fused=True)", ...
inline std::string adamw_constructor(AdamWImpl i) { return "torch.optim.AdamW(" + adamw_kwargs(i) + ")"; }

// For reports: the constructor call, with what foreach=None became on this device —
// "torch.optim.AdamW(fused=True)", "torch.optim.AdamW(foreach=None: for-loop)", ...
inline std::string adamw_description(AdamWImpl i, bool cuda) {
  if (i != AdamWImpl::kTorchDefault) return adamw_constructor(i);
  return std::string("torch.optim.AdamW(foreach=None: ") + adamw_impl_name(resolve_adamw_impl(i, cuda)) + ")";
}

}  // namespace zb::config
