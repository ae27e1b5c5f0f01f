// verdict.cpp — the verdict paragraph (see verdict.hpp).
#include "bench/compare/verdict.hpp"

#include <cmath>
#include <cstdio>

namespace zb::bench::compare {

namespace {
using json = nlohmann::json;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

double d(const json& j) { return j.is_number() ? j.get<double>() : NAN; }

std::string mib(const json& bytes) { return fmt("%.1f", d(bytes) / (1024.0 * 1024.0)); }

std::string value_text(const json& v) { return v.is_null() ? "—" : v.is_string() ? v.get<std::string>() : v.dump(); }

std::string speed(const json& c, const std::string& a, const std::string& b) {
  const int n = c["paired_rounds"].get<int>();
  if (n == 0)
    return "There is no round in which both " + a + " and " + b + " ran successfully, so no speed comparison. ";
  const auto& pct = c["throughput_change_pct"];
  const double med = d(pct["median"]);
  const std::string dir = med < 0 ? "slower" : "faster";
  if (n == 1)
    return b + " is " + fmt("%.1f", std::abs(med)) + "% " + dir + " than " + a +
           " in tokens/GPU/s in the one paired round (no interval: run --repeat 2 or more). ";
  const std::string level = interval_level(d(c["throughput_ratio"]["coverage"]));
  const std::string rounds = std::to_string(n) + " paired rounds";
  if (c["beyond_noise"].get<bool>()) {
    // "slower" flips the sign: its interval is the change's interval negated, ends swapped.
    const double lo = med < 0 ? -d(pct["hi"]) : d(pct["lo"]), hi = med < 0 ? -d(pct["lo"]) : d(pct["hi"]);
    return b + " is " + fmt("%.1f", std::abs(med)) + "% " + dir + " than " + a + " in tokens/GPU/s (" + level +
           " interval " + fmt("%.1f", lo) + "–" + fmt("%.1f", hi) + "%, " + rounds + "). ";
  }
  const auto& r = c["throughput_ratio"];
  return b + " and " + a + " differ in tokens/GPU/s by no more than the noise: " + b + "/" + a + " = " +
         fmt("%.3f", d(r["median"])) + " (" + level + " interval " + fmt("%.3f", d(r["lo"])) + "–" +
         fmt("%.3f", d(r["hi"])) + ", " + rounds + "). ";
}

std::string memory(const json& c, const json& sa, const json& sb, const std::string& a, const std::string& b) {
  if (!sa.contains("memory") || !sb.contains("memory")) return "";
  const auto& ma = sa["memory"]["max"];
  const auto& mb = sb["memory"]["max"];
  std::string out;
  // Offloaded states are not in the device bytes: say where they went.
  std::string host;
  for (const auto& [label, m] : {std::pair{a, &ma}, std::pair{b, &mb}})
    if (m->contains("host_model_states_total_bytes") && (*m)["host_model_states_total_bytes"].is_number() &&
        d((*m)["host_model_states_total_bytes"]) > 0)
      host += (host.empty() ? "" : ", ") + mib((*m)["host_model_states_total_bytes"]) + " MiB for " + label;
  if (c["model_states_ratio"].is_number()) {
    out += b + " holds " + fmt("%.2f", d(c["model_states_ratio"])) + "× " + a + "'s model-state memory per rank (" +
           mib(mb["model_states_total_bytes"]) + " vs " + mib(ma["model_states_total_bytes"]) + " MiB)";
    const auto& km = c["keeps_master"];
    const auto& lc = c["largest_category_difference"];
    const std::string largest = lc["category"].get<std::string>();
    const bool b_master = km["side"].get<bool>(), a_master = km["baseline"].get<bool>();
    std::string master, master_also;  // "keeps separate fp32 master weights" when exactly one side does
    if (b_master != a_master) {
      const json& plan = b_master ? sb["precision_plan"] : sa["precision_plan"];
      const std::string dtype = plan.is_object() && plan.contains("master") && plan["master"].is_string()
                                    ? plan["master"].get<std::string>() + " "
                                    : "";
      master = (b_master ? b : a) + " keeps separate " + dtype + "master weights";
      master_also = (b_master ? b : a) + " also keeps separate " + dtype + "master weights";
    }
    const std::string delta =
        std::string(d(lc["delta_bytes"]) >= 0 ? "+" : "-") + mib(std::abs(d(lc["delta_bytes"]))) + " MiB on " + b;
    // "because": only when B holds clearly more (>= 5%) and the masters are what it holds more of.
    if (largest == "master_params" && !master.empty() && d(c["model_states_ratio"]) >= 1.05)
      out += " because " + master + " (" + delta + ")";
    else if (!largest.empty())  // the masters explain the largest category only when they are it
      out += "; the largest difference by category is " + largest + " (" + delta + ")" +
             (master.empty() ? "" : largest == "master_params" ? ": " + master : "; " + master_also);
    if (!host.empty()) out += "; offloaded to the host, not counted in those: " + host;
    out += ". ";
  } else if (!host.empty()) {
    // No ratio (the baseline holds no model states on the device: everything offloaded), but the
    // states exist: name both places rather than say nothing of them.
    const auto device = [&](const json& m) {
      return m.contains("model_states_total_bytes") && m["model_states_total_bytes"].is_number()
                 ? mib(m["model_states_total_bytes"])
                 : std::string("—");
    };
    out += "Model-state memory per rank on the device: " + device(mb) + " MiB for " + b + " vs " + device(ma) +
           " MiB for " + a + "; offloaded to the host: " + host + ". ";
  }
  if (c["peak_tracked_ratio"].is_number()) {
    const double r = d(c["peak_tracked_ratio"]);
    out += "Peak tracked memory per rank: " + mib(mb["peak_tracked_bytes"]) + " MiB for " + b + " vs " +
           mib(ma["peak_tracked_bytes"]) + " MiB for " + a + " (" + fmt("%.2f", r) + "×";
    if (ma["estimate_peak_bytes"].is_number() && mb["estimate_peak_bytes"].is_number())
      out +=
          "; pre-flight estimates " + mib(mb["estimate_peak_bytes"]) + " vs " + mib(ma["estimate_peak_bytes"]) + " MiB";
    out += r == 1 ? "): the same. " : "): " + (r < 1 ? b : a) + " fits in less. ";
  }
  return out;
}

std::string losses(const json& c, bool unlike, const std::string& a, const std::string& b) {
  if (!c.contains("loss_max_rel_diff") || !c["loss_max_rel_diff"].is_number()) return "";
  const std::string steps = std::to_string(c["steps_compared"].get<int>()) + " steps";
  const std::string l = fmt("%.1e", d(c["loss_max_rel_diff"]));
  const std::string g = c["grad_norm_max_rel_diff"].is_number() ? fmt("%.1e", d(c["grad_norm_max_rel_diff"])) : "—";
  if (unlike)
    return "Losses of " + b + " and " + a + " differ by up to " + l + " (max relative difference over " + steps +
           "; grad norms " + g + "), not expected to agree: they train different batches. ";
  return "Losses of " + b + " and " + a + " agree to " + l + " (max relative difference per step over " + steps +
         "; grad norms to " + g + "). ";
}
}  // namespace

std::string interval_level(double coverage) {
  if (coverage >= 0.95) return "95%";
  return fmt("%.1f", coverage * 100) + "%";
}

std::string verdict(const json& cmp) {
  std::string out;
  const auto& sides = cmp["sides"];
  const auto& diffs = cmp["config_differences"];
  const bool unlike = !cmp["workload_differences"].empty();
  if (unlike) {
    std::string keys;
    for (const auto& dif : diffs) {
      if (!dif["workload"].get<bool>()) continue;
      std::string vals;
      for (const auto& v : dif["values"]) vals += (vals.empty() ? "" : " vs ") + value_text(v);
      keys += (keys.empty() ? "" : "; ") + dif["key"].get<std::string>() + " " + vals;
    }
    out += "The sides do not train the same workload (" + keys +
           "): tokens/GPU/s compares them per token, but memory and losses are not like for like (pass compare "
           "--micro-batch and --grad-accum so that every side trains the same batch). ";
  }
  for (const auto& s : sides)
    if (s["ok_runs"].get<int>() == 0) {
      std::string err;
      for (const auto& r : s["runs"])
        if (r["state"] != "ok") {
          err = r["state"].get<std::string>() + ": " + r["error"].get<std::string>();
          break;
        }
      out += s["label"].get<std::string>() + " had no successful run (" + std::to_string(s["failed_runs"].get<int>()) +
             " failed; first: " + err + "). ";
    } else if (s["failed_runs"].get<int>() > 0) {
      out += s["label"].get<std::string>() + ": " + std::to_string(s["failed_runs"].get<int>()) + " of " +
             std::to_string(s["runs"].size()) + " runs failed (shown as failed in the runs table). ";
    }
  for (const auto& c : cmp["comparisons"]) {
    const std::string a = c["baseline"], b = c["side"];
    const json* sa = nullptr;
    const json* sb = nullptr;
    for (const auto& s : sides) {
      if (s["label"] == a) sa = &s;
      if (s["label"] == b) sb = &s;
    }
    if (!sa || !sb || (*sa)["ok_runs"].get<int>() == 0 || (*sb)["ok_runs"].get<int>() == 0) continue;
    out += speed(c, a, b) + memory(c, *sa, *sb, a, b) + losses(c, unlike, a, b);
  }
  for (const auto& s : sides)
    if (s.contains("curves") && s["curves"]["identical_across_rounds"].is_boolean() &&
        !s["curves"]["identical_across_rounds"].get<bool>())
      out += s["label"].get<std::string>() + "'s loss and grad-norm curves differ across rounds (max relative " +
             "difference " + fmt("%.1e", d(s["curves"]["max_rel_diff_across_rounds"])) + "). ";
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace zb::bench::compare
