// report.cpp — schema validation, atomic write, read (see report.hpp and SCHEMA.md).
#include "reports/report.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/errors.hpp"

namespace zb::reports {

namespace {
using json = nlohmann::json;

enum class Type { Object, Array, Number, String, Bool };

bool has_type(const json& v, Type t) {
  switch (t) {
    case Type::Object: return v.is_object();
    case Type::Array: return v.is_array();
    case Type::Number: return v.is_number();
    case Type::String: return v.is_string();
    case Type::Bool: return v.is_boolean();
  }
  return false;
}
const char* type_name(Type t) {
  static const char* names[] = {"object", "array", "number", "string", "bool"};
  return names[int(t)];
}

// Checks `path` (a/b/c) under `root`; appends a problem if it is missing or mistyped.
void require(const json& root, const std::string& where, const std::string& path, Type t,
             std::vector<std::string>& problems) {
  const json* cur = &root;
  std::stringstream ss(path);
  std::string key;
  while (std::getline(ss, key, '/')) {
    if (!cur->is_object() || !cur->contains(key)) {
      problems.push_back(where + path + ": missing");
      return;
    }
    cur = &(*cur)[key];
  }
  if (!has_type(*cur, t)) problems.push_back(where + path + ": expected " + type_name(t));
}

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// config.shard_layout (backends/shard_layout.hpp): the groups must tile the world — S ranks per
// shard group, R = W / S replicate groups' worth — and rank 0's groups must hold S and R ranks.
void check_shard_layout(const json& l, std::vector<std::string>& p) {
  const size_t before = p.size();
  for (const char* k : {"world", "ranks_per_node", "shard_group/size", "replicate_group/size"})
    require(l, "config/shard_layout/", k, Type::Number, p);
  for (const char* k : {"shard_group/ranks", "replicate_group/ranks", "unit_padding"})
    require(l, "config/shard_layout/", k, Type::Array, p);
  if (p.size() != before) return;
  const int64_t w = l["world"].get<int64_t>(), s = l["shard_group"]["size"].get<int64_t>(),
                r = l["replicate_group"]["size"].get<int64_t>();
  if (w < 1 || s < 1 || r < 1 || s * r != w)
    p.push_back("config/shard_layout: shard group " + std::to_string(s) + " x replicate group " + std::to_string(r) +
                " is not the world of " + std::to_string(w));
  else if (int64_t(l["shard_group"]["ranks"].size()) != s || int64_t(l["replicate_group"]["ranks"].size()) != r)
    p.push_back("config/shard_layout: rank 0's groups do not hold shard_group.size and replicate_group.size ranks");
  for (const auto& pad : l["unit_padding"])
    if (!pad.is_number_integer() || pad.get<int64_t>() < 0) {
      p.push_back("config/shard_layout/unit_padding: expected non-negative integers");
      break;
    }
}
}  // namespace

std::vector<std::string> validate_report(const json& r) {
  std::vector<std::string> p;
  if (!r.is_object()) return {"report is not a JSON object"};
  require(r, "", "schema/name", Type::String, p);
  require(r, "", "schema/version", Type::Number, p);
  if (p.empty() && (r["schema"]["name"] != kSchemaName || r["schema"]["version"] != kSchemaVersion))
    p.push_back("schema: expected " + std::string(kSchemaName) + " v" + std::to_string(kSchemaVersion) + ", got " +
                r["schema"]["name"].dump() + " v" + r["schema"]["version"].dump());
  require(r, "", "run_id", Type::String, p);
  require(r, "", "created", Type::String, p);
  require(r, "", "status/state", Type::String, p);
  require(r, "", "status/error", Type::String, p);
  if (r.contains("status") && r["status"].is_object() && r["status"].contains("state")) {
    const auto s = r["status"]["state"];
    if (s != "ok" && s != "oom" && s != "failed" && s != "timeout" && s != "diverged")
      p.push_back("status/state: must be ok, oom, failed, timeout or diverged, got " + s.dump());
  }
  require(r, "", "config", Type::Object, p);
  // What the run was read from (written by every report of this version; older ones lack it).
  if (r.contains("config") && r["config"].is_object()) {
    const auto& c = r["config"];
    auto entries = [&](const char* key, std::initializer_list<const char*> fields) {
      if (!c.contains(key)) return;
      if (!c[key].is_array()) {
        p.push_back(std::string("config/") + key + ": expected array");
        return;
      }
      for (size_t i = 0; i < c[key].size(); ++i)
        for (const char* f : fields)
          require(c[key][i], std::string("config/") + key + "[" + std::to_string(i) + "]/", f, Type::String, p);
    };
    entries("source_files", {"path", "sha256"});
    entries("ignored", {"key", "value", "reason"});
    entries("applied", {"key", "value", "as"});
    if (c.contains("precision_plan")) {  // backends/precision_plan.hpp (reports before 2026-11-24 lack it)
      for (const char* f : {"load", "params", "compute", "reduce", "grads", "optimizer_states", "notes"})
        require(c, "config/", std::string("precision_plan/") + f, Type::String, p);
      if (!c["precision_plan"].is_object() || !c["precision_plan"].contains("master") ||
          !(c["precision_plan"]["master"].is_string() || c["precision_plan"]["master"].is_null()))
        p.push_back("config/precision_plan/master: expected a dtype name or null");
    }
    if (c.contains("shard_layout")) check_shard_layout(c["shard_layout"], p);  // reports before 2026-11-24 lack it
    if (c.contains("warnings")) {
      if (!c["warnings"].is_array()) p.push_back("config/warnings: expected array");
      else
        for (const auto& w : c["warnings"])
          if (!w.is_string()) p.push_back("config/warnings: expected strings");
    }
  }
  const bool ok = r.contains("status") && r["status"].value("state", "") == "ok";
  if (!ok) return p;  // a failed run carries what it has; the rest is optional
  for (const char* k : {"env/device", "env/torch", "env/compiler", "env/host", "env/git_sha", "env/peak_source",
                        "config/backend/name", "config/backend/precision", "config/model/preset"})
    require(r, "", k, Type::String, p);
  for (const char* k : {"env/world_size", "env/nodes", "env/device_count", "env/peak_tflops",
                        "summary/tokens_per_gpu_per_s/median", "summary/tokens_per_gpu_per_s/p10",
                        "summary/tokens_per_gpu_per_s/p90", "summary/tokens_per_gpu_per_s/min",
                        "summary/tokens_per_gpu_per_s/max", "summary/step_time_s/median", "summary/mfu",
                        "summary/mfu_6n", "summary/hfu", "summary/tokens_per_rank_per_step",
                        "config/model/params/total", "config/train/steps"})
    require(r, "", k, Type::Number, p);
  require(r, "", "config/backend/options", Type::Object, p);
  require(r, "", "ranks", Type::Array, p);
  require(r, "", "steps", Type::Array, p);
  if (!p.empty()) return p;
  const bool emulated = r["env"].value("emulated", false);
  // A projection (`zerobench project`) measured no rank: it carries none, and a `projection`.
  const bool projected = r.contains("projection");
  if (projected) {
    require(r, "", "projection", Type::Object, p);
    for (const char* k : {"projection/step_time_s", "projection/tokens_per_gpu_per_s", "projection/mfu",
                          "projection/exposed_comm_s"})
      require(r, "", k, Type::Number, p);
    if (!r["ranks"].empty()) p.push_back("ranks: a projected report has no per-rank entries");
  } else if (r["ranks"].size() != (emulated ? 1 : r["env"]["world_size"].get<size_t>())) {
    p.push_back(emulated ? "ranks: an emulated run has one entry (the rank it played)" : "ranks: one entry per rank expected");
  }
  for (size_t i = 0; i < r["ranks"].size(); ++i) {
    const auto where = "ranks[" + std::to_string(i) + "]/";
    const auto& rk = r["ranks"][i];
    for (const char* k : {"rank", "memory/model_states_bytes/params", "memory/model_states_bytes/master_params",
                          "memory/model_states_bytes/grads", "memory/model_states_bytes/optimizer",
                          "memory/peak_tracked_bytes", "memory/peak_rss_bytes"})
      require(rk, where, k, Type::Number, p);
    if (rk.contains("memory") && rk["memory"].is_object() && rk["memory"].contains("estimated_peak_bytes"))
      require(rk, where, "memory/estimated_peak_bytes", Type::Number, p);
    // `buffers` (persistent communication buffers) is optional: reports before it lack it.
    if (rk.contains("memory") && rk["memory"].contains("model_states_bytes") &&
        rk["memory"]["model_states_bytes"].contains("buffers"))
      require(rk, where, "memory/model_states_bytes/buffers", Type::Number, p);
    for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce", "broadcast"}) {
      require(rk, where, std::string("comm/") + kind + "/count", Type::Number, p);
      require(rk, where, std::string("comm/") + kind + "/bytes", Type::Number, p);
    }
  }
  for (size_t j = 0; j < r["steps"].size(); ++j) {
    const auto where = "steps[" + std::to_string(j) + "]/";
    const auto& st = r["steps"][j];
    // A step the fp16 loss scaler skipped has no grad_norm (it overflowed): null, and loss_scale says so.
    const bool skipped = st.contains("loss_scale") && st["loss_scale"].is_object() &&
                         st["loss_scale"].value("skipped", false) && st.contains("grad_norm") && st["grad_norm"].is_null();
    for (const char* k : {"step", "loss", "grad_norm", "lr", "time_s"})
      if (!(skipped && std::string(k) == "grad_norm")) require(st, where, k, Type::Number, p);
    if (st.contains("loss_scale")) {
      for (const char* k : {"scale", "next_scale"}) require(st, where, std::string("loss_scale/") + k, Type::Number, p);
      for (const char* k : {"overflow", "skipped"}) require(st, where, std::string("loss_scale/") + k, Type::Bool, p);
    }
  }
  // summary.batching (a token file's runs, docs/data.md): the per-document counts behind tokens/GPU/s.
  if (r["summary"].contains("batching")) {
    require(r, "", "summary/batching/mode", Type::String, p);
    for (const char* k : {"real_tokens_per_rank_per_step", "documents_per_rank_per_step", "label_tokens_per_rank_per_step",
                          "padding_fraction", "attention_span"})
      require(r, "", std::string("summary/batching/") + k, Type::Number, p);
    if (p.empty()) {
      const auto& b = r["summary"]["batching"];
      const auto mode = b["mode"].get<std::string>();
      if (mode != "pad" && mode != "pack" && mode != "pack-naive")
        p.push_back("summary/batching/mode: must be pad, pack or pack-naive, got " + mode);
      const double f = b["padding_fraction"].get<double>();
      if (!(f >= 0 && f < 1)) p.push_back("summary/batching/padding_fraction: must lie in [0, 1), got " + std::to_string(f));
    }
  }
  return p;
}

