// crossval_table.cpp — see crossval_table.hpp.
#include "reports/crossval_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/errors.hpp"

namespace zb::reports {

namespace {
using json = nlohmann::json;

// A relative difference: "0 (bitwise)" when exactly zero, else two significant digits; a
// non-finite difference (written as null) reads "nan".
std::string diff_cell(const json& v) {
  if (!v.is_number()) return "nan";
  const double d = v.get<double>();
  if (d == 0) return "0 (bitwise)";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", d);
  return buf;
}

std::string ratio_cell(const json& v) {
  if (!v.is_number() || v.get<double>() <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v.get<double>());
  return buf;
}

// "equal", or the categories / kinds that differ and how: "equal + explained: a, b" or
// "UNEXPLAINED: c".
std::string difference_cell(const json& mode, const char* list, const char* key, const char* equal_flag) {
  if (mode.value(equal_flag, false)) return "equal";
  std::set<std::string> explained, unexplained;
  for (const auto& e : mode.value(list, json::array())) {
    if (e.value("equal", false)) continue;
    (e["explanation"].is_null() ? unexplained : explained).insert(e[key].get<std::string>());
  }
  auto join = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "" : ", ") + ("`" + x + "`");
    return out;
  };
  std::string out;
  if (!explained.empty()) out = "equal + explained: " + join(explained);
  if (!unexplained.empty()) out += (out.empty() ? "" : "; ") + ("UNEXPLAINED: " + join(unexplained));
  return out.empty() ? "-" : out;
}

const char* const kRealFilesSchema = "zerobench.crossval.real_files";

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("crossval --table: cannot read " + path);
  json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw UsageError("crossval --table: " + path + " is not valid JSON");
  return doc;
}

// A table cell: no line breaks, no column separators.
std::string cell(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '|') c = c == '|' ? '/' : ' ';
  return s;
}

// A refusal's line without crossval's prefix naming the file, which the row names already:
// "crossval (--config tests/configs/real/x.json): R" and "crossval: R" become R.
std::string reason_text(std::string r) {
  if (r.rfind("crossval (", 0) == 0) {
    if (const auto end = r.find("): "); end != std::string::npos) return r.substr(end + 3);
  }
  if (r.rfind("crossval: ", 0) == 0) return r.substr(10);
  return r;
}

}  // namespace

std::vector<json> read_crossval_documents(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError("crossval --table: '" + dir + "' is not a directory");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  std::vector<json> docs;
  for (const auto& name : files) {
    const std::string path = dir + "/" + name;
    std::ifstream in(path);
    json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) throw UsageError("crossval --table: " + path + " is not valid JSON");
    const std::string schema = doc.is_object() ? doc.value("schema", json::object()).value("name", std::string()) : "";
    if (schema == kRealFilesSchema) continue;  // the real files' summary: its own section
    if (schema != "zerobench.crossval")
      throw UsageError("crossval --table: " + path + " is not a crossval document (schema zerobench.crossval)");
    doc["_file"] = name;
    docs.push_back(std::move(doc));
  }
  if (docs.empty()) throw UsageError("crossval --table: no crossval documents (*.json) in '" + dir + "'");
  return docs;
}

std::string crossval_results_table(const std::vector<json>& docs) {
  std::ostringstream o;
  o << "| backend × mode | framework | W | steps × grad accum | max loss rel diff | max grad-norm rel diff | "
       "model-state bytes | collectives (every rank, every step) | verdict | throughput ratio | peak RSS ratio | "
       "document |\n"
    << "|---|---|---:|---:|---:|---:|---|---|---|---:|---:|---|\n";
  for (const auto& doc : docs) {
    const auto& up = doc["upstream"];
    const std::string framework = up.value("name", std::string("?")) + " " + up.value("version", std::string("?"));
    const auto& t = doc.value("train", json::object());
    const std::string shape =
        std::to_string(t.value("steps", int64_t(0))) + " × " + std::to_string(t.value("grad_accum", int64_t(0)));
    for (const auto& m : doc["modes"]) {
      // A document named after its backend plus a mode (scripts/crossval-table.sh: e.g.
      // zero3-offload-param.json) labels its rows with that mode.
      const std::string backend = doc["backend"].get<std::string>();
      std::string stem = doc["_file"].get<std::string>();
      stem = stem.substr(0, stem.size() - 5);  // ".json"
      const std::string variant =
          stem.size() > backend.size() + 1 && stem.rfind(backend + "-", 0) == 0 ? " [" + stem.substr(backend.size() + 1) + "]" : "";
      const std::string name = backend + " " + m["precision"].get<std::string>() + variant;
      const bool agree = m["verdict"].value("agree", false);
      o << "| " << name << " | " << framework << " | " << doc.value("world_size", 0) << " | " << shape << " | ";
      if (!m.contains("steps")) {
        o << "- | - | - | - | FAILED | - | - | " << doc["_file"].get<std::string>() << " |\n";
        continue;
      }
      const auto& p = m["perf"];
      o << diff_cell(m["max_loss_rel_diff"]) << " | " << diff_cell(m["max_grad_norm_rel_diff"]) << " | "
        << difference_cell(m, "model_states", "category", "model_states_equal") << " | "
        << difference_cell(m, "comm_differences", "kind", "comm_equal") << " | " << (agree ? "agree" : "DISAGREE")
        << " | " << ratio_cell(p["throughput_ratio"]) << " | " << ratio_cell(p["peak_rss_ratio"]) << " | "
        << doc["_file"].get<std::string>() << " |\n";
    }
  }
  return o.str();
}

