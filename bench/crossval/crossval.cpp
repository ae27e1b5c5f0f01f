// crossval.cpp — `zerobench crossval` (see crossval.hpp): work directory, both sides as child
// processes, the document. The comparison itself is crossval_compare.cpp.
#include "backends/backend_info.hpp"
#include "bench/crossval/crossval.hpp"

#include <ATen/Parallel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "backends/engine.hpp"
#include "bench/build_info.hpp"
#include "bench/crossval/crossval_compare.hpp"
#include "bench/crossval/crossval_device.hpp"
#include "models/checkpoint/hf_llama.hpp"
#include "models/checkpoint/safetensors.hpp"
#include "models/data.hpp"
#include "models/llama.hpp"
#include "reports/crossval_table.hpp"
#include "reports/report.hpp"
#include "reports/run_report.hpp"
#include "reports/table.hpp"
#include "runtime/device.hpp"
#include "runtime/errors.hpp"
#include "runtime/launcher.hpp"
#include "runtime/subprocess.hpp"

namespace zb::bench {

namespace {
using json = nlohmann::json;
namespace ckpt = models::checkpoint;

// Flags that belong to crossval itself (not forwarded to `zerobench run`) or that crossval sets.
const std::set<std::string> kOwnFlags = {"precision", "out",    "python", "work-dir",       "logits",          "quiet",
                                         "help",      "table",  "nproc",  "threads",        "warmup",          "plant-lr-scale",
                                         "deepspeed-config", "reference-launcher"};
// When the reference reads one framework config file (DeepSpeed: BackendInfo::crossval's
// config_file) crossval writes it with every resolved value in it, and both sides read it: the
// config file that named the run is not forwarded beside it.
const std::set<std::string> kConfigFlags = {"config", "accelerate-config"};

bool is_file(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw RunError("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string strip_json_suffix(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0 ? path.substr(0, path.size() - 5) : path;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// The `run` flags the user gave, as `--name value...`, minus crossval's own and those a
// substitution sets (`replaced`, "--name" -> value).
std::vector<std::string> forwarded_run_flags(const CLI::App& cmd, bool reference_config_file,
                                             const std::map<std::string, std::string>& replaced) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : cmd.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    const std::string name = opt->get_lnames().front();
    if (kOwnFlags.count(name) || (reference_config_file && kConfigFlags.count(name)) || replaced.count("--" + name))
      continue;
    if (opt->get_expected_max() == 0) {  // a flag
      out.push_back("--" + name);
      continue;
    }
    for (const auto& v : opt->results()) {
      out.push_back("--" + name);
      out.push_back(v);
    }
  }
  return out;
}

// The user's own config file of the format the reference reads (`kind`, e.g. "deepspeed"), as the
// config resolution recorded it (given directly or named by an accelerate config); {} if none.
json user_config_file(const RunOptions::Resolved& resolved, const std::string& kind) {
  json file = json::object();
  for (const auto& src : resolved.provenance.sources)
    if (src.kind == kind) file = json::parse(read_text(src.path), nullptr, true, /*ignore_comments=*/true);
  return file;
}

// `batching` only for per-document batches (pad, pack): a pack-naive run's documents and spec.json
// are what they were before per-document crossval existed.
json crossval_train_json(const backends::TrainConfig& t) {
  json j = {{"micro_batch", t.micro_batch},   {"seq_len", t.seq_len},
          {"grad_accum", t.grad_accum},     {"steps", t.steps},
          {"warmup", t.warmup},             {"lr", t.lr},
          {"lr_schedule", t.lr_schedule},   {"lr_warmup_steps", t.lr_warmup_steps},
          {"min_lr_ratio", t.min_lr_ratio}, {"weight_decay", t.weight_decay},
          {"betas", {t.beta1, t.beta2}},    {"eps", t.eps},
          {"adamw_impl", config::adamw_impl_name(t.adamw_impl)},
          {"grad_clip", t.grad_clip},       {"seed", t.seed},
          {"data", t.data},                 {"activation_checkpointing", t.activation_checkpointing.enabled()},
          {"activation_checkpointing_mode", t.activation_checkpointing.name()},
          {"sync_each_batch", t.sync_each_batch}};
  if (!t.batching.empty() && t.batching != "pack-naive") j["batching"] = t.batching;
  return j;
}


// weights/ (HF Llama safetensors + config.json, fp32: each side casts to its load dtype).
void write_weights(const std::string& dir, const models::ModelConfig& cfg, uint64_t seed) {
  std::vector<at::Tensor> units;
  for (int u = 0; u < int(models::unit_count(cfg)); ++u) units.push_back(models::init_unit_flat(cfg, u, seed));
  ckpt::write_hf_llama(dir, cfg, units, at::kFloat);
}

// batches.safetensors: rank r's micro-batch a of step s, exactly as bench/run/trainer.cpp draws it;
// per-document batches (--batching pad|pack) add their position_ids and document_ids.
void write_batches(const std::string& path, const backends::EngineSpec& spec, int world) {
  const auto& t = spec.train;
  auto data = models::make_data_source(t.data, spec.model.vocab, t.seed, t.batching);
  std::vector<ckpt::NamedTensor> tensors;
  for (int64_t s = 0; s < t.steps; ++s)
    for (int64_t a = 0; a < t.grad_accum; ++a)
      for (int r = 0; r < world; ++r) {
        auto b = data->samples(models::first_sample_index(s, a, t.grad_accum, r, world, t.micro_batch), t.micro_batch,
                               t.seq_len);
        const std::string key = "step" + std::to_string(s) + ".micro" + std::to_string(a) + ".rank" + std::to_string(r);
        tensors.push_back({key + ".tokens", b.tokens});
        tensors.push_back({key + ".targets", b.targets});
        if (b.document_ids.defined()) {
          tensors.push_back({key + ".position_ids", b.position_ids});
          tensors.push_back({key + ".document_ids", b.document_ids});
        }
      }
  ckpt::write_safetensors(path, tensors);
}

std::string checked_python(const std::string& python) {
  if (python.empty() || !is_file(python) || access(python.c_str(), X_OK) != 0)
    throw UsageError("--python '" + python + "' is not an executable file (run ./scripts/setup.sh or pass --python)");
  return python;
}

struct SideResult {
  bool ok = false;
  std::string error;
  double wall_s = 0;
};

// The line of a log that says what went wrong: the last one naming an error, else the last.
std::string error_line(const std::string& text) {
  std::string found;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.find("Error") != std::string::npos || line.find("error:") != std::string::npos ||
        line.find("failed") != std::string::npos)
      found = line;
    start = end + 1;
  }
  return found.empty() ? last_line(text) : found;
}

