// crossval_loss_scale.hpp — crossval of fp16 loss scaling (issue 24): zerobench's
// steps[j].loss_scale against the reference's (scripts/crossval/common.py AmpScaler, accelerate's
// ShardedGradScaler), every step, every upstream rank.
// Owns: the exact comparison of scale, overflow, skipped and next_scale, and which steps both
// sides skipped (their grad norms are the overflowed ones: not compared). Must not: compare
// losses, norms or bytes (crossval_compare.cpp does).
#pragma once
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "reports/run_report.hpp"

namespace zb::bench {

struct LossScaleComparison {
  nlohmann::json doc = nullptr;     // null when neither side scaled the loss
  std::set<size_t> skipped_by_both;  // steps whose optimizer step both sides skipped
};

// Appends a reason for every step where the sequences differ (or one side has none). `report`:
// zerobench's (typed: steps[j].loss_scale); `upstream`: the reference's rank files.
LossScaleComparison compare_loss_scale(const reports::RunReport& report, const std::vector<nlohmann::json>& upstream,
                                       std::vector<std::string>& reasons);

}  // namespace zb::bench
