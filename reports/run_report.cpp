// run_report.cpp — the typed record's one JSON mapping, its validation and the SCHEMA.md check
// (see run_report.hpp).
#include "reports/run_report.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <type_traits>

#include "reports/report.hpp"

namespace zb::reports {

namespace {
using json = nlohmann::json;

// ---- the mapping, generated from each struct's fields() ----

template <class T, class = void>
struct is_record : std::false_type {};
template <class T>
struct is_record<T, std::void_t<decltype(std::declval<T&>().extra)>> : std::true_type {};
template <class T>
struct is_map : std::false_type {};
template <class T>
struct is_map<std::map<std::string, T>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// parse: how `j` read into `out`: kFail (another type: `out` untouched), kExact, or kLossy (the
// value read, but written back it would be spelt otherwise: an integer read into a double).
enum Read { kFail = 0, kExact = 1, kLossy = 2 };
Read parse(const json& j, double& out) {
  if (!j.is_number()) return kFail;
  out = j.get<double>();
  return j.is_number_float() ? kExact : kLossy;
}
Read parse(const json& j, int64_t& out) {
  if (!j.is_number()) return kFail;
  if (j.is_number_float()) {
    const double d = j.get<double>();
    out = static_cast<int64_t>(d);
    return kLossy;
  }
  out = j.get<int64_t>();
  // An unsigned value past int64's range (a 64-bit seed) wraps in the member (uint64_t(member)
  // restores it) and is written back from extra as it was.
  return j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX) ? kLossy : kExact;
}
Read parse(const json& j, bool& out) {
  if (!j.is_boolean()) return kFail;
  out = j.get<bool>();
  return kExact;
}
Read parse(const json& j, std::string& out) {
  if (!j.is_string()) return kFail;
  out = j.get<std::string>();
  return kExact;
}
Read parse(const json& j, json& out) {
  out = j;
  return kExact;
}
template <class T>
std::enable_if_t<is_record<T>::value, Read> parse(const json& j, T& out);
template <class T>
Read parse(const json& j, std::map<std::string, T>& out);
template <class T>
Read parse(const json& j, std::vector<T>& out) {
  if (!j.is_array()) return kFail;
  std::vector<T> v(j.size());
  Read worst = kExact;
  for (size_t i = 0; i < j.size(); ++i) {
    const Read r = parse(j[i], v[i]);
    if (r == kFail) return kFail;
    worst = std::max(worst, r);
  }
  out = std::move(v);
  return worst;
}
template <class T>
Read parse(const json& j, std::map<std::string, T>& out) {
  if (!j.is_object()) return kFail;
  std::map<std::string, T> m;
  Read worst = kExact;
  for (const auto& [k, v] : j.items()) {
    const Read r = parse(v, m[k]);
    if (r == kFail) return kFail;
    worst = std::max(worst, r);
  }
  out = std::move(m);
  return worst;
}

// Reads each typed member and erases its key when read exactly; what remains is `extra`.
struct Reader {
  json rest;
  std::vector<std::string> absent;
  template <class M>
  void operator()(const char* key, M& member) {
    auto it = rest.find(key);
    if (it == rest.end()) {
      if constexpr (!is_optional<M>::value) absent.push_back(key);
      return;
    }
    Read r = kFail;
    if constexpr (is_optional<M>::value) {
      typename M::value_type v{};
      r = parse(*it, v);
      if (r != kFail) member = std::move(v);  // else another type (null): carried in extra
    } else {
      r = parse(*it, member);
    }
    if (r == kExact) rest.erase(it);
  }
};

template <class T>
std::enable_if_t<is_record<T>::value, Read> parse(const json& j, T& out) {
  if (!j.is_object()) return kFail;
  Reader r{j, {}};
  T t{};
  t.fields(r);
  t.extra.keys = std::move(r.rest);
  t.extra.absent = std::move(r.absent);
  out = std::move(t);
  return kExact;  // a member read lossily is carried in extra: the record writes it back as it was
}

json write(double v) { return v; }
json write(int64_t v) { return v; }
json write(bool v) { return v; }
json write(const std::string& v) { return v; }
json write(const json& v) { return v; }
template <class T>
std::enable_if_t<is_record<T>::value, json> write(const T& s);
template <class T>
json write(const std::map<std::string, T>& m);
template <class T>
json write(const std::vector<T>& v) {
  json a = json::array();
  for (const auto& x : v) a.push_back(write(x));
  return a;
}
template <class T>
json write(const std::map<std::string, T>& m) {
  json o = json::object();
  for (const auto& [k, v] : m) o[k] = write(v);
  return o;
}

// Writes each typed member over `extra`: a key extra still holds (another type, or read lossily)
// is written as extra holds it; an absent optional or a member the JSON lacked writes nothing.
struct Writer {
  json out;
  const std::vector<std::string>& absent;
  template <class M>
  void operator()(const char* key, const M& member) {
    if (out.contains(key)) return;
    if constexpr (is_optional<M>::value) {
      if (member) out[key] = write(*member);
    } else {
      if (std::find(absent.begin(), absent.end(), key) == absent.end()) out[key] = write(member);
    }
  }
};

template <class T>
std::enable_if_t<is_record<T>::value, json> write(const T& s) {
  Writer w{s.extra.keys.is_object() ? s.extra.keys : json::object(), s.extra.absent};
  const_cast<T&>(s).fields(w);  // fields() only reads the members through a Writer
  return w.out;
}

// The typed keys, as SCHEMA.md spells them: `a.b`, `ranks[i].c`, `comm.<kind>.d`.
struct KeyLister {
  std::string prefix;
  std::vector<std::string>* keys;
  template <class M>
  void operator()(const char* key, const M&) {
    if (key[0] == '_') return;  // not in files (_cell)
    add<M>(prefix + key);
  }
  template <class M>
  void add(const std::string& path) {
    if constexpr (is_optional<M>::value) {
      add<typename M::value_type>(path);
    } else if constexpr (is_record<M>::value) {
      KeyLister sub{path + ".", keys};
      M m{};
      m.fields(sub);
    } else {
      add_leaf(path, static_cast<const M*>(nullptr));
    }
  }
  void add_leaf(const std::string& path, const void*) { keys->push_back(path); }
  template <class T>
  void add_leaf(const std::string& path, const std::vector<T>*) {
    if constexpr (is_record<T>::value || is_map<T>::value) add<T>(path + "[i]");
    else keys->push_back(path);
  }
  template <class T>
  void add_leaf(const std::string& path, const std::map<std::string, T>*) {
    add<T>(path + ".<kind>");
  }
};

// ---- validation (the checks SCHEMA.md states) ----

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

// One step's collectives by kind (ranks[i].comm_steps[j], steps[j].comm): {count, bytes} each.
void check_step_comm(const json& c, const std::string& at, std::vector<std::string>& p) {
  if (!c.is_object()) {
    p.push_back(at + ": expected object");
    return;
  }
  for (const auto& [kind, v] : c.items()) {
    require(v, at + "/" + kind + "/", "count", Type::Number, p);
    require(v, at + "/" + kind + "/", "bytes", Type::Number, p);
  }
}

// ---- the SCHEMA.md check ----

// `ranks[j]` and `steps[j]` are `[i]` here; `<moment>` etc. stay as written.
std::string normalise(std::string k) {
  for (size_t p; (p = k.find("[j]")) != std::string::npos;) k.replace(p, 3, "[i]");
  return k;
}

bool mentions(const std::string& text, const std::string& word) {
  auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t p = text.find(word); p != std::string::npos; p = text.find(word, p + 1)) {
    const bool left = p == 0 || !is_word(text[p - 1]);
    const bool right = p + word.size() >= text.size() || !is_word(text[p + word.size()]);
    if (left && right) return true;
  }
  return false;
}