// The line of a reference runner's log that says why it failed. torchrun's own report names only
// ChildFailedError (torch/distributed/elastic); the child's line is above it: a runner's own
// refusal ("run_fsdp2.py: ..."), else the last Python exception line that is not the launcher's.
std::string reference_error_line(const std::string& text) {
  static const std::regex runner(R"(^(\[rank\d+\]:\s*)?(run_\w+\.py|common\.py): .*)");
  static const std::regex exception(R"(^(\[rank\d+\]:\s*)?[A-Za-z_][\w.]*(Error|Exception|Exit|Forbidden)(: .*)?$)");
  std::string own, raised;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("ChildFailedError") != std::string::npos || line.find("torch.distributed.elastic") != std::string::npos)
      continue;
    if (std::regex_match(line, runner)) own = line;
    else if (std::regex_match(line, exception)) raised = line;
  }
  if (!own.empty()) return own;
  return raised.empty() ? error_line(text) : raised;
}

// The lowest failed rank's own line, as scripts/crossval/common.py records it
// (<errors>/error_rank<r>.txt); "" when no rank wrote one.
std::string recorded_error(const std::string& errors) {
  std::map<int, std::string> by_rank;
  std::error_code ec;
  static const std::regex name(R"(error_rank(\d+)\.txt)");
  for (const auto& e : std::filesystem::directory_iterator(errors, ec)) {
    std::smatch m;
    const std::string file = e.path().filename().string();
    if (std::regex_match(file, m, name)) by_rank[std::stoi(m[1])] = last_line(read_text(e.path().string()));
  }
  for (const auto& [rank, line] : by_rank)
    if (!line.empty()) return line;
  return "";
}

// A side's outcome: a failure is described by the rank's recorded error line (`errors`, see
// recorded_error), else `log`'s reference_error_line, else `detail` (a side without a log).
SideResult side_result(int exit_code, bool timed_out, double wall_s, double timeout_s, std::string detail,
                       const std::string& log, const std::string& errors) {
  SideResult s;
  s.wall_s = wall_s;
  s.ok = exit_code == 0 && !timed_out;
  if (!s.ok) {
    if (!log.empty()) {
      try {
        detail = errors.empty() ? "" : recorded_error(errors);
        if (detail.empty()) detail = reference_error_line(read_text(log));
      } catch (const std::exception&) {
        detail = "(no log)";
      }
      detail += " (log: " + log + ")";
    }
    s.error = timed_out ? "timed out after " + std::to_string(int(timeout_s)) + " s"
                        : "exit code " + std::to_string(exit_code) + ": " + detail;
  }
  return s;
}

