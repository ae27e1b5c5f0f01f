// crossval_table.hpp — the summary table of committed `zerobench crossval` documents (schema
// zerobench.crossval, reports/SCHEMA.md): one row per document × precision mode, plus a section of
// real config files crossvalled as they are (schema zerobench.crossval.real_files): the table
// README.md and docs/crossval.md carry between their `crossval-table` markers
// (scripts/crossval-table.sh writes it there; tests/test_crossval_compare.cpp checks that the
// committed files regenerate it byte for byte).
// Owns: which documents a directory holds, their order, and the row format. Must not: compare
// anything (bench/crossval/crossval_compare.cpp decided every number shown) or read reports of runs.
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

// The real-config-file section (schema zerobench.crossval.real_files, written by
// scripts/crossval-real-files.sh as real-files.json): a heading line, then one row per file —
// its verdict per mode with the largest differences, or the one line crossval refused it with.
// Throws UsageError when `summary` is not such a document.
std::string crossval_real_files_table(const nlohmann::json& summary);

// What `zerobench crossval --table DIR` prints: the documents' table, then the real files' section
// when DIR/real-files.json exists; a file instead of a directory: that summary's section alone.
std::string crossval_tables(const std::string& dir_or_summary);

}  // namespace zb::reports
