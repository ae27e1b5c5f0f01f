// report.hpp — the versioned JSON report (schema in reports/SCHEMA.md): its name and version,
// validation, atomic writing and reading. Owns: the schema. Must not: compute metrics
// (metrics.hpp) or run anything.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zb::reports {

inline constexpr const char* kSchemaName = "zerobench.report";
inline constexpr int kSchemaVersion = 1;

// Every problem found (empty = valid): missing keys, wrong types, bad status.
std::vector<std::string> validate_report(const nlohmann::json& report);

// Writes `path` so that it is either the old file or the complete new one: temp file in the
// same directory, flush + fsync, rename. Creates parent directories.
void write_json_atomic(const std::string& path, const nlohmann::json& value);
void write_text_atomic(const std::string& path, const std::string& text);

// mkdir -p (POSIX; see report.cpp for why not std::filesystem).
void make_directories(const std::string& dir);

// Reads and validates a report; throws UsageError naming the file and the first problem.
nlohmann::json read_report(const std::string& path);

// A report for a run that did not finish (launcher failure, timeout) so a result file exists.
nlohmann::json failed_report(const std::string& state, const std::string& error, const nlohmann::json& config);

}  // namespace zb::reports