// Runs one side; with `log` non-empty its stdout and stderr go to that file (the reference's
// frameworks are chatty), and a failure is described by the rank's recorded error line (`errors`,
// see recorded_error), else the log's.
SideResult run_side(std::vector<std::string> argv, double timeout_s, const std::string& what, const std::string& log = "",
                    const std::string& errors = "") {
  std::cerr << "crossval: " << what << (log.empty() ? "" : " (log: " + log + ")") << "\n";
  if (!log.empty())
    argv.insert(argv.begin(), {"/bin/sh", "-c", "log=$1; shift; exec \"$@\" >\"$log\" 2>&1", "sh", log});
  const auto r = runtime::run_subprocess(argv, std::chrono::milliseconds(int64_t(timeout_s * 1000)));
  if (r.interrupted) throw RunError("interrupted");
  return side_result(r.exit_code, r.timed_out, r.wall_s, timeout_s, log.empty() ? error_line(r.stderr_tail) : "",
                     log, errors);
}

// The reference's ranks started by zerobench's launcher (runtime/launcher.hpp, LaunchOptions::program):
// torchrun's worker environment and its agent store, without torchrun's agent process — whose
// `import torch` and elastic rendezvous cost each mode about 2.5 s of CPU and change nothing the
// ranks compute. `argv` is one rank's command line; every rank's output goes to `log`.
SideResult run_reference_ranks(const std::vector<std::string>& argv, int world, double timeout_s,
                               const std::string& what, const std::string& log, const std::string& errors) {
  std::cerr << "crossval: " << what << " (log: " << log << ")\n";
  unlink(log.c_str());
  runtime::LaunchOptions lo;
  lo.nproc = world;
  lo.program = argv.front();
  lo.argv = argv;
  lo.output_file = log;
  lo.timeout = std::chrono::milliseconds(int64_t(timeout_s * 1000));
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = runtime::launch_local(lo);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.exit_code == 130) throw RunError("interrupted");
  const bool timed_out = r.exit_code == 124 && r.failed_rank < 0;
  return side_result(r.exit_code, timed_out, wall, timeout_s, "", log, errors);
}

// One mode of a crossval, resolved before anything runs.
struct ModePlan {
  RunOptions run;                         // `zerobench run` with --precision MODE
  RunOptions::Resolved resolved;          // what it resolves to: zerobench's side
  json reference_options;                 // the options the runner reads (spec.json), substitutions applied
  std::vector<std::string> substitutions; // CrossvalReference::reference_setup's lines
  std::map<std::string, std::string> zerobench_flags;  // its flags added to zerobench's side
};

// zerobench's side reads the framework config file crossval wrote (`flag path`) instead of the
// user's: it must resolve to the run the user's configuration resolves to (`expected`), or the two
// sides would not be the run the user asked about. Throws RunError naming the first difference.
void check_same_run(const RunOptions& mode, const RunOptions::Resolved& expected, const std::string& flag,
                    const std::string& path) {
  RunOptions side = mode;
  side.config.clear();
  side.accelerate_config.clear();
  side.deepspeed_config.clear();
  for (const char* f : {"--config", "--accelerate-config", "--deepspeed-config"}) side.given.erase(f);
  (flag == "--deepspeed-config" ? side.deepspeed_config : flag == "--accelerate-config" ? side.accelerate_config : side.config) =
      path;
  side.given.insert(flag);
  side.nproc_given = true;  // the side is started with --nproc W
  side.given.insert("--nproc");
  RunOptions::Resolved got;
  try {
    got = side.resolve();
  } catch (const UsageError& e) {
    throw RunError("crossval: zerobench refuses the file written for both sides, " + path + ": " + e.what());
  }
  auto run_of = [](const RunOptions::Resolved& r) {
    return json{{"backend", r.backend}, {"precision", r.spec.precision}, {"train", crossval_train_json(r.spec.train)},
                {"options", r.spec.options.json()}};
  };
  const json want = run_of(expected), have = run_of(got);
  if (want == have) return;
  const auto first = json::diff(want, have).front();
  const json::json_pointer at(first["path"].get<std::string>());
  throw RunError("crossval: " + path + " (written for both sides) resolves " + first["path"].get<std::string>() + " to " +
                 (have.contains(at) ? have.at(at).dump() : std::string("nothing")) +
                 ", where the configuration given resolves it to " +
                 (want.contains(at) ? want.at(at).dump() : std::string("nothing")));
}