// SCHEMA.md's report table: key (as written, normalised) -> the row's meaning.
std::map<std::string, std::string> documented_keys(const std::string& md) {
  std::map<std::string, std::string> out;
  std::istringstream in(md.substr(0, md.find("\n## ")));  // the report section only
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    const size_t c1 = line.find(" | ", 2), c2 = c1 == std::string::npos ? c1 : line.find(" | ", c1 + 3);
    if (c2 == std::string::npos) continue;
    const std::string names = line.substr(2, c1 - 2), meaning = line.substr(c2 + 3);
    std::string prefix;
    bool first = true;
    for (size_t p = names.find('`'); p != std::string::npos; p = names.find('`', p + 1)) {
      const size_t q = names.find('`', p + 1);
      if (q == std::string::npos) break;
      std::string k = normalise(names.substr(p + 1, q - p - 1));
      if (first) prefix = k.rfind('.') == std::string::npos ? "" : k.substr(0, k.rfind('.') + 1);
      else if (k.find('.') == std::string::npos) k = prefix + k;  // `summary.a`, `b`: summary.b
      first = false;
      out[k] += meaning;
      p = q;
    }
  }
  return out;
}

// Every step down a key: `ranks[i].memory.x` -> ranks[i], ranks[i].memory, ranks[i].memory.x.
std::vector<std::string> ancestors(const std::string& k) {
  std::vector<std::string> out;
  for (size_t p = 0; p < k.size(); ++p)
    if (k[p] == '.' || k[p] == '[') out.push_back(k.substr(0, p));
  out.push_back(k);
  return out;
}

}  // namespace

