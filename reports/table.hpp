// table.hpp — human tables rendered from reports (the JSON is the contract; this is a view).
// Owns: column choice and formatting in the shape of the FSDP vs DeepSpeed blog's Table 3.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zb::reports {

// One row per report: backend, precision, W, tokens/GPU/s, s/step, MFU, mfu_6n, model-state
// MiB per rank (max over ranks), peak tracked MiB, comm MiB per step, final loss, status.
std::string markdown_table(const std::vector<nlohmann::json>& reports);

}  // namespace zb::reports
