// crossval_device.hpp — where `zerobench crossval` runs both sides: the device and the process
// group backend the references get (cpu + Gloo, cuda + NCCL), refused up front when it cannot
// run (no CUDA path in this build, no GPU visible, more ranks than GPUs: NCCL cannot put two
// ranks on one GPU, as runtime/device.cpp check_one_rank_per_gpu says for `run`), and the check
// that every reference rank reports having run on the device it was given.
// Must not: run anything, read files, or query the machine (the caller passes what it found:
// pure, so the tests inject GPU counts).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zb::bench {

struct CrossvalDevice {
  std::string kind;            // "cpu" | "cuda": zerobench's --device and the runners' --device
  std::string dist_backend;    // "gloo" | "nccl": torch.distributed / deepspeed.init_distributed
  std::string ds_accelerator;  // DS_ACCELERATOR for DeepSpeed: "cpu" | "cuda"
};

// `device` as given to crossval, `world` ranks on this machine; `cuda_built` / `gpu_count` what
// this binary and machine offer (gpu_count 0 when none is visible). Throws UsageError (exit 2)
// naming the bad value: an unknown device, cuda without a CUDA build or a visible GPU, more
// ranks than GPUs.
CrossvalDevice resolve_crossval_device(const std::string& device, int world, bool cuda_built, int gpu_count);

// Reasons a mode disagrees because a reference rank did not run where it was asked to: each
// rank file (scripts/crossval/common.py) carries "device": {"kind", "backend", ...}; a missing
// or different kind or backend is a reason naming the rank. Empty: every rank ran as asked.
std::vector<std::string> upstream_device_mismatches(const CrossvalDevice& want,
                                                    const std::vector<nlohmann::json>& ranks);

}  // namespace zb::bench
