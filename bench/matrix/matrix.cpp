// matrix.cpp — matrix expansion and the resumable runner (see matrix.hpp).
#include "bench/matrix/matrix.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <csignal>
#include <set>

#include "bench/run/config_resolve.hpp"
#include "bench/run/run_options.hpp"
#include "config/bounded_readers.hpp"
#include "reports/report.hpp"
#include "reports/run_report.hpp"
#include "runtime/errors.hpp"
#include "runtime/subprocess.hpp"

namespace zb::bench {

namespace {
using json = nlohmann::json;
using Options = std::vector<std::pair<std::string, std::string>>;

std::string scalar(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) throw UsageError(where + " must be a scalar value");
  return n.as<std::string>();
}

Options read_options(const YAML::Node& map, const std::string& where) {
  Options out;
  if (!map) return out;
  if (!map.IsMap()) throw UsageError(where + " must be a mapping of run options");
  for (const auto& kv : map) {
    const auto key = kv.first.as<std::string>();
    out.emplace_back(key, scalar(kv.second, where + "." + key));
  }
  return out;
}

void set_option(Options& o, const std::string& key, const std::string& value) {
  for (auto& kv : o)
    if (kv.first == key) {
      kv.second = value;
      return;
    }
  o.emplace_back(key, value);
}

const std::string* find_option(const Options& o, const std::string& key) {
  for (const auto& kv : o)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

bool matches(const Options& cell, const Options& rule) {
  for (const auto& [k, v] : rule) {
    const auto* have = find_option(cell, k);
    if (!have || *have != v) return false;
  }
  return true;
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '-';
  return out;
}

std::string make_id(const Options& cell, const Options& base, const std::vector<std::string>& axis_keys) {
  std::string id;
  auto add = [&](const std::string& piece) { id += (id.empty() ? "" : "_") + sanitize(piece); };
  for (const auto& k : axis_keys)
    if (const auto* v = find_option(cell, k)) add(k == "nproc" ? "w" + *v : *v);
  for (const auto& [k, v] : cell) {
    if (std::find(axis_keys.begin(), axis_keys.end(), k) != axis_keys.end()) continue;
    const auto* b = find_option(base, k);
    if (!b || *b != v) add(k + "-" + v);
  }
  return id.empty() ? "base" : id;
}

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string format_duration(double s) {
  char buf[32];
  if (s >= 60)
    std::snprintf(buf, sizeof(buf), "%dm%02ds", int(s) / 60, int(s) % 60);
  else
    std::snprintf(buf, sizeof(buf), "%.0fs", s);
  return buf;
}

}  // namespace

// Parses a cell exactly as `zerobench run` would; throws UsageError on a bad option.
ResolvedCell validate_cell(const MatrixCell& cell) {
  CLI::App app;
  RunOptions o;
  add_run_options(app, o);
  auto args = cell_run_args(cell);
  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    throw UsageError("cell " + cell.id + ": " + e.what());
  }
  mark_given(app, o);
  try {
    o.nproc = o.world_size_hint();
    const auto r = o.resolve();
    return {r.backend, r.spec.precision, r.spec.train.micro_batch, r.spec.train.grad_accum};
  } catch (const UsageError& e) {
    throw UsageError("cell " + cell.id + ": " + e.what());
  }
}

std::vector<std::string> cell_run_args(const MatrixCell& cell) {
  std::vector<std::string> args;
  for (const auto& [k, v] : cell.options) {
    if (v == "true" || v == "false") {
      // Boolean flags: present or absent; --limit-all-gathers takes a value.
      if (k == "limit-all-gathers") {
        args.push_back("--" + k);
        args.push_back(v);
      } else if (v == "true") {
        args.push_back("--" + k);
      }
      continue;
    }
    args.push_back("--" + k);
    args.push_back(v);
  }
  return args;
}

