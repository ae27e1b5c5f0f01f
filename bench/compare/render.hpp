// render.hpp — `zerobench compare`'s human outputs, rendered from the compare JSON only:
// Markdown (compare.md, with loss.svg and grad_norm.svg beside it) and one self-contained HTML
// page (inline CSS, inline SVG: error bars for the intervals, overlaid curves).
// Owns: layout and number formatting of the tables. Must not: compute statistics (analysis.cpp)
// or word the verdict (verdict.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace zb::bench::compare {

std::string render_markdown(const nlohmann::json& compare);
std::string render_html(const nlohmann::json& compare);
// The overlaid curves: key "loss" or "grad_norm".
std::string curve_svg(const nlohmann::json& compare, const std::string& key);

}  // namespace zb::bench::compare
