// engine.hpp — the one interface every training backend implements.
// Owns: the Engine contract, the training/run configuration it receives, the model-state byte
// categories of DESIGN §8 and the peak-estimate value type. The backend descriptor and the
// registry are in backends/backend_info.hpp. Must not: run the training loop
// (bench/trainer) or know a particular backend's internals.
#pragma once
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/common/lost_updates.hpp"
#include "backends/common/offload_traffic.hpp"
#include "config/adamw_impl.hpp"
#include "config/deepspeed_scheduler_value.hpp"
#include "models/activation_checkpointing.hpp"
#include "models/model_config.hpp"

// Named here by reference or pointer only: their headers are included where they are used.
namespace zb::models {
struct Batch;            // models/data.hpp
class UnitWeightSource;  // models/weight_source.hpp
}  // namespace zb::models
namespace zb::backends::common {
class Comm;  // backends/common/comm.hpp
}  // namespace zb::backends::common

#include "backends/backend_options.hpp"  // EngineSpec::options

namespace zb::backends {

struct TrainConfig {
  int64_t micro_batch = 4;   // samples per rank per micro-batch
  int64_t seq_len = 128;
  int64_t grad_accum = 1;    // micro-batches per optimizer step
  // accelerate's GradientAccumulationPlugin(sync_each_batch=True): reduce gradients after every
  // micro-batch instead of only the last (non-final ones run under no_sync by default).
  bool sync_each_batch = false;
  int64_t steps = 10;        // optimizer steps in total (warm-up included)
  int64_t warmup = 2;        // steps excluded from timing statistics
  double lr = 3e-3;
  // constant | cosine (linear warm-up, cosine to min_lr); a DeepSpeed config's scheduler type
  // (deepspeed_scheduler then gives every step's lr), or "none" (its section has no type).
  std::string lr_schedule = "cosine";
  int64_t lr_warmup_steps = 0;
  double lr_warmup_ratio = 0;  // --lr-warmup-ratio (HF's warmup_steps < 1): lr_warmup_steps = ceil(steps x it)
  double min_lr_ratio = 0.1;
  config::DeepSpeedScheduler deepspeed_scheduler;  // lr in it is the optimizer's lr
  double weight_decay = 0.0;  // HF Trainer's default
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // Which torch.optim.AdamW implementation (config/adamw_impl.hpp): HF Trainer's default fused=True,
  // or what --optim adamw_torch / DeepSpeed's torch_adam pick.
  config::AdamWImpl adamw_impl = config::AdamWImpl::kFused;
  double grad_clip = 1.0;     // max global grad norm; 0 disables
  uint64_t seed = 1234;
  // --activation-checkpointing none|full|selective-layer:N (models/activation_checkpointing.hpp)
  models::ActivationCheckpointing activation_checkpointing;
  std::string data = "markov";
  std::string batching;  // --batching pad|pack|pack-naive; "": pack-naive for a file (docs/data.md)
  bool measure_lost_updates = false;  // the precision study's rounding diagnostic
};

// Model-state bytes a rank keeps in host memory under offload (FSDP1 CPUOffload, FSDP2
// CPUOffloadPolicy, DeepSpeed offload_optimizer / offload_param); all zero without offload.
struct HostStateBytes {
  int64_t params = 0, master_params = 0, grads = 0, optimizer = 0, buffers = 0;
  bool pinned = false;  // page-locked (pin_memory) on a GPU run; on CPU: where they would live
  int64_t total() const { return params + master_params + grads + optimizer + buffers; }
  bool operator==(const HostStateBytes& o) const {
    return params == o.params && master_params == o.master_params && grads == o.grads && optimizer == o.optimizer &&
           buffers == o.buffers && pinned == o.pinned;
  }
};

// Storage the engine owns, per rank, in bytes (DESIGN §8). The five categories are what lives on
// the device (on a CPU-only run, the memory that stands for it); `host` is what offload keeps in
// host memory. Without offload `host` is all zero and the categories are everything.
struct ModelStateBytes {
  int64_t params = 0;         // sharded or kept-whole parameter storage
  int64_t master_params = 0;  // a separate fp32 copy, if any
  int64_t grads = 0;          // gradient storage
  int64_t optimizer = 0;      // optimizer states
  int64_t buffers = 0;        // persistent communication buffers (ZeRO-3's IPG bucket); 0 if none
  HostStateBytes host;        // offloaded to host memory
  int64_t total() const { return params + master_params + grads + optimizer + buffers; }  // device
  int64_t all_total() const { return total() + host.total(); }                              // device + host
  bool operator==(const ModelStateBytes& o) const {
    return params == o.params && master_params == o.master_params && grads == o.grads && optimizer == o.optimizer &&
           buffers == o.buffers && host == o.host;
  }
};
// {params, master_params, grads, optimizer, buffers} (device), plus "host": {the same, pinned}
// when anything is offloaded.
nlohmann::json to_json(const ModelStateBytes& b);

// fp16 loss scaling (backends/common/loss_scaler.hpp) in the last optimizer step: what the trainer
// reports per step. An engine without loss scaling reports enabled = false.
struct LossScaleStep {
  bool enabled = false;
  std::string kind;       // "dynamic" (DeepSpeed DynamicLossScaler) | "static" | "grad_scaler" (torch)
  double scale = 1;       // the scale this step's backward ran with
  bool overflow = false;  // some gradient was inf/NaN on some rank
  bool skipped = false;   // the optimizer step was skipped (no update, step counters unchanged)
  double next_scale = 1;  // the scale after the update, for the next step
};

struct EngineSpec {
  models::ModelConfig model;
  TrainConfig train;
  std::string precision = "fp32";  // backend-specific names (fp32|low|mixed, zero3: fp32|bf16)
  // The backend's options struct, parsed and validated once at resolution (read_config /
  // apply_flags) and read through the backend's accessor (e.g. zero3::zero3_options); a raw
  // object (tests, model-info's offload choices) is parsed there on first use. JSON, named as
  // the framework names it, only at the report's edge (options.json()).
  BackendOptions options;
  // Initial weights from a checkpoint (--model-dir, by a load strategy); null = the seeded init.
  // Engines read them through backends/common/initial_weights.hpp.
  std::shared_ptr<models::UnitWeightSource> initial_weights;
};

// One optimizer step's hyper-parameters (Engine::optimizer_step; common::hyper_at gives them): the
// lr, and AdamW's betas — TrainConfig's beta1/beta2, or what a DeepSpeed OneCycle scheduler with
// cycle_momentum sets that step (beta1 the cycled momentum, beta2 0.99).
struct StepHyper {
  double lr = 0;
  double beta1 = 0.9, beta2 = 0.999;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string name() const = 0;
  // Forward + backward of one micro-batch; the loss is multiplied by loss_scale (1/grad_accum)
  // before backward. last_micro_batch: gradients are synchronised after this one.
  // Returns the unscaled loss (fp32 scalar, detached).
  virtual at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) = 0;
  // Clip to train.grad_clip by global norm, AdamW at h's lr and betas, zero gradients.
  // Returns the global gradient norm before clipping.
  virtual double optimizer_step(const StepHyper& h) = 0;
  // Storage owned now (call at the end of the last micro-batch's backward).
  virtual ModelStateBytes model_state_bytes() const = 0;
  // Every option as resolved (defaults filled in), named as the framework names it.
  virtual nlohmann::json resolved_options() const = 0;
  // Collective: the full parameters of each unit as fp32 flat tensors [unit numel] (tests,
  // checkpoints). Every rank gets them.
  virtual std::vector<at::Tensor> full_parameters() = 0;
  virtual common::Comm& comm() = 0;
  // Checkpoints (docs/lifecycle.md): this rank's whole training state as named tensors — its
  // shards of the parameters, fp32 masters, optimizer states and step counters — each the live
  // storage: a checkpoint writes them, a resume copies saved values into them and then calls
  // state_loaded(). Empty when the engine cannot checkpoint.
  virtual std::vector<std::pair<std::string, at::Tensor>> state_tensors() { return {}; }
  virtual void state_loaded() {}
  // This rank's count of updates lost to rounding in the last optimizer step (all zero
  // unless train.measure_lost_updates).
  virtual common::LostUpdates lost_updates() const = 0;
  // Bytes copied between host and device since the engine was made (offload; zero without).
  // The trainer reports each step's difference.
  virtual common::OffloadTraffic offload_traffic() const { return {}; }
  // fp16: the loss scale, overflow and skip of the last optimizer_step (the engine multiplies its
  // loss by the scale in forward_backward and unscales before clipping, as upstream does).
  virtual LossScaleStep loss_scale_step() const { return {}; }
};