// ---- public ----

std::string RunConfig::backend_name() const {
  if (backend) return backend->name.value_or("?");
  if (options) return options->backend.value_or("?");
  return "";
}
std::string RunConfig::precision_name() const {
  if (backend) return backend->precision.value_or("?");
  if (options) return options->precision.value_or("?");
  return "";
}

std::string RunReport::cell_name() const {
  if (cell) return *cell;
  const auto& absent = extra.absent;
  return std::find(absent.begin(), absent.end(), "run_id") != absent.end() ? "?" : run_id;
}

const std::vector<RankRecord>& RunReport::rank_records() const {
  static const std::vector<RankRecord> none;
  return ranks ? *ranks : none;
}
const std::vector<StepRecord>& RunReport::step_records() const {
  static const std::vector<StepRecord> none;
  return steps ? *steps : none;
}

RunReport run_report_from_json(const json& j) {
  RunReport r;
  parse(j, r);
  return r;
}
json to_json(const RunReport& r) { return write(r); }
json to_json(const RunConfig& c) { return write(c); }
json to_json(const Env& e) { return write(e); }
json to_json(const ParamCounts& p) { return write(p); }
json to_json(const ModelConfig& m) { return write(m); }
json to_json(const BackendConfig& b) { return write(b); }
json to_json(const TrainConfig& t) { return write(t); }
json to_json(const PrecisionPlan& p) { return write(p); }
json to_json(const FlopsPerToken& f) { return write(f); }
json to_json(const ModelStates& m) { return write(m); }
json to_json(const ProgramOrder& p) { return write(p); }
json to_json(const LossScale& l) { return write(l); }
json to_json(const RankRecord& r) { return write(r); }
json to_json(const Summary& s) { return write(s); }
json to_json(const Status& s) { return write(s); }
json to_json(const StepRecord& s) { return write(s); }
json to_json(const RankProfile& p) { return write(p); }
json to_json(const Profile& p) { return write(p); }
RankRecord rank_record_from_json(const json& j) {
  RankRecord r;
  parse(j, r);
  return r;
}

