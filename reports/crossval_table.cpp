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
    if (!doc.is_object() || doc.value("schema", json::object()).value("name", std::string()) != "zerobench.crossval")
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

}  // namespace zb::reports
