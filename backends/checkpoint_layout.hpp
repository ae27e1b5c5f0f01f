// checkpoint_layout.hpp — where a backend's checkpoint files go (BackendInfo::lifecycle.checkpoint;
// consumed by bench/lifecycle/checkpoint.cpp, docs/lifecycle.md). Owns: CheckpointLayout and
// default_checkpoint_layout (defined in registry.cpp). Kept apart from backend_info.hpp so that a
// backend's own layout (zero3_checkpoint.hpp) includes this much only.
#pragma once
#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/model_config.hpp"

namespace zb::backends {

// The default (default_checkpoint_layout) is one safetensors file per rank holding everything
// (DCP's `__R_0.distcp` idea, in safetensors so Python can open it) in a `step-N` directory.
struct CheckpointLayout {
  std::function<std::string(int rank)> model_file;
  std::function<std::string(const std::string& precision, int rank)> optim_file;  // may equal model_file
  // Whether a state tensor goes to the model file when the two files differ.
  std::function<bool(const std::string& tensor_name)> is_model_state;
  std::function<std::string(int64_t steps_done)> tag;  // the step's directory name
  // `checkpoint consolidate` of a sharded checkpoint: each unit's full parameters as fp32 flats,
  // read from the rank files of `tag_dir` (its metadata.json as `meta`). Empty: not supported.
  std::function<std::vector<at::Tensor>(const std::string& tag_dir, const nlohmann::json& meta,
                                        const models::ModelConfig& cfg, int world)>
      consolidate;
};
CheckpointLayout default_checkpoint_layout();

}  // namespace zb::backends
