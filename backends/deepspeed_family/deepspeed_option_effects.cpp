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
  };
}

}  // namespace zb::backends::deepspeed_family
