// table.cpp — Markdown rendering of reports (see table.hpp).
#include "reports/table.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace zb::reports {

namespace {
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}
double mib(double bytes) { return bytes / (1024.0 * 1024.0); }
}  // namespace

std::string markdown_table(const std::vector<nlohmann::json>& reports) {
  std::ostringstream o;
  o << "| backend | precision | W | tokens/GPU/s | s/step | MFU | mfu_6n | model states MiB/rank | peak tracked MiB "
       "| comm MiB/step | final loss | status |\n";
  o << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : reports) {
    const auto& cfg = r.value("config", nlohmann::json::object());
    const auto backend = cfg.contains("backend") ? cfg["backend"].value("name", "?") : std::string("?");
    const auto precision = cfg.contains("backend") ? cfg["backend"].value("precision", "?") : std::string("?");
    const auto state = r["status"].value("state", "?");
    if (state != "ok") {
      o << "| " << backend << " | " << precision << " | - | - | - | - | - | - | - | - | - | " << state << ": "
        << r["status"].value("error", "") << " |\n";
      continue;
    }
    double states = 0, peak = 0, comm = 0;
    for (const auto& rk : r["ranks"]) {
      double s = 0;
      for (const auto& [k, v] : rk["memory"]["model_states_bytes"].items()) s += v.get<double>();
      states = std::max(states, s);
      peak = std::max(peak, rk["memory"]["peak_tracked_bytes"].get<double>());
      double c = 0;
      for (const auto& [k, v] : rk["comm"].items()) c += v["bytes"].get<double>();
      comm = std::max(comm, c);
    }
    const auto& s = r["summary"];
    o << "| " << backend << " | " << precision << " | " << r["env"]["world_size"].get<int>() << " | "
      << fmt("%.1f", s["tokens_per_gpu_per_s"]["median"].get<double>()) << " | "
      << fmt("%.4f", s["step_time_s"]["median"].get<double>()) << " | " << fmt("%.3f", s["mfu"].get<double>()) << " | "
      << fmt("%.3f", s["mfu_6n"].get<double>()) << " | " << fmt("%.2f", mib(states)) << " | " << fmt("%.2f", mib(peak))
      << " | " << fmt("%.2f", mib(comm)) << " | " << fmt("%.4f", s.value("final_loss", 0.0)) << " | " << state << " |\n";
  }
  return o.str();
}

}  // namespace zb::reports
