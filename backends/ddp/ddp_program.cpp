// ddp_program.cpp — DDP's projection program (see ddp_program.hpp), moved from the projection's
// schedule.cpp: it mirrors ddp_engine.cpp's all_reduce_gradients.
#include "backends/ddp/ddp_program.hpp"

#include <algorithm>
#include <string>

#include "backends/ddp/ddp_config.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::ddp {

namespace {
using json = nlohmann::json;
using common::CollectiveCost;
using common::CollectiveKind;
using common::Program;
using common::program_dtype_or;
using common::ProgramDtype;
using common::ProgramInput;

// ---------------------------------------------------------------- DDP (ddp_engine.cpp)
Program ddp_program(const ProgramInput& in, const CollectiveCost& cost) {
  // The report's resolved options as the engine's record (a key a report lacks: the default).
  const DdpResolved r = ddp_resolved_from_json(in.options);
  const ProgramDtype storage =
      program_dtype_or(r.storage_dtype, in.precision == "low" ? ProgramDtype{"bf16", 2} : ProgramDtype{"fp32", 4});
  const double cap_mb = r.options.bucket_cap_mb;
  const int64_t n = models::count_params(in.model).total;
  const int64_t bucket = std::max<int64_t>(1, int64_t(cap_mb * 1024 * 1024) / storage.bytes);
  double fwd = 0, bwd = 0;
  for (double v : in.costs.forward_s) fwd += v;
  for (double v : in.costs.backward_s) bwd += v;
  Program p;
  for (int64_t m = 0; m < in.train.grad_accum; ++m) {
    p.compute("F", fwd);
    p.compute("B", bwd);
  }
  // all_reduce_gradients: buckets from the end of the flat buffer, each waited at once.
  for (int64_t end = n; end > 0; end -= bucket) {
    const int64_t bytes = (end - std::max<int64_t>(0, end - bucket)) * storage.bytes;
    const int ar = p.issue(CollectiveKind::kAllReduce, "grads", bytes,
                           cost(CollectiveKind::kAllReduce, storage.name, bytes, in.world, in.nodes), true);
    p.wait(ar);
  }
  p.compute("optimizer", in.costs.optimizer_s);
  p.compute("other", in.costs.other_s);
  return p;
}

// Per rank: the whole model (DDP replicates it).
int64_t shard_elements(const models::ModelConfig& model, const json& /*options*/, int /*world*/) {
  int64_t total = 0;
  for (const auto& unit : models::unit_param_specs(model))
    for (const auto& p : unit) total += p.numel();
  return total;
}
}  // namespace

common::ProjectionHooks projection_hooks() {
  common::ProjectionHooks h;
  h.program = ddp_program;
  h.shard_elements = shard_elements;
  h.per_unit_times = false;  // one forward and one backward range: no per-unit times
  return h;
}

}  // namespace zb::backends::ddp