// --- the logits parity check (hidden --logits) ---

class PlainWeights : public models::UnitParamSource {
 public:
  explicit PlainWeights(std::vector<std::vector<at::Tensor>> w) : w_(std::move(w)) {}
  std::vector<at::Tensor> unit_weights(int unit) override { return w_[size_t(unit)]; }

 private:
  std::vector<std::vector<at::Tensor>> w_;
};

// Writes weights and one micro-batch of tokens, computes zerobench's logits from the weights as
// read back from the safetensors file, has scripts/crossval/logits.py compute the reference
// model's, and compares. fp32 must match to 1e-5 of the largest logit (the same ATen kernels
// run in the same order; any slack is for a different intra-op split), bf16 to one bf16 ulp of
// the largest logit (2^-8 relative).
int logits_command(const CrossvalOptions& o, const std::string& out, const std::string& work) {
  const auto spec = o.run.engine_spec();
  const auto& cfg = spec.model;
  write_weights(work + "/weights", cfg, spec.train.seed);
  auto data = models::make_data_source(spec.train.data, cfg.vocab, spec.train.seed, spec.train.batching);
  const auto batch = data->samples(0, spec.train.micro_batch, spec.train.seq_len);
  // Per-document batches (--batching pad|pack): the rows' position_ids and document_ids beside the
  // tokens; both models attend per document with them.
  const bool per_document = batch.document_ids.defined();
  std::vector<ckpt::NamedTensor> inputs = {{"tokens", batch.tokens}};
  if (per_document) {
    inputs.push_back({"position_ids", batch.position_ids});
    inputs.push_back({"document_ids", batch.document_ids});
  }
  ckpt::write_safetensors(work + "/tokens.safetensors", inputs);
  const auto checkpoint = ckpt::SafetensorsCheckpoint::open(work + "/weights");
  at::set_num_threads(1);
  std::vector<std::string> modes = o.precisions.empty() ? std::vector<std::string>{"fp32", "bf16"} : o.precisions;
  std::string joined;
  std::vector<at::Tensor> ours;
  for (const auto& mode : modes) {
    if (mode != "fp32" && mode != "bf16") throw UsageError("--logits --precision must be fp32 or bf16, got '" + mode + "'");
    const auto dtype = mode == "fp32" ? at::kFloat : at::kBFloat16;
    std::vector<std::vector<at::Tensor>> w;
    for (int u = 0; u < int(models::unit_count(cfg)); ++u) {
      std::vector<at::Tensor> unit;
      for (const auto& t : ckpt::read_hf_llama_unit(checkpoint, cfg, u)) unit.push_back(t.to(dtype));
      w.push_back(std::move(unit));
    }
    PlainWeights source(std::move(w));
    at::NoGradGuard no_grad;
    const auto table = models::make_rope_cache(cfg, spec.train.seq_len, dtype, at::kCPU);
    const auto rope = per_document ? models::document_attention(table, batch.position_ids, batch.document_ids) : table;
    ours.push_back(models::forward_logits(cfg, source, batch.tokens, rope));
    ckpt::write_safetensors(work + "/logits_zerobench_" + mode + ".safetensors", {{"logits", ours.back()}});
    joined += (joined.empty() ? "" : ",") + mode;
  }
  const auto side = run_side({checked_python(o.python), crossval_scripts_dir() + "/logits.py", "--work", work,
                              "--dtypes", joined},
                             o.run.timeout_s > 0 ? o.run.timeout_s : 600, "reference model logits (" + joined + ")",
                             work + "/logits.log");
  if (!side.ok) throw RunError("scripts/crossval/logits.py failed: " + side.error);
  json results = json::array();
  bool all_ok = true;
  for (size_t i = 0; i < modes.size(); ++i) {
    const auto& mode = modes[i];
    const auto& logits = ours[i];
    const auto py = ckpt::SafetensorsFile::open(work + "/logits_python_" + mode + ".safetensors").tensor("logits");
    const auto a = logits.to(at::kFloat), b = py.to(at::kFloat);
    const double max_abs = a.sizes() == b.sizes() ? (a - b).abs().max().item<double>() : INFINITY;
    const double scale = b.abs().max().item<double>();
    const double tol = (mode == "fp32" ? 1e-5 : std::ldexp(1.0, -8)) * scale;
    const bool ok = a.sizes() == b.sizes() && max_abs <= tol;
    all_ok = all_ok && ok;
    results.push_back({{"dtype", mode},
                       {"shape", logits.sizes().vec()},
                       {"max_abs_diff", max_abs},
                       {"max_abs_logit", scale},
                       {"tolerance_abs", tol},
                       {"bitwise_equal", a.sizes() == b.sizes() && at::equal(logits, py.to(logits.scalar_type()))},
                       {"agree", ok}});
  }
  json doc = {{"schema", {{"name", "zerobench.crossval.logits"}, {"version", 1}}},
              {"model", {{"layers", cfg.layers}, {"hidden", cfg.hidden}, {"heads", cfg.heads}, {"kv_heads", cfg.kv_heads},
                         {"ffn", cfg.ffn}, {"vocab", cfg.vocab}}},
              {"results", results},
              {"agree", all_ok}};
  if (per_document)
    doc["batch"] = {{"batching", spec.train.batching}, {"documents", batch.documents}, {"label_tokens", batch.label_tokens},
                    {"real_tokens", batch.real_tokens}};
  reports::write_json_atomic(out, doc);
  std::cout << doc.dump(2) << "\n";
  return all_ok ? kExitOk : kExitFailed;
}

}  // namespace