MatrixSpec load_matrix(const std::string& path) {
  // Bounded (config/bounded_readers.hpp): size, depth and alias expansion capped, exit 2.
  const std::string where = "matrix " + path + ": ";
  const YAML::Node root =
      config::load_yaml_bounded(config::read_file_bounded(path, where, config::kMaxConfigFileBytes), where);
  MatrixSpec spec;
  try {
    static const std::set<std::string> known = {"name", "base", "axes", "include", "exclude", "timeout_s"};
    for (const auto& kv : root)
      if (!known.count(kv.first.as<std::string>()))
        throw UsageError("unknown top-level key '" + kv.first.as<std::string>() +
                         "' (expected name, base, axes, include, exclude, timeout_s)");
    spec.name = root["name"] ? root["name"].as<std::string>() : path;
    if (root["timeout_s"]) spec.timeout_s = root["timeout_s"].as<double>();
    const Options base = read_options(root["base"], "base");
    std::vector<std::string> axis_keys;
    std::vector<std::vector<std::string>> axis_values;
    if (root["axes"]) {
      if (!root["axes"].IsMap()) throw UsageError("axes must map run options to lists of values");
      for (const auto& kv : root["axes"]) {
        const auto key = kv.first.as<std::string>();
        if (!kv.second.IsSequence() || kv.second.size() == 0)
          throw UsageError("axes." + key + " must be a non-empty list");
        axis_keys.push_back(key);
        std::vector<std::string> values;
        for (const auto& v : kv.second) values.push_back(scalar(v, "axes." + key));
        axis_values.push_back(values);
      }
    }
    std::vector<Options> excludes;
    if (root["exclude"])
      for (const auto& rule : root["exclude"]) excludes.push_back(read_options(rule, "exclude[]"));
    // Cartesian product of the axes over the base, minus excluded cells.
    std::vector<Options> cells;
    std::vector<size_t> idx(axis_keys.size(), 0);
    while (true) {
      Options cell = base;
      for (size_t a = 0; a < axis_keys.size(); ++a) set_option(cell, axis_keys[a], axis_values[a][idx[a]]);
      bool excluded = false;
      for (const auto& rule : excludes) excluded = excluded || matches(cell, rule);
      if (!excluded) cells.push_back(cell);
      size_t a = 0;
      while (a < idx.size() && ++idx[a] == axis_values[a].size()) idx[a++] = 0;
      if (a == idx.size()) break;
    }
    if (root["include"])
      for (const auto& extra : root["include"]) {
        Options cell = base;
        for (const auto& [k, v] : read_options(extra, "include[]")) set_option(cell, k, v);
        cells.push_back(cell);
      }
    std::set<std::string> ids;
    for (auto& options : cells) {
      for (const auto& [k, v] : options)
        if (k == "out") throw UsageError("cells may not set 'out' (the matrix names each report)");
      MatrixCell c;
      c.options = options;
      c.id = make_id(options, base, axis_keys);
      for (int n = 2; ids.count(c.id); ++n) c.id = make_id(options, base, axis_keys) + "-" + std::to_string(n);
      ids.insert(c.id);
      spec.cells.push_back(c);
    }
  } catch (const YAML::Exception& e) {
    throw UsageError("matrix " + path + ": " + e.what());
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    throw UsageError(config::clip_message(msg.rfind("matrix ", 0) == 0 ? msg : "matrix " + path + ": " + msg));
  }
  for (const auto& c : spec.cells) {
    try {
      validate_cell(c);
    } catch (const UsageError& e) {
      throw UsageError(config::clip_message("matrix " + path + ": " + e.what()));
    }
  }
  return spec;
}

int matrix_command(const MatrixOptions& o) { return run_matrix(load_matrix(o.file), o); }