std::vector<std::string> validate_run_report(const json& r) {
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
    if (rk.contains("memory") && rk["memory"].is_object() && rk["memory"].contains("cuda") &&
        rk["memory"]["cuda"].is_object() && rk["memory"]["cuda"].contains("peak_allocated_bytes"))
      require(rk, where, "memory/cuda/peak_allocated_bytes", Type::Number, p);
    // Every step's collectives and input (zerobench crossval compares them); reports before them lack them.
    if (rk.contains("comm_steps")) {
      if (!rk["comm_steps"].is_array()) p.push_back(where + "comm_steps: expected array");
      else
        for (size_t j = 0; j < rk["comm_steps"].size(); ++j)
          check_step_comm(rk["comm_steps"][j], where + "comm_steps[" + std::to_string(j) + "]", p);
    }
    if (rk.contains("batch_sha256")) {
      if (!rk["batch_sha256"].is_array()) p.push_back(where + "batch_sha256: expected array");
      else
        for (const auto& h : rk["batch_sha256"])
          if (!h.is_string()) {
            p.push_back(where + "batch_sha256: expected strings");
            break;
          }
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
    if (st.contains("comm")) check_step_comm(st["comm"], where + "comm", p);
    if (st.contains("loss_scale")) {
      for (const char* k : {"scale", "next_scale"}) require(st, where, std::string("loss_scale/") + k, Type::Number, p);
      for (const char* k : {"overflow", "skipped"}) require(st, where, std::string("loss_scale/") + k, Type::Bool, p);
    }
  }
  // summary.batching (a token file's runs, docs/data.md): the per-document counts behind tokens/GPU/s.
  if (r.contains("summary") && r["summary"].is_object() && r["summary"].contains("batching")) {
    const size_t before = p.size();
    require(r, "", "summary/batching/mode", Type::String, p);
    for (const char* k : {"real_tokens_per_rank_per_step", "documents_per_rank_per_step", "label_tokens_per_rank_per_step",
                          "padding_fraction", "attention_span"})
      require(r, "", std::string("summary/batching/") + k, Type::Number, p);
    if (p.size() == before) {
      const auto& b = r["summary"]["batching"];
      const auto mode = b["mode"].get<std::string>();
      if (mode != "pad" && mode != "pad-longest" && mode != "pack" && mode != "pack-naive")
        p.push_back("summary/batching/mode: must be pad, pad-longest, pack or pack-naive, got " + mode);
      const double f = b["padding_fraction"].get<double>();
      if (!(f >= 0 && f < 1)) p.push_back("summary/batching/padding_fraction: must lie in [0, 1), got " + std::to_string(f));
    }
  }
  return p;
}

std::vector<std::string> run_report_typed_keys() {
  std::vector<std::string> keys;
  KeyLister l{"", &keys};
  RunReport r;
  r.fields(l);
  return keys;
}

// Documented keys the record carries whole in `extra` (nothing in zerobench reads them by field).
const std::vector<std::string>& run_report_carried_keys() {
  static const std::vector<std::string> keys = {};
  return keys;
}

std::vector<std::string> check_schema_doc(const std::string& md) {
  std::vector<std::string> problems;
  const auto doc = documented_keys(md);
  if (doc.empty()) return {"SCHEMA.md: no report keys found"};
  const auto typed = run_report_typed_keys();
  const auto& carried = run_report_carried_keys();
  // A typed key: its own row, or an ancestor's row whose meaning names every step below it.
  for (const auto& k : typed) {
    bool ok = doc.count(k) > 0;
    for (const auto& a : ancestors(k)) {
      if (ok || a == k || !doc.count(a)) continue;
      std::string rest = k.substr(a.size() + (k[a.size()] == '.' ? 1 : 0));
      bool all = true;
      std::istringstream steps(rest);
      for (std::string part; std::getline(steps, part, '.');) {
        if (part.size() > 3 && part.compare(part.size() - 3, 3, "[i]") == 0) part.resize(part.size() - 3);
        if (!part.empty() && part != "[i]" && !mentions(doc.at(a), part)) all = false;
      }
      ok = all;
    }
    if (!ok) problems.push_back("SCHEMA.md does not document the record's key " + k);
  }
  // A documented key: typed (itself, below it, or above it), or carried.
  for (const auto& [k, meaning] : doc) {
    bool ok = std::find(carried.begin(), carried.end(), k) != carried.end();
    for (const auto& t : typed) {
      if (ok) break;
      ok = t == k || t.rfind(k + ".", 0) == 0 || t.rfind(k + "[", 0) == 0 || k.rfind(t + ".", 0) == 0;
    }
    if (!ok) problems.push_back("SCHEMA.md documents " + k + ", which the record neither types nor carries");
  }
  return problems;
}

}  // namespace zb::reports
