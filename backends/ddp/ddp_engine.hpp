// ddp_engine.hpp — the plain data-parallel reference engine, registered as "ddp".
// Owns: a full replica per rank in one flat buffer, gradients as views into one flat gradient
// buffer (DDP's gradient_as_bucket_view), bucketed all-reduce (bucket_cap_mb, reverse order)
// after the last micro-batch, AdamW on the whole buffer. Precisions: fp32; low (everything
// bf16); mixed (fp32 parameters and gradients, bf16 compute — what autocast gives DDP).
#pragma once
#include "backends/engine.hpp"

namespace zb::backends::ddp {
BackendInfo backend_info();
}  // namespace zb::backends::ddp
