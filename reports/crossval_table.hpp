// crossval_table.hpp — the summary table of committed `zerobench crossval` documents (schema
// zerobench.crossval, reports/SCHEMA.md): one row per document × precision mode, the table
// README.md and docs/crossval.md carry between their `crossval-table` markers
// (scripts/crossval-table.sh writes it there; tests/test_crossval_compare.cpp checks that the
// committed files regenerate it byte for byte).
// Owns: which documents a directory holds, their order, and the row format. Must not: compare
// anything (bench/crossval_compare.cpp decided every number shown) or read reports of runs.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zb::reports {

// Every *.json in `dir` (sorted by file name) that is a crossval document; each gets "_file"
// (the file name). Throws UsageError naming the directory or file: none found, unreadable JSON,
// or a *.json that is not a crossval document.
std::vector<nlohmann::json> read_crossval_documents(const std::string& dir);

// The Markdown table, one row per (document, mode), in file then mode order.
std::string crossval_results_table(const std::vector<nlohmann::json>& docs);

}  // namespace zb::reports