// The pre-flight estimate of one rank's peak memory (backends/memory_estimate.cpp, formulas in
// docs/metrics.md): named terms, each held at some moments of the step. "resident": the whole
// step; "forward_backward": from forward into backward (at both moments below); "loss_head": the
// start of backward (the loss head's backward, all activations held); "backward": a block's
// backward; "end_of_backward": after the last gradient (activations freed); "optimizer_step".
// The peak is resident + the largest moment.
struct PeakEstimate {
  struct Term {
    std::string name;
    std::string phase;
    int64_t bytes = 0;
    std::string formula;
    std::string location = "device";  // "device" | "host" (offloaded states, host staging buffers)
  };
  std::vector<Term> terms;
  // The topology the estimate was made for and the shard group it implies (the ranks a
  // parameter is sharded over: W, FSDP1 HYBRID_SHARD's node, FSDP2's dp_shard; 1 unsharded).
  int world = 1, ranks_per_node = 1, shard_group = 1;
  // A CPU-only run: host terms live in the same memory as device terms (the counting CPU
  // allocator measures both), so peak_bytes() counts them too.
  bool host_is_device = false;
  int64_t phase_bytes(const std::string& phase, const std::string& location = "device") const;
  int64_t moment_bytes(const std::string& moment, const std::string& location = "device") const;  // resident excluded
  int64_t peak_bytes() const;       // the device's peak (with the host's terms when host_is_device)
  std::string peak_phase() const;   // the moment that peaks
  int64_t host_peak_bytes() const;  // the host terms' peak alone (0 without offload)
};
nlohmann::json to_json(const PeakEstimate& e);

struct BackendInfo;  // the descriptor a backend registers: backends/backend_info.hpp

}  // namespace zb::backends