// mkdir -p with POSIX calls: libtorch.so exports its own std::filesystem symbols, which
// interpose the C++ runtime's and crash, so the project stays off std::filesystem.
void make_directories(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos == dir.size() || dir[pos] == '/') {
      const std::string prefix = dir.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
        throw RunError("cannot create directory " + prefix + ": " + std::strerror(errno));
    }
  }
}

void write_json_atomic(const std::string& path, const json& value) { write_text_atomic(path, value.dump(2) + "\n"); }

void write_text_atomic(const std::string& path_given, const std::string& text) {
  std::string path = path_given;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // Not a regular file (/dev/null, /dev/stdout, a FIFO): write into it. Renaming over it
    // would replace the device node or pipe with a regular file (--out /dev/null as root
    // once turned /dev/null into a file for every process on the machine).
    std::ofstream out(path);
    if (!out) throw RunError("cannot write " + path);
    out << text;
    out.flush();
    if (!out) throw RunError("write to " + path + " failed");
    return;
  }
  // A symbolic link to a regular file: replace the file it names, and keep the link.
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      path = real;
      std::free(real);
    }
  }
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) make_directories(path.substr(0, slash));
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw RunError("cannot write " + tmp);
    out << text;
    out.flush();
    if (!out) throw RunError("write to " + tmp + " failed");
  }
  int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw RunError("cannot rename " + tmp + " to " + path);
  }
}

json read_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read report " + path);
  json r;
  try {
    in >> r;
  } catch (const std::exception& e) {
    throw UsageError("report " + path + " is not valid JSON: " + e.what());
  }
  auto problems = validate_report(r);
  if (!problems.empty()) throw UsageError("report " + path + " does not match the schema: " + problems.front());
  return r;
}

json failed_report(const std::string& state, const std::string& error, const json& config) {
  return {{"schema", {{"name", kSchemaName}, {"version", kSchemaVersion}}},
          {"run_id", "failed-" + std::to_string(std::chrono::system_clock::now().time_since_epoch().count())},
          {"created", now_iso8601()},
          {"status", {{"state", state}, {"error", error}}},
          {"config", config}};
}

}  // namespace zb::reports
