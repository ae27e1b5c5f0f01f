// table.hpp — human views rendered from reports (the JSON is the contract; this is a view):
// Markdown, CSV and a self-contained HTML page with SVG plots, in the shape of the FSDP vs
// DeepSpeed blog's Table 3 plus memory by category, comm, overlap and relative columns.
// Owns: loading report sets, column choice and formatting. Must not: compute new metrics.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zb::reports {

// Files, or directories (their index.json order if present, else every *.json by name).
// Each loaded report gets "_cell": the file name without ".json". Throws UsageError.
std::vector<nlohmann::json> load_reports(const std::vector<std::string>& paths);

struct TableOptions {
  std::string format = "md";  // md | csv | html
  std::string baseline;       // cell name for relative columns ("" = none)
};

std::string render_table(const std::vector<nlohmann::json>& reports, const TableOptions& opts);

// A `zerobench crossval` document (schema zerobench.crossval, reports/SCHEMA.md) as Markdown
// ("md") or a self-contained HTML page ("html"): one summary row per precision mode, then per
// mode the step-by-step table (loss, grad norm, collectives side by side) and every
// model-state / collective difference with its explanation.
std::string render_crossval(const nlohmann::json& doc, const std::string& format);

// Backwards-compatible one-liner used by `zerobench run`.
inline std::string markdown_table(const std::vector<nlohmann::json>& reports) { return render_table(reports, {}); }

}  // namespace zb::reports
