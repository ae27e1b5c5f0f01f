// device.hpp — the device a rank computes on. Owns: choosing it, synchronising it, timing a
// region device-synchronised (CUDA events on GPU, a steady clock after a sync on CPU), naming
// it, refusing ranks that would share a GPU under NCCL, and the datasheet peak FLOP/s (by exact SKU,
// runtime/gpu_skus.hpp). Everything CUDA-specific lives in cuda_device.cpp, compiled
// only with -DZEROBENCH_CUDA=ON/auto; the CPU build gets clear errors instead.
#pragma once
#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace zb::runtime {

bool cuda_built();       // this binary has the CUDA path compiled in
bool cuda_available();   // ... and a GPU is visible
// "cpu" | "cuda". On CUDA: GPU local_rank % count, after checking that the `local_ranks` ranks of
// this machine have a GPU each and that one CUDA stack is loaded (runtime/env_gate.hpp).
at::Device pick_device(const std::string& kind, int local_rank, int local_ranks = 1);
// NCCL cannot run two ranks on one GPU ("Duplicate GPU detected"): `local_ranks` > `gpu_count`
// throws a UsageError naming --emulate-world-size. Pure (tests inject the count).
void check_one_rank_per_gpu(int local_ranks, int gpu_count);
// The same from this machine's CUDA device count, before ranks start (the launcher): a no-op for
// "cpu" or where no GPU is visible (pick_device then says so in each rank).
void check_local_ranks_fit(const std::string& kind, int local_ranks);
void synchronize(at::Device device);
std::string device_name(at::Device device);  // "NVIDIA H100 80GB HBM3", "cpu: <model name>"
int device_count(at::Device device);
int64_t device_total_memory_bytes(at::Device device);  // a GPU's total memory; -1 on CPU

// Dense bf16 peak TFLOP/s from the datasheet (DESIGN §4) by exact SKU (runtime/gpu_skus.hpp),
// from the device name and (when > 0) its total memory; nullopt for a MIG slice or an unknown name.
std::optional<double> datasheet_peak_tflops(const std::string& device_name, int64_t total_memory_bytes = -1);
// The same for `math` "bf16", "tf32" (fp32 matmuls on tensor cores) or "fp32" (CUDA cores);
// NVIDIA's dense (no sparsity) figures.
std::optional<double> datasheet_peak_tflops(const std::string& device_name, const std::string& math,
                                            int64_t total_memory_bytes = -1);

// Times a region on the device: start() ... stop() returns seconds.
class RegionTimer {
 public:
  virtual ~RegionTimer() = default;
  virtual void start() = 0;
  virtual double stop_s() = 0;
};
std::unique_ptr<RegionTimer> make_region_timer(at::Device device);

// A marker in the device's current stream (FSDP's rate limiter records one after each
// reshard). On CPU every kernel has run by the time the host records it, so it is complete.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual void record() = 0;
  virtual void synchronize() = 0;  // blocks the host until the work before record() finished
};
std::unique_ptr<DeviceEvent> make_device_event(at::Device device);

// Versions for the report's env section.
std::string cuda_runtime_version();  // "" without CUDA
std::string nccl_version();          // "" without NCCL
std::string gpu_driver_version();    // "" without a GPU

}  // namespace zb::runtime