int run_matrix(const MatrixSpec& spec, const MatrixOptions& o) {
  const double timeout_s = o.timeout_s > 0 ? o.timeout_s : spec.timeout_s;
  const std::string exe = runtime::self_executable();
  if (o.dry_run) {
    for (const auto& c : spec.cells) {
      std::cout << c.id << ": zerobench run";
      for (const auto& a : cell_run_args(c)) std::cout << " " << a;
      std::cout << "\n";
    }
    return kExitOk;
  }
  reports::make_directories(o.out_dir);
  json index = {{"schema", {{"name", "zerobench.matrix-index"}, {"version", 1}}},
                {"matrix", spec.name},
                {"file", o.file.empty() ? spec.name : o.file},
                {"created", now_iso8601()},
                {"cells", json::array()}};
  const auto t0 = std::chrono::steady_clock::now();
  double run_seconds = 0;
  int ran = 0, failed = 0;
  const int n = int(spec.cells.size());
  for (int i = 0; i < n; ++i) {
    const auto& cell = spec.cells[size_t(i)];
    const std::string report_path = o.out_dir + "/" + cell.id + ".json";
    json entry = {{"id", cell.id}, {"report", cell.id + ".json"}, {"options", json::object()}};
    for (const auto& [k, v] : cell.options) entry["options"][k] = v;
    // Resume: a cell with a valid report is finished (unless forced, or failed and retried).
    std::string state, error;
    bool skip = false;
    try {
      const auto old = reports::run_report_from_json(reports::read_report(report_path));
      state = old.status.state;
      error = old.status.error;
      skip = !o.force && (state == "ok" || !o.retry_failed);
    } catch (const UsageError&) {
    }
    double wall = 0;
    if (!skip) {
      std::remove(report_path.c_str());
      std::vector<std::string> argv = {exe, "run"};
      for (const auto& a : cell_run_args(cell)) argv.push_back(a);
      argv.insert(argv.end(), {"--out", report_path, "--quiet"});
      const auto r = runtime::run_subprocess(argv, std::chrono::milliseconds(int64_t(timeout_s * 1000)));
      wall = r.wall_s;
      if (r.interrupted) {
        std::remove(report_path.c_str());
        std::cerr << "zerobench matrix: interrupted during cell " << cell.id << "; finished cells are kept in "
                  << o.out_dir << "\n";
        reports::write_json_atomic(o.out_dir + "/index.json", index);
        return 130;
      }
      ++ran;
      run_seconds += wall;
      std::string last_line = r.stderr_tail;
      while (!last_line.empty() && (last_line.back() == '\n' || last_line.back() == ' ')) last_line.pop_back();
      if (auto nl = last_line.rfind('\n'); nl != std::string::npos) last_line = last_line.substr(nl + 1);
      std::optional<reports::RunReport> report;
      try {
        report = reports::run_report_from_json(reports::read_report(report_path));
      } catch (const UsageError&) {
      }
      const bool have_report = report.has_value();
      if (r.timed_out) {
        state = "timeout";
        error = "cell exceeded its " + format_duration(timeout_s) + " timeout";
      } else {
        const std::string text = r.stderr_tail;
        const bool oom = text.find("out of memory") != std::string::npos ||
                         text.find("bad_alloc") != std::string::npos || text.find("signal 9") != std::string::npos ||
                         r.signal == SIGKILL;
        if (have_report && (r.exit_code == 0 || report->status.state != "ok")) {
          // The run's own report: ok, or a state it recorded itself (diverged, oom, failed, timeout).
          state = report->status.state;
          error = report->status.error;
          if (state == "failed" && oom) state = "oom";
        } else {
          state = oom ? "oom" : "failed";
          error = last_line.empty() ? "exit code " + std::to_string(r.exit_code) : last_line;
        }
      }
      if (have_report && report->status.state != state) {
        report->status = reports::Status{};  // e.g. failed -> oom from the stderr: the state and error only
        report->status.state = state;
        report->status.error = error;
        reports::write_json_atomic(report_path, reports::to_json(*report));
      } else if (!have_report) {
        json config = {{"cell", cell.id}, {"options", entry["options"]}};
        // What the cell was configured from (the run may have failed before writing its report).
        json sources = json::array();
        for (const char* flag : {"config", "accelerate-config", "deepspeed-config"})
          if (const auto* path = find_option(cell.options, flag)) {
            try {
              sources.push_back({{"path", *path}, {"sha256", file_sha256(*path)}});
            } catch (const UsageError&) {
              sources.push_back({{"path", *path}, {"sha256", ""}});
            }
          }
        config["source_files"] = sources;
        config["warnings"] = json::array();
        config["ignored"] = json::array();
        reports::write_json_atomic(report_path, reports::failed_report(state, error, config));
      }
    }
    if (state != "ok") ++failed;
    entry["status"] = state;
    entry["error"] = error;
    entry["wall_s"] = wall;
    entry["skipped"] = skip;
    index["cells"].push_back(entry);
    reports::write_json_atomic(o.out_dir + "/index.json", index);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta = ran > 0 ? run_seconds / ran * double(n - i - 1) : 0;
    std::fprintf(stderr, "[%d/%d] %-40s %-8s %6.1fs | elapsed %s | ETA %s\n", i + 1, n, cell.id.c_str(),
                 skip ? ("(" + state + ")").c_str() : state.c_str(), wall, format_duration(elapsed).c_str(),
                 format_duration(eta).c_str());
  }
  std::fprintf(stderr, "matrix %s: %d cells, %d failed, results in %s\n", spec.name.c_str(), n, failed,
               o.out_dir.c_str());
  return failed ? kExitFailed : kExitOk;
}

}  // namespace zb::bench
