// deepspeed_option_effects.cpp — see deepspeed_option_effects.hpp. The sentences paraphrase
// deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig's fields) and runtime/config.py
// (communication_data_type, data_types.grad_accum_dtype).
#include "backends/deepspeed_family/deepspeed_option_effects.hpp"

namespace zb::backends::deepspeed_family {

std::vector<OptionEffect> deepspeed_option_effects() {
  return {
      {"stage", "ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 also parameters"},
      {"reduce_bucket_size",
       "elements per gradient reduce bucket: the IPG buffer's bytes per rank and how many "
       "reduce-scatters a step issues"},
      {"overlap_comm", "gradient reduction overlapped with backward (two buckets alternate)"},
      {"contiguous_gradients", "gradients copied into one contiguous buffer as they are produced"},
      {"communication_data_type", "dtype of the gradient reduce-scatter"},
      {"grad_accum_dtype", "dtype gradients are accumulated in between micro-batches"},
      {"model_dtype", "dtype of the partitioned parameters and of the compute"},
      {"reduces_every_micro_batch", "gradients reduced every micro-batch (DeepSpeed ZeRO-2/3 has no no_sync)"},
      // fp16's dynamic loss scaling (runtime/fp16/loss_scaler.py DynamicLossScaler)
      {"fp16.loss_scale", "0 = dynamic loss scaling; any other value is a fixed scale (overflowing steps are still skipped)"},
      {"fp16.initial_scale_power", "the dynamic scale starts at 2^this: how many early steps overflow and are skipped"},
      {"fp16.loss_scale_window", "steps without overflow before the dynamic scale doubles"},
      {"fp16.hysteresis", "overflows tolerated before the dynamic scale is halved"},
      {"fp16.consecutive_hysteresis", "hysteresis restored after each step without overflow (not only at a raise)"},
      {"fp16.min_loss_scale", "floor of the dynamic scale"},
      {"fp16.scaler", "the loss-scaling class that checks overflow and skips steps (DeepSpeed's, or its fp16 optimizer wrapper's)"},
      // offload_optimizer (runtime/zero/offload_config.py DeepSpeedZeroOffloadOptimizerConfig)
      {"offload_optimizer.device",
       "where the fp32 masters and Adam states live: cpu moves them to host memory and runs the optimizer step "
       "there (less device memory, gradients and parameters cross PCIe every step)"},
      {"offload_optimizer.pin_memory", "host buffers page-locked: faster, asynchronous device-host copies; pinned host memory"},
      {"offload.optimizer", "optimizer offload as resolved (none|cpu): where the optimizer states live and step"},
      {"host_optimizer", "the optimizer that steps offloaded states on the host (DeepSpeedCPUAdam or torch AdamW)"},
  };
}

}  // namespace zb::backends::deepspeed_family