std::string default_python() {
  if (const char* p = std::getenv("ZEROBENCH_PYTHON"); p && *p) return p;
  if (const char* v = std::getenv("ZEROBENCH_VENV"); v && *v) return std::string(v) + "/bin/python";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/zerobench/venv/bin/python";
}

std::string crossval_scripts_dir() {
  if (const char* d = std::getenv("ZEROBENCH_CROSSVAL_DIR"); d && *d) return d;
  return std::string(source_dir()) + "/scripts/crossval";
}

void add_crossval_options(CLI::App& cmd, CrossvalOptions& o) {
  add_run_options(cmd, o.run);
  cmd.remove_option(cmd.get_option("--precision"));
  cmd.add_option("--precision", o.precisions,
                 "precision mode(s), comma-separated or repeated (" + precisions_help(/*crossval_only=*/true) + ")")
      ->delimiter(',');
  cmd.get_option("--out")->description(
      "crossval document (default out/crossval-<backend>-<model>.json, <backend> as --config picks it)");
  cmd.add_option("--python", o.python, "interpreter with torch (and deepspeed) for the reference (default: setup venv's)");
  cmd.add_option("--reference-launcher", o.reference_launcher,
                 "how the reference's ranks start: zerobench (default: zerobench's launcher gives each rank "
                 "torchrun's worker environment and hosts its TCPStore, as torchrun's agent does) or torchrun "
                 "(python -m torch.distributed.run --standalone; about 2.5 s more CPU per mode)")
      ->check(CLI::IsMember({"zerobench", "torchrun"}));
  cmd.add_option("--work-dir", o.work_dir, "where weights, batches and both sides' outputs go (default: <out>.work)");
  cmd.add_flag("--logits", o.logits, "check that the reference model's logits equal zerobench's (tests)")->group("");
  cmd.add_option("--table", o.table,
                 "print the Markdown summary table of the crossval documents (*.json) in this directory and of its "
                 "real-files.json, or of one real-files summary, run nothing (scripts/crossval-table.sh puts it into "
                 "README.md and docs/crossval.md)");
}