std::string crossval_real_files_table(const json& summary) {
  if (!summary.is_object() || summary.value("schema", json::object()).value("name", std::string()) != kRealFilesSchema ||
      !summary.contains("files") || !summary["files"].is_array())
    throw UsageError(std::string("crossval --table: not a real-files summary (schema ") + kRealFilesSchema + ")");
  std::ostringstream o;
  int agree = 0, refused = 0, other = 0;
  for (const auto& f : summary["files"]) {
    const std::string v = f.value("outcome", std::string());
    (v == "agree" ? agree : v == "refused" ? refused : other) += 1;
  }
  o << "\n**Real config files** (`" << summary.value("command", std::string("?")) << "`, every file of "
    << "tests/configs/real/ that `zerobench run` runs): " << agree << " agree, " << refused
    << " refused up front with one line (exit 2), " << other << " disagree or fail.\n\n"
    << "| file | repository | backend × modes | verdict | max loss rel diff | max grad-norm rel diff | "
       "substitutions | reason (refused, disagree, failed) |\n"
    << "|---|---|---|---|---:|---:|---:|---|\n";
  for (const auto& f : summary["files"]) {
    std::string modes, loss = "-", norm = "-";
    int64_t subs = 0;
    double max_loss = -1, max_norm = -1;
    bool numbers = false;
    for (const auto& m : f.value("modes", json::array())) {
      modes += (modes.empty() ? "" : ",") + m.value("precision", std::string("?"));
      subs += int64_t(m.value("substitutions", json::array()).size());
      if (m.contains("max_loss_rel_diff") && m["max_loss_rel_diff"].is_number()) {
        numbers = true;
        max_loss = std::max(max_loss, m["max_loss_rel_diff"].get<double>());
      }
      if (m.contains("max_grad_norm_rel_diff") && m["max_grad_norm_rel_diff"].is_number())
        max_norm = std::max(max_norm, m["max_grad_norm_rel_diff"].get<double>());
    }
    if (numbers) {
      loss = diff_cell(max_loss);
      norm = max_norm >= 0 ? diff_cell(max_norm) : "nan";
    }
    const std::string outcome = f.value("outcome", std::string("?"));
    std::string verdict = outcome == "agree" ? "agree" : outcome == "refused" ? "exit 2" : "DISAGREE / FAILED";
    // The flags the sweep added, as the user would after the refusal's line named them.
    if (f.contains("flags") && f["flags"].is_string() && !f["flags"].get<std::string>().empty())
      verdict += " (with `" + f["flags"].get<std::string>() + "`)";
    o << "| " << cell(f.value("file", std::string("?"))) << " | " << cell(f.value("repository", std::string("?")))
      << " | " << cell(f.value("backend", std::string("-"))) << (modes.empty() ? "" : " " + modes) << " | " << verdict
      << " | " << loss << " | " << norm << " | " << subs << " | " << cell(reason_text(f.value("reason", std::string())))
      << " |\n";
  }
  return o.str();
}

std::string crossval_tables(const std::string& dir_or_summary) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(dir_or_summary, ec)) return crossval_real_files_table(read_json_file(dir_or_summary));
  std::string out = crossval_results_table(read_crossval_documents(dir_or_summary));
  const std::string summary = dir_or_summary + "/real-files.json";
  if (fs::is_regular_file(summary, ec)) out += crossval_real_files_table(read_json_file(summary));
  return out;
}

}  // namespace zb::reports
