// zero3_checkpoint.cpp — ZeRO3-mode's checkpoint layout, named as DeepSpeed names it
// (runtime/engine.py _get_ckpt_name / _get_zero_ckpt_name: `global_stepN/zero_pp_rank_R_mp_rank_00_
// model_states` and `[bf16_]zero_pp_rank_R_mp_rank_00_optim_states`, in safetensors here), and its
// consolidation as deepspeed/utils/zero_to_fp32.py does it. Must not: write files (the
// checkpointer in bench/lifecycle does).
#include "backends/zero3/zero3_checkpoint.hpp"

#include <ATen/ATen.h>

#include "models/checkpoint/safetensors.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

namespace {

std::string model_file(int rank) {
  return "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_model_states.safetensors";
}

// zero_to_fp32.py _zero3_merge_trainable_params: each rank's fp32 flat groups concatenated;
// parameter k (in order) is ceil(numel / W) elements of every rank's flat, zipped, unpadded.
std::vector<at::Tensor> consolidate(const std::string& tag_dir, const nlohmann::json& meta, const models::ModelConfig& cfg,
                                    int W) {
  namespace ckpt = models::checkpoint;
  std::vector<at::Tensor> flat(static_cast<size_t>(W));
  size_t groups = 0;
  for (const auto& t : meta.at("tensors_per_rank"))
    if (t.at("name").get<std::string>().find(".fp32_master") != std::string::npos) ++groups;
  for (int r = 0; r < W; ++r) {
    const auto f = ckpt::SafetensorsFile::open(tag_dir + "/" + meta["ranks"][size_t(r)]["optim"].get<std::string>());
    std::vector<at::Tensor> parts;
    for (size_t g = 0; g < groups; ++g) parts.push_back(f.tensor("optim." + std::to_string(g) + ".fp32_master"));
    flat[size_t(r)] = at::cat(parts);
  }
  std::vector<at::Tensor> units;
  int64_t offset = 0;
  for (const auto& specs : models::unit_param_specs(cfg)) {
    std::vector<at::Tensor> ws;
    for (const auto& s : specs) {
      const int64_t n = s.numel(), part = (n + W - 1) / W;
      std::vector<at::Tensor> pieces;
      for (int r = 0; r < W; ++r) pieces.push_back(flat[size_t(r)].narrow(0, offset, part));
      ws.push_back(at::cat(pieces).narrow(0, 0, n));
      offset += part;
    }
    units.push_back(at::cat(ws));
  }
  if (offset != flat[0].numel())
    throw UsageError("consolidate: consumed " + std::to_string(offset) + " of " + std::to_string(flat[0].numel()) +
                     " elements per rank (not this model's zero3 layout)");
  return units;
}

}  // namespace

CheckpointLayout checkpoint_layout() {
  CheckpointLayout l;
  l.model_file = model_file;
  l.optim_file = [](const std::string& precision, int rank) {
    return std::string(precision == "bf16" ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(rank) +
           "_mp_rank_00_optim_states.safetensors";
  };
  l.is_model_state = [](const std::string& name) { return name == "partitions"; };
  l.tag = [](int64_t steps_done) { return "global_step" + std::to_string(steps_done); };
  l.consolidate = consolidate;
  return l;
}

}  // namespace zb::backends::zero3