int crossval_command(CrossvalOptions o, const CLI::App& cmd) {
  auto& r = o.run;
  if (!o.table.empty()) {  // the README / docs table from committed crossval documents
    std::cout << reports::crossval_tables(o.table);
    return kExitOk;
  }
  mark_given(cmd, r);  // as `zerobench run` records them: the config resolution reads these
  if (o.python.empty()) o.python = default_python();
  if (r.emulate_world_size > 0) throw UsageError("crossval runs real ranks on both sides: --emulate-world-size is not supported");
  if (r.profile || !r.trace.empty()) throw UsageError("crossval does not profile: drop --profile/--trace");
  if (!r.fault_inject.empty()) throw UsageError("crossval does not take --fault-inject");
  if (o.logits && r.device != "cpu") throw UsageError("crossval --logits --device " + r.device + ": the logits check runs on cpu only");
  // Both sides on one device kind (zerobench's --device is forwarded; the runners get --device
  // and the backend that goes with it), refused here before anything is written or started.
  const bool wants_cuda = r.device == "cuda";
  const CrossvalDevice dev = resolve_crossval_device(
      r.device, o.logits ? 1 : r.world_size_hint(), runtime::cuda_built(),
      wants_cuda && runtime::cuda_available() ? runtime::device_count(at::Device(at::kCUDA, 0)) : 0);

  if (o.logits) {
    r.precision = "fp32";
    r.backend = backends::registered_backends().front().name;  // any: only the model and data flags matter here
    const std::string out = r.out.empty() ? "out/crossval-logits-" + r.model + ".json" : r.out;
    const std::string work = o.work_dir.empty() ? strip_json_suffix(out) + ".work" : o.work_dir;
    reports::make_directories(work);
    return logits_command(o, out, work);
  }

  // A short crossval measures every step but the first by default (run's --warmup default may exceed it).
  if (cmd.count("--warmup") == 0) r.train.warmup = std::max<int64_t>(0, std::min<int64_t>(r.train.warmup, r.train.steps - 1));
  // The backend and the default mode exactly as `zerobench run` resolves them (RunOptions::resolve:
  // --backend, or the one a --config / --accelerate-config / --deepspeed-config file picks).
  {
    RunOptions probe = r;
    if (o.precisions.empty()) {
      probe.precision_given = false;  // the config file's mode (accelerate mixed_precision, DeepSpeed bf16), else fp32
      probe.given.erase("--precision");
    } else {
      // Resolved as `run --precision MODE` resolves the file: a file value run ignores under
      // --precision (an unquoted `mixed_precision: no`) must not stop crossval either.
      probe.precision = o.precisions.front();
      probe.precision_given = true;
    }
    const auto base = probe.resolve();
    r.backend = base.backend;
    if (o.precisions.empty()) o.precisions = {base.spec.precision};
  }
  // The default name follows the backend just resolved (the one a --config file picks), as
  // `zerobench run`'s out/<backend>-... does.
  const std::string out = r.out.empty() ? "out/crossval-" + r.backend + "-" + r.model + ".json" : r.out;
  const std::string work = o.work_dir.empty() ? strip_json_suffix(out) + ".work" : o.work_dir;
  reports::make_directories(work);
  const backends::CrossvalReference* ref = nullptr;
  std::string with_reference;
  for (const auto& b : backends::registered_backends()) {
    if (!b.crossval) continue;
    if (b.name == r.backend) ref = &*b.crossval;
    with_reference += (with_reference.empty() ? "" : ", ") + b.name;
  }
  const auto [config_path, config_flag] = r.config_file();
  if (!ref) {
    const bool from_file = !config_path.empty() && !r.backend_given;
    backends::backend(r.backend);  // an unknown name: the registry's line
    throw UsageError("crossval: backend '" + r.backend + "'" +
                     (from_file ? " (picked by " + config_flag + " " + config_path + ")" : "") +
                     " has no reference framework (" + with_reference + ")");
  }
  for (const auto& p : o.precisions) backends::validate_precision(r.backend, p);
  checked_python(o.python);
  const std::string script = crossval_scripts_dir() + "/" + ref->script;
  if (!is_file(script)) throw UsageError("crossval: reference runner " + script + " not found (set ZEROBENCH_CROSSVAL_DIR)");

  const int world = r.world_size_hint();
  r.nproc = world;
  const int threads = r.threads > 0 ? r.threads
                                    : std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, world));
  const double timeout_s = r.timeout_s > 0 ? r.timeout_s : 1800;
  const double plant = r.plant_lr_scale;
  r.plant_lr_scale = 1.0;  // the reference's hyper-parameters never carry the plant

  // Every mode resolved before anything runs, each as `zerobench run <the same flags> --precision
  // MODE` resolves it (a file that refuses the mode exits 2 here, not after both sides trained),
  // and checked against what the real framework can run on this machine (refused, exit 2, or run
  // with documented substitutions).
  const std::string from = config_path.empty() ? "" : " (" + config_flag + " " + config_path + ")";
  std::vector<ModePlan> plans;
  for (const auto& precision : o.precisions) {
    ModePlan plan;
    plan.run = r;
    plan.run.precision = precision;
    plan.run.precision_given = true;  // zerobench's side is run with --precision MODE
    plan.run.given.insert("--precision");
    plan.resolved = plan.run.resolve();
    backends::ReferenceSetup setup;
    setup.reference_options = plan.resolved.spec.options.json();
    if (ref->reference_setup) ref->reference_setup(plan.resolved.spec, dev.kind, setup);
    if (!setup.refusal.empty()) throw UsageError("crossval" + from + ": " + setup.refusal);
    if (!setup.zerobench_flags.empty()) {  // the same substitution on zerobench's side: its flags, resolved again
      for (const auto& [name, value] : setup.zerobench_flags) {
        plan.run.backend_flags[name].text = value;
        plan.run.given.insert(name);
      }
      plan.zerobench_flags = setup.zerobench_flags;
      plan.resolved = plan.run.resolve();
    }
    plan.reference_options = setup.reference_options;
    plan.substitutions = setup.substitutions;
    plans.push_back(std::move(plan));
  }

  json modes = json::array();
  json upstream_id = json::object();
  std::vector<std::string> reasons;
  bool agree = true;
  for (auto& plan : plans) {
    const std::string& precision = plan.run.precision;
    const auto& resolved = plan.resolved;
    const auto& spec = resolved.spec;
    std::vector<std::string> warnings = resolved.provenance.notes.warnings, notes;
    const std::string dir = work + "/" + precision;
    reports::make_directories(dir + "/upstream");
    for (int k = 0; k < world; ++k) {
      unlink((dir + "/upstream/rank" + std::to_string(k) + ".json").c_str());
      unlink((dir + "/upstream/error_rank" + std::to_string(k) + ".txt").c_str());
    }
    unlink((dir + "/zerobench.json").c_str());

    json spec_json = {{"backend", r.backend},
                      {"precision", precision},
                      {"world_size", world},
                      {"threads", threads},
                      {"model", {{"layers", spec.model.layers}, {"hidden", spec.model.hidden}, {"heads", spec.model.heads},
                                 {"kv_heads", spec.model.kv_heads}, {"ffn", spec.model.ffn}, {"vocab", spec.model.vocab}}},
                      {"train", crossval_train_json(spec.train)},
                      {"options", plan.reference_options}};
    // Both sides see the same OpenMP environment (torchrun sets OMP_NUM_THREADS for its workers).
    std::vector<std::string> zb_argv = {"/usr/bin/env", "OMP_NUM_THREADS=" + std::to_string(threads),
                                        runtime::self_executable(), "run"};
    for (const auto& a : forwarded_run_flags(cmd, bool(ref->config_file), plan.zerobench_flags)) zb_argv.push_back(a);
    for (const auto& [name, value] : plan.zerobench_flags) zb_argv.insert(zb_argv.end(), {name, value});
    zb_argv.insert(zb_argv.end(), {"--nproc", std::to_string(world)});
    if (ref->config_file) {  // one framework config file both sides read (DeepSpeed's JSON)
      const std::string file_path = dir + "/" + ref->config_file_name;
      const auto file = ref->config_file(spec, world, user_config_file(resolved, ref->config_format), notes);
      reports::write_json_atomic(file_path, file);
      spec_json[ref->config_format + "_config"] = ref->config_file_name;
      zb_argv.insert(zb_argv.end(), {ref->config_flag, file_path});
      // zerobench's side reads the written file instead of the user's: it must resolve to the same run.
      check_same_run(plan.run, resolved, ref->config_flag, file_path);
    }
    write_weights(dir + "/weights", spec.model, spec.train.seed);
    write_batches(dir + "/batches.safetensors", spec, world);
    reports::write_json_atomic(dir + "/spec.json", spec_json);
    zb_argv.insert(zb_argv.end(), {"--precision", precision, "--out", dir + "/zerobench.json", "--quiet", "--threads",
                                   std::to_string(threads), "--warmup", std::to_string(r.train.warmup)});
    if (plant != 1.0) {
      std::ostringstream s;
      s.precision(17);
      s << plant;
      zb_argv.insert(zb_argv.end(), {"--plant-lr-scale", s.str()});
      notes.push_back("planted difference: zerobench's lr x " + s.str() + " (--plant-lr-scale)");
    }
    const std::string where = " on " + std::to_string(world) + " ranks (" + dev.kind + ", " + dev.dist_backend + ")";
    const auto zb = run_side(zb_argv, timeout_s, "zerobench " + r.backend + " " + precision + where);
    std::vector<std::string> py_argv = {"/usr/bin/env", "DS_ACCELERATOR=" + dev.ds_accelerator,
                                        "OMP_NUM_THREADS=" + std::to_string(threads), "PYTHONUNBUFFERED=1", o.python};
    const std::vector<std::string> script_argv = {script, "--work", dir, "--device", dev.kind};
    SideResult up;
    if (o.reference_launcher == "torchrun") {
      py_argv.insert(py_argv.end(), {"-m", "torch.distributed.run", "--standalone", "--nproc-per-node", std::to_string(world)});
      py_argv.insert(py_argv.end(), script_argv.begin(), script_argv.end());
      up = run_side(py_argv, timeout_s, ref->framework + " " + precision + where + " under torchrun",
                    dir + "/upstream.log", dir + "/upstream");
    } else {
      py_argv.insert(py_argv.end(), script_argv.begin(), script_argv.end());
      up = run_reference_ranks(py_argv, world, timeout_s, ref->framework + " " + precision + where, dir + "/upstream.log",
                               dir + "/upstream");
    }

    json section;
    if (zb.ok && up.ok) {
      std::vector<json> ranks;
      for (int k = 0; k < world; ++k) ranks.push_back(json::parse(read_text(dir + "/upstream/rank" + std::to_string(k) + ".json")));
      CrossvalContext ctx{r.backend, world, spec, dev.kind};
      section = compare_mode(ctx, reports::run_report_from_json(reports::read_report(dir + "/zerobench.json")), ranks);
      upstream_id = ranks.front()["upstream"];
      for (const auto& why : upstream_device_mismatches(dev, ranks)) {  // a reference that ran elsewhere
        section["verdict"]["agree"] = false;
        section["verdict"]["reasons"].push_back(why);
      }
    } else {
      section = {{"precision", precision},
                 {"status", {{"zerobench", zb.ok ? "ok" : "failed: " + zb.error},
                             {"upstream", up.ok ? "ok" : "failed: " + up.error}}},
                 {"verdict", {{"agree", false},
                              {"reasons", {std::string(zb.ok ? "" : "zerobench failed: " + zb.error) +
                                           (up.ok ? "" : std::string(zb.ok ? "" : "; ") + ref->framework +
                                                             " failed: " + up.error)}}}}};
    }
    section["work_dir"] = dir;
    section["wall_s"] = {{"zerobench", zb.wall_s}, {"upstream", up.wall_s}};
    section["warnings"] = warnings;
    section["notes"] = notes;
    section["substitutions"] = plan.substitutions;
    if (!section["verdict"]["agree"].get<bool>()) {
      agree = false;
      for (const auto& why : section["verdict"]["reasons"]) reasons.push_back(precision + ": " + why.get<std::string>());
    }
    modes.push_back(section);
  }
  if (upstream_id.empty()) upstream_id = {{"name", ref->framework}, {"version", "unknown (the reference did not finish)"}};
  const auto cfg = r.model_config();
  json doc = {{"schema", {{"name", "zerobench.crossval"}, {"version", 1}}},
              {"backend", r.backend},
              {"upstream", upstream_id},
              {"world_size", world},
              {"device", {{"kind", dev.kind}, {"dist_backend", dev.dist_backend}}},
              {"reference_launcher", o.reference_launcher},
              {"model", {{"preset", cfg.preset}, {"layers", cfg.layers}, {"hidden", cfg.hidden}, {"heads", cfg.heads},
                         {"kv_heads", cfg.kv_heads}, {"ffn", cfg.ffn}, {"vocab", cfg.vocab}}},
              // The first mode's resolved training settings (every mode resolves the same ones: the
              // precision changes no training setting).
              {"train", crossval_train_json(plans.front().resolved.spec.train)},
              {"threads_per_rank", threads},
              {"modes", modes},
              {"verdict", {{"agree", agree}, {"reasons", reasons}}}};
  if (!config_path.empty()) doc["config_file"] = {{"flag", config_flag}, {"path", config_path}, {"sha256", file_sha256(config_path)}};
  reports::write_json_atomic(out, doc);
  const std::string stem = strip_json_suffix(out);
  reports::write_text_atomic(stem + ".md", reports::render_crossval(doc, "md"));
  reports::write_text_atomic(stem + ".html", reports::render_crossval(doc, "html"));
  if (!r.quiet) std::cout << reports::render_crossval(doc, "md");
  for (const auto& why : reasons) std::cerr << "crossval: disagreement: " << why << "\n";
  std::cerr << "crossval: " << (agree ? "agree" : "DISAGREE") << " — " << out << " (+ .md, .html)\n";
  return agree ? kExitOk : kExitFailed;
}

}  // namespace zb::bench
