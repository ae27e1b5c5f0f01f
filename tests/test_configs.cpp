// Config files as users feed them: the real-file corpus (tests/configs/real/README.md) run end to
// end; the DeepSpeed and accelerate readers key by key (aliases, "auto", refusals); reports that
// say what they ran from; runs that diverge or are killed; numeric flags; the memory pre-flight.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "backends/common/optim.hpp"
#include "backends/ddp/ddp_config.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "backends/zero0/zero0_config.hpp"
#include "backends/zero12/zero12_options.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "backends/memory_estimate.hpp"
#include "bench/run/config_resolve.hpp"
#include "bench/run/run_options.hpp"
#include "models/activation_memory.hpp"
#include "reports/regress.hpp"
#include "reports/report.hpp"
#include "reports/table.hpp"
#include "runtime/errors.hpp"
#include "tests/resolve_run.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using nlohmann::json;
using test_support::run_zerobench;
using test_support::temp_path;

namespace {
const std::string kSource = zb::bench::source_dir();
const std::string kCorpus = kSource + "/tests/configs/real/";

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

std::string write_file(const std::string& name, const std::string& text) {
  const auto path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

// The run as `zerobench run FLAGS` would resolve it (no process started).
bench::RunOptions::Resolved resolve(const std::vector<std::string>& flags) { return test_support::resolve_run(flags); }

std::string usage_error(const std::vector<std::string>& flags) {
  try {
    resolve(flags);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

bool listed(const json& report, const std::string& key) {
  for (const char* section : {"applied", "ignored"})
    for (const auto& e : report["config"][section]) {
      const std::string k = e["key"];
      if (k == key || k.rfind(key + ".", 0) == 0) return true;
    }
  return false;
}

// One row of tests/configs/real/README.md.
struct CorpusFile {
  std::string file, outcome;
};

void PrintTo(const CorpusFile& c, std::ostream* os) { *os << c.file << " (" << c.outcome << ")"; }

std::vector<CorpusFile> corpus() {
  std::vector<CorpusFile> out;
  std::ifstream in(kCorpus + "README.md");
  std::string line;
  const std::regex row(R"(^\| ([^ |]+) \| [^|]+ \| [^|]+ \| [0-9a-f]{40} \| ([^|]+) \|$)");
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_match(line, m, row)) out.push_back({m[1], std::regex_replace(std::string(m[2]), std::regex(" +$"), "")});
  return out;
}
}  // namespace

// ---- The corpus -----------------------------------------------------------------------------

class RealConfig : public ::testing::TestWithParam<CorpusFile> {};

TEST_P(RealConfig, RunsWithEveryKeyAccountedForOrExits2NamingTheKey) {
  const auto& c = GetParam();
  const std::string path = kCorpus + c.file;
  const auto out = temp_path("corpus_" + c.file + ".json");
  std::remove(out.c_str());
  const auto r = run_zerobench("run --config " + path +
                               " --model tiny --nproc 2 --steps 2 --warmup 1 --seq-len 32 --threads 1 --quiet --out " +
                               out);
  if (c.outcome != "runs") {
    ASSERT_EQ(c.outcome.rfind("exit 2: ", 0), 0u) << c.outcome;
    const std::string key = c.outcome.substr(8);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find(key), std::string::npos) << "the refusal must name " << key << ": " << r.output;
    EXPECT_NE(r.output.find(c.file), std::string::npos) << "and the file: " << r.output;
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = reports::read_report(out);
  EXPECT_EQ(report["status"]["state"], "ok");
  ASSERT_EQ(report["config"]["source_files"].size(), 1u);
  EXPECT_EQ(report["config"]["source_files"][0]["path"], path);
  EXPECT_EQ(report["config"]["source_files"][0]["sha256"], bench::file_sha256(path));
  // Every key of the file is honoured (config.applied) or ignored with a reason (config.ignored).
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  json root;
  // DeepSpeed JSON whatever the name (open-instruct ships its configs as .conf): an object.
  const auto first = text.str().find_first_not_of(" \t\r\n");
  const bool is_json = first != std::string::npos && text.str()[first] == '{';
  if (is_json) {
    root = json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
  } else {
    // Top-level keys and the keys of the framework block, read from the YAML's own lines.
    std::string l, block;
    while (std::getline(text, l)) {
      std::smatch m;
      if (std::regex_match(l, m, std::regex(R"(^([A-Za-z_0-9]+):.*$)"))) {
        block = m[1];
        root[block] = json::object();
      } else if (std::regex_match(l, m, std::regex(R"(^  ([A-Za-z_0-9]+):.*$)")) && !block.empty()) {
        root[block][m[1].str()] = true;
      }
    }
  }
  // A file that asks for CPU offload (issue 23) runs with it: visible in the resolved options, the
  // memory split by location and the traffic.
  const bool asks_offload =
      std::regex_search(text.str(), std::regex(R"(fsdp_offload_params:\s*true|offload_(optimizer|param)_device:\s*cpu)")) ||
      std::regex_search(text.str(), std::regex(R"re("offload_(optimizer|param)"\s*:\s*\{[^}]*"device"\s*:\s*"cpu")re"));
  if (asks_offload) {
    EXPECT_NE(report["config"]["backend"]["options"].dump().find("offload"), std::string::npos)
        << c.file << ": offload not in the resolved options";
    for (const auto& rk : report["ranks"]) {
      EXPECT_TRUE(rk["offload"].is_object()) << c.file << ": no offload section";
      EXPECT_TRUE(rk["memory"]["model_states_bytes"].contains("host")) << c.file << ": no host bytes";
    }
  }
  // A DeepSpeed file of ZeRO stage 1 or 2 (issue 24) runs as zero1/zero2, with the stage, the
  // buckets and the overlap in the resolved options.
  std::smatch stage;
  const std::string body = text.str();
  if (std::regex_search(body, stage, std::regex(R"re("stage"\s*:\s*([12])\b|zero_stage:\s*([12])\b)re"))) {
    const std::string n = stage[1].matched ? stage[1].str() : stage[2].str();
    EXPECT_EQ(report["config"]["backend"]["name"], "zero" + n) << c.file;
    const auto& o = report["config"]["backend"]["options"];
    EXPECT_EQ(o.value("stage", -1), std::stoi(n)) << c.file;
    for (const char* k : {"reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "contiguous_gradients",
                          "reduce_scatter", "round_robin_gradients"})
      EXPECT_TRUE(o.contains(k)) << c.file << ": " << k << " not in the resolved options";
  }
  for (const auto& [k, v] : root.items()) {
    if (v.is_object() && !v.empty() && (k == "fsdp_config" || k == "deepspeed_config" || k == "zero_optimization" ||
                                        k == "bf16" || k == "fp16")) {
      for (const auto& [child, cv] : v.items())
        EXPECT_TRUE(listed(report, k + "." + child)) << c.file << ": " << k << "." << child << " not accounted for";
    } else {
      EXPECT_TRUE(listed(report, k)) << c.file << ": " << k << " not accounted for";
    }
  }
  std::remove(out.c_str());
}

namespace {
// Anything offloaded in a backend's options: a key naming offload whose value (or a value below
// it) is cpu, nvme or true.
bool offloads(const json& j, bool under_offload = false) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if (offloads(v, under_offload || k.find("offload") != std::string::npos)) return true;
    return false;
  }
  return under_offload && (j == true || j == "cpu" || j == "nvme");
}

// What kind of run a corpus file that runs is, as `zerobench run` resolves it under RealConfig's
// flags (no process started): backend, precision, offload or not, accelerate YAML or DeepSpeed JSON.
std::string run_kind(const CorpusFile& c) {
  std::ifstream in(kCorpus + c.file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto first = text.find_first_not_of(" \t\r\n");
  const bool is_json = first != std::string::npos && text[first] == '{';
  try {
    const auto r = resolve({"--config", kCorpus + c.file, "--model", "tiny", "--nproc", "2", "--steps", "2", "--warmup",
                            "1", "--seq-len", "32", "--threads", "1"});
    return r.backend + " " + r.spec.precision + (offloads(r.spec.options.json()) ? " offload" : "") +
           (is_json ? " json" : " yaml");
  } catch (const std::exception&) {
    return c.file;  // does not resolve in-process: a kind of its own (RealConfig says why)
  }
}

// CI runs every refusal (each exits at resolution, about a second) and, of the files that run, the
// first of each kind in the README's order; the full tier (tests/full_tier.txt) runs the others.
// Each file that runs is resolved once, here (its kind kept for
// RealConfigCorpus.TheCiFilesCoverEveryKind, which checks the split).
struct CorpusSplit {
  std::vector<CorpusFile> ci, rest;
  std::map<std::string, std::string> kind;  // file -> run_kind, for the files that run
};
const CorpusSplit& corpus_split() {
  static const auto split = [] {
    CorpusSplit out;
    std::set<std::string> kinds;
    for (const auto& c : corpus()) {
      bool first_of_kind = true;
      if (c.outcome == "runs") first_of_kind = kinds.insert(out.kind[c.file] = run_kind(c)).second;
      (first_of_kind ? out.ci : out.rest).push_back(c);
    }
    return out;
  }();
  return split;
}

std::string corpus_test_name(const ::testing::TestParamInfo<CorpusFile>& info) {
  std::string n = info.param.file;
  for (auto& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Corpus, RealConfig, ::testing::ValuesIn(corpus_split().ci), corpus_test_name);
INSTANTIATE_TEST_SUITE_P(CorpusRest, RealConfig, ::testing::ValuesIn(corpus_split().rest), corpus_test_name);

TEST(RealConfigCorpus, TheCiFilesCoverEveryKind) {
  const auto& split = corpus_split();
  EXPECT_EQ(split.ci.size() + split.rest.size(), corpus().size());
  std::set<std::string> ci_kinds, backends;
  int refusals = 0;
  for (const auto& c : split.ci) {
    if (c.outcome != "runs") {
      ++refusals;
      continue;
    }
    const auto& k = split.kind.at(c.file);
    EXPECT_TRUE(ci_kinds.insert(k).second) << c.file << ": a second CI file of kind " << k;
    backends.insert(k.substr(0, k.find(' ')));
  }
  for (const auto& c : split.rest) {
    EXPECT_EQ(c.outcome, "runs") << c.file << ": every refusal runs in CI";
    const auto& k = split.kind.at(c.file);
    EXPECT_EQ(ci_kinds.count(k), 1u) << c.file << ": its kind " << k << " has no CI file";
  }
  // Every refusal, and every backend a real file picks, in CI.
  EXPECT_GE(refusals, 25);
  for (const char* b : {"ddp", "fsdp", "fsdp2", "zero0", "zero1", "zero2", "zero3"}) EXPECT_EQ(backends.count(b), 1u) << b;
  EXPECT_GE(split.rest.size(), 30u) << "most files that run are of a kind already in CI";
}

TEST(RealConfigCorpus, HasAtLeastTwelveFilesFromSeveralRepositories) {
  const auto files = corpus();
  EXPECT_GE(files.size(), 12u);
  int runs = 0;
  for (const auto& f : files) {
    struct stat st {};
    EXPECT_EQ(stat((kCorpus + f.file).c_str(), &st), 0) << f.file << " is listed but missing";
    runs += f.outcome == "runs";
  }
  EXPECT_GE(runs, 8);
}

// Every leaf of every DeepSpeed JSON of the corpus that resolves (with the warm-up flag the "auto"
// warm-up refusal names) is accounted for in the notes the report carries: the leaf itself, a
// section above it applied or ignored whole, or keys below it. RealConfig checks the YAML files'
// keys and only the sections it names; this one reads every leaf, without starting a run. It caught
// `scheduler.type`, honoured (the LR schedule) yet listed nowhere (2026-11-28 trial).
TEST(RealConfigCorpus, EveryLeafOfEveryDeepSpeedJsonIsAppliedOrIgnored) {
  int checked = 0, leaves = 0;
  for (const auto& c : corpus()) {
    std::ifstream in(kCorpus + c.file);
    std::stringstream text;
    text << in.rdbuf();
    const auto first = text.str().find_first_not_of(" \t\r\n");
    if (first == std::string::npos || text.str()[first] != '{') continue;  // accelerate YAML
    bench::RunOptions::Resolved r;
    try {
      r = resolve({"--config", kCorpus + c.file, "--model", "tiny", "--nproc", "2"});
    } catch (const UsageError& e) {
      if (std::string(e.what()).find("--lr-warmup-steps N") == std::string::npos) continue;  // refused: RealConfig
      r = resolve({"--config", kCorpus + c.file, "--model", "tiny", "--nproc", "2", "--lr-warmup-steps", "2"});
    }
    std::vector<std::string> keys;
    for (const auto* section : {&r.provenance.notes.applied, &r.provenance.notes.ignored})
      for (const auto& k : *section) keys.push_back(k.key);
    const auto accounted = [&](const std::string& leaf) {
      for (const auto& k : keys)
        if (k == leaf || k.rfind(leaf + ".", 0) == 0 || leaf.rfind(k + ".", 0) == 0) return true;
      return false;
    };
    const json root = json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
    std::vector<std::pair<std::string, const json*>> todo;
    for (const auto& [k, v] : root.items()) todo.push_back({k, &v});
    while (!todo.empty()) {
      const auto [path, v] = todo.back();
      todo.pop_back();
      if (v->is_object() && !v->empty()) {
        for (const auto& [k, child] : v->items()) todo.push_back({path + "." + k, &child});
        continue;
      }
      ++leaves;
      EXPECT_TRUE(accounted(path)) << c.file << ": " << path << " is neither applied nor ignored";
    }
    ++checked;
  }
  EXPECT_GE(checked, 30) << "the corpus's DeepSpeed files that resolve";
  EXPECT_GE(leaves, 500);
}

// ---- DeepSpeed JSON, key by key -------------------------------------------------------------

TEST(DeepSpeedConfig, AliasesAutoAndSubGroupZeroResolveAsDeepSpeedAndTransformers) {
  // axolotl's zero3.json: unprefixed aliases switch prefetch and reuse off; "auto" buckets from hidden.
  const auto r = resolve({"--config", kCorpus + "axolotl_zero3.json", "--model", "tiny"});
  EXPECT_EQ(r.backend, "zero3");
  const auto& o = r.spec.options;
  EXPECT_EQ(o["stage3_max_live_parameters"], 0);
  EXPECT_EQ(o["stage3_max_reuse_distance"], 0);
  EXPECT_EQ(o["sub_group_size"], 0);
  EXPECT_EQ(o["reduce_bucket_size"], 128 * 128);
  EXPECT_EQ(o["stage3_prefetch_bucket_size"], int64_t(0.9 * 128 * 128));
  EXPECT_EQ(o["stage3_param_persistence_threshold"], 1280);
  // bf16/fp16 "auto" follow --precision (HF's args.bf16 / args.fp16), fp32 when not given.
  EXPECT_EQ(r.spec.precision, "fp32");
  EXPECT_EQ(resolve({"--config", kCorpus + "axolotl_zero3.json", "--precision", "bf16"}).spec.precision, "bf16");
  // gradient_clipping "auto" is --grad-clip; the batch "auto"s are the flags'.
  const auto r2 = resolve({"--config", kCorpus + "axolotl_zero3.json", "--grad-clip", "0.5", "--micro-batch", "3"});
  EXPECT_EQ(r2.spec.train.grad_clip, 0.5);
  EXPECT_EQ(r2.spec.train.micro_batch, 3);
  // The old "bfloat16" section is DeepSpeed's alias of "bf16".
  const auto p = write_file("bfloat16.json", R"({"bfloat16": {"enabled": true}, "train_micro_batch_size_per_gpu": 2,
      "zero_optimization": {"stage": 3, "prefetch_bucket_size": 1000, "stage3_max_live_parameters": "2e3"}})");
  EXPECT_NE(usage_error({"--config", p}).find("stage3_max_live_parameters \"2e3\" is not an integer"), std::string::npos);
  std::ofstream(p) << R"({"bfloat16": {"enabled": true}, "train_micro_batch_size_per_gpu": 2,
      "zero_optimization": {"stage": 3, "prefetch_bucket_size": 1000, "stage3_max_live_parameters": 2e3}})";
  const auto r3 = resolve({"--config", p});
  EXPECT_EQ(r3.spec.precision, "bf16");
  EXPECT_EQ(r3.spec.options["stage3_prefetch_bucket_size"], 1000);
  EXPECT_EQ(r3.spec.options["stage3_max_live_parameters"], 2000);
  EXPECT_EQ(r3.spec.train.micro_batch, 2);
  EXPECT_EQ(r3.spec.train.grad_clip, 0.0) << "no gradient_clipping: DeepSpeed's default 0 (off)";
  // Given a --precision, HF's Trainer runs what accelerate's set_mixed_precision makes of the file:
  // it adds {"bf16": {"enabled": <bf16>}} when the file has no "bf16" section, which DeepSpeed reads
  // before the old "bfloat16" name (both were refused as mismatches; no section + bf16 as "DeepSpeed
  // would train in fp32").
  EXPECT_EQ(resolve({"--config", p, "--precision", "fp32"}).spec.precision, "fp32");
  std::ofstream(p, std::ios::trunc) << R"({"bfloat16": {"enabled": false}, "train_micro_batch_size_per_gpu": 2})";
  EXPECT_EQ(resolve({"--config", p, "--precision", "bf16"}).spec.precision, "bf16");
  EXPECT_EQ(resolve({"--config", p}).spec.precision, "fp32") << "no flag: the file's own section decides";
  std::ofstream(p, std::ios::trunc) << R"({"train_micro_batch_size_per_gpu": 2})";
  EXPECT_EQ(resolve({"--config", p, "--precision", "bf16"}).spec.precision, "bf16");
  EXPECT_EQ(resolve({"--config", p}).spec.precision, "fp32");
  std::remove(p.c_str());
}

TEST(DeepSpeedConfig, RefusesWhatZeroBenchDoesNotImplementNamingTheKey) {
  const auto p = temp_path("refuse.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "stage3_module_granularity_threshold": 100000000}})",
       "zero_optimization.stage3_module_granularity_threshold 100000000"},
      {R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket": 5}})",
       "zero_optimization.stage3_prefetch_bucket: not a DeepSpeed ZeRO setting"},
      {R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
       "zero_optimization.offload_param.device nvme"},
      {R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true, "bogus": 1}, "zero_optimization": {"stage": 3}})",
       "fp16.bogus: unknown fp16 setting"},
      // ZeRO stage 0 (zero0) refuses what DeepSpeed itself raises on, naming the key.
      {R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"},
          "zero_optimization": {"stage": 0}})",
       "data_types.grad_accum_dtype fp32 with precision bf16 at ZeRO stage 0: DeepSpeed refuses it"},
      {R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})",
       "zero_optimization.offload_optimizer.device cpu with ZeRO stage 0"},
      {R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "optimizer": {"type": "AdamW"},
          "zero_optimization": {"stage": 0}})", "FP16_Optimizer"},
      {R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0, "reduce_bucket_size": "x"}})",
       "zero_optimization.reduce_bucket_size \"x\" is not an integer"},
      {R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})",
       "zero_optimization.offload_optimizer.device nvme"},
      {R"({"train_micro_batch_size_per_gpu": 1, "amp": {"enabled": false}, "zero_optimization": {"stage": 3}})",
       "amp: removed from DeepSpeed 0.19.8"},
      {R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "stage": 3}})", "\"stage\" appears twice"},
      {R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "max_live_parameters": 1,
          "stage3_max_live_parameters": 2}})", "the same DeepSpeed setting given twice"},
      {R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "reduce_scatter": false}})",
       "zero_optimization.reduce_scatter false"},
      {R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Lamb"}, "zero_optimization": {"stage": 3}})",
       "optimizer.type Lamb"},
      {R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "OneCycle"}, "zero_optimization": {"stage": 3}})",
       "scheduler.params is missing: DeepSpeed calls OneCycle(optimizer, **None)"},
      {R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "CosineLR", "params": {}},
          "zero_optimization": {"stage": 3}})", "scheduler.type CosineLR: DeepSpeed does not recognize LR scheduler"},
      {R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
          "zero_optimization": {"stage": 3}})", "train_batch_size 10 != train_micro_batch_size_per_gpu 4"},
      {R"({"zero_optimization": {"stage": 3}})", "train_micro_batch_size_per_gpu are both missing"},
  };
  for (const auto& [text, expected] : cases) {
    std::ofstream(p) << text;
    const auto r = run_zerobench("run --config " + p + " --nproc 2 --model tiny --steps 2 --warmup 1");
    EXPECT_EQ(r.exit_code, 2) << text << "\n" << r.output;
    EXPECT_EQ(lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << "expected '" << expected << "' in: " << r.output;
  }
  std::remove(p.c_str());
}

// ZeRO stage 0 selects zero0 in every form DeepSpeed reads as stage 0 (stage 0, the section or
// its stage absent, "auto" dropped to the default, the deprecated boolean false) and from an
// accelerate DEEPSPEED file (zero_stage 0, or a deepspeed_config_file of stage 0); --backend zero0
// beside it agrees, zero2 is refused naming zero0. The stage 1-3 keys
// DeepSpeed does not read at stage 0 are ignored with that reason.
TEST(DeepSpeedConfig, StageZeroInEveryFormSelectsZero0) {
  const std::vector<std::string> forms = {
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}})",
      R"({"train_micro_batch_size_per_gpu": 1})",
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": "auto"}})",
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"overlap_comm": true}})",
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": false})"};
  int n = 0;
  for (const auto& body : forms) {
    SCOPED_TRACE(body);
    const auto p = write_file("stage0_" + std::to_string(n++) + ".json", body);
    const auto r = resolve({"--config", p});
    EXPECT_EQ(r.backend, "zero0");
    EXPECT_EQ(r.spec.options["stage"], 0);
    EXPECT_EQ(resolve({"--config", p, "--backend", "zero0"}).backend, "zero0");
  }
  const auto ds = write_file("stage0_for_accelerate.json", forms[0]);
  for (const std::string& yaml : std::vector<std::string>{"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 0\n",
                                 "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: " + ds + "\n"}) {
    SCOPED_TRACE(yaml);
    EXPECT_EQ(resolve({"--config", write_file("stage0.yaml", yaml)}).backend, "zero0");
  }
  const auto real = kCorpus + "llamafactory_ds_z0_config.json";
  const auto r = resolve({"--config", real, "--precision", "bf16"});
  EXPECT_EQ(r.backend, "zero0");
  EXPECT_EQ(r.spec.precision, "bf16");
  bool bucket_ignored = false;
  for (const auto& k : r.provenance.notes.ignored)
    if (k.key == "zero_optimization.reduce_bucket_size") bucket_ignored = k.note.find("ZeRO stage 0") != std::string::npos;
  EXPECT_TRUE(bucket_ignored) << "reduce_bucket_size is not read at stage 0";
  for (const auto& k : r.provenance.notes.applied) EXPECT_NE(k.key, "zero_optimization.overlap_comm");
  // zero2 does not claim a stage-0 file: refused naming zero0; zero3 claims every DeepSpeed file
  // (its catch-all), so the file's stage decides, as for stage 1 and 2 files.
  EXPECT_NE(usage_error({"--config", real, "--backend", "zero2"}).find("which configures zero0"), std::string::npos);
  EXPECT_EQ(resolve({"--config", real, "--backend", "zero3"}).backend, "zero0");
  // The client torch AdamW under offload_optimizer (zero_force_ds_cpu_optimizer false): DeepSpeed
  // steps it on the parameters; the section is ignored with the reason.
  const auto off = write_file("stage0_offload.json", R"({"train_micro_batch_size_per_gpu": 1, "zero_force_ds_cpu_optimizer": false,
      "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})");
  const auto ro = resolve({"--config", off});
  EXPECT_EQ(ro.backend, "zero0");
  bool offload_ignored = false;
  for (const auto& k : ro.provenance.notes.ignored)
    offload_ignored = offload_ignored || k.key.rfind("zero_optimization.offload_optimizer", 0) == 0;
  EXPECT_TRUE(offload_ignored);
}

// A top-level "fp8" section (LLaVA-NeXT's scripts/zero3_h100_optimized.json): DeepSpeed 0.19.8's
// DeepSpeedConfig reads no fp8 key, so DeepSpeed ignores the block and trains in the bf16/fp16
// sections' precision. zerobench runs the file the same way, the block ignored with the reason and a
// warning that the run is not fp8 (it was refused as "fp8: not implemented in zerobench").
TEST(DeepSpeedConfig, AnFp8SectionIsIgnoredAsDeepSpeedIgnoresIt) {
  const auto r = resolve({"--config", kCorpus + "llava-next_zero3_h100_optimized.json", "--precision", "bf16"});
  EXPECT_EQ(r.backend, "zero3");
  EXPECT_EQ(r.spec.precision, "bf16");
  const auto& notes = r.provenance.notes;
  const auto fp8 = std::find_if(notes.ignored.begin(), notes.ignored.end(), [](const auto& k) { return k.key == "fp8"; });
  ASSERT_NE(fp8, notes.ignored.end());
  EXPECT_NE(fp8->note.find("DeepSpeedConfig reads no fp8 key"), std::string::npos) << fp8->note;
  EXPECT_TRUE(std::any_of(notes.warnings.begin(), notes.warnings.end(),
                          [](const std::string& w) { return w.find("this run is not fp8") != std::string::npos; }));
  // Other sections beside it keep their own verdicts: msamp (MS-AMP's fork of DeepSpeed) stays refused.
  const auto msamp = write_file("msamp.json", R"({"train_micro_batch_size_per_gpu": 1, "msamp": {"enabled": true},
      "zero_optimization": {"stage": 2}})");
  EXPECT_NE(usage_error({"--config", msamp}).find("msamp"), std::string::npos);
}

TEST(DeepSpeedConfig, ExplicitValuesThatContradictAGivenFlagAreRefusedAsTransformersDoes) {
  const auto p = write_file("mismatch.json", R"({"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 0.3,
      "zero_optimization": {"stage": 3}})");
  EXPECT_NE(usage_error({"--config", p, "--micro-batch", "4"}).find("train_micro_batch_size_per_gpu 8 in the file but "
                                                                    "--micro-batch 4"),
            std::string::npos);
  EXPECT_NE(usage_error({"--config", p, "--grad-clip", "1"}).find("gradient_clipping 0.3"), std::string::npos);
  const auto r = resolve({"--config", p});  // without the flags the file's values stand
  EXPECT_EQ(r.spec.train.micro_batch, 8);
  EXPECT_EQ(r.spec.train.grad_clip, 0.3);
  // train_batch_size with gradient accumulation derived from the world size (DeepSpeed's rule).
  std::ofstream(p) << R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 3}})";
  EXPECT_EQ(resolve({"--config", p, "--nproc", "2"}).spec.train.grad_accum, 4);
  EXPECT_NE(usage_error({"--config", p, "--nproc", "5"}).find("train_batch_size 24 != "), std::string::npos);
  std::remove(p.c_str());
}

TEST(DeepSpeedConfig, OptimizerAndSchedulerMapAsDeepSpeedBuildsThem) {
  const auto p = write_file("opt.json", R"({"train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 2e-4, "betas": [0.8, 0.95], "eps": 1e-6, "torch_adam": true}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": "auto",
                    "warmup_num_steps": 4, "total_num_steps": 10, "warmup_type": "linear"}},
      "zero_optimization": {"stage": 3}})");
  const auto t = resolve({"--config", p, "--lr", "2e-4"}).spec.train;
  EXPECT_EQ(t.beta1, 0.8);
  EXPECT_EQ(t.beta2, 0.95);
  EXPECT_EQ(t.eps, 1e-6);
  EXPECT_EQ(t.weight_decay, 1e-2) << "torch.optim.AdamW's default weight decay (torch_adam)";
  EXPECT_EQ(t.lr_schedule, "WarmupDecayLR");
  // runtime/lr_schedules.py: step k runs with the value at last_batch_iteration k-1.
  EXPECT_EQ(backends::common::lr_at(t, 0), 0.0);
  EXPECT_EQ(backends::common::lr_at(t, 1), 0.0);           // it 0: 0/4
  EXPECT_DOUBLE_EQ(backends::common::lr_at(t, 3), 1e-4);   // it 2: 2/4 of 2e-4
  EXPECT_DOUBLE_EQ(backends::common::lr_at(t, 5), 2e-4 * 6.0 / 6.0);  // it 4: decay (10-4)/(10-4)
  EXPECT_DOUBLE_EQ(backends::common::lr_at(t, 8), 2e-4 * 3.0 / 6.0);  // it 7: (10-7)/6
  EXPECT_NE(usage_error({"--config", p, "--lr", "1e-3"}).find("optimizer.params.lr 0.0002 in the file but --lr 0.001"),
            std::string::npos)
      << usage_error({"--config", p, "--lr", "1e-3"});
  // Adam with L2 decay (adam_w_mode false) is not AdamW.
  std::ofstream(p) << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3},
      "optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.1}}})";
  EXPECT_NE(usage_error({"--config", p}).find("adam_w_mode false with weight_decay 0.1"), std::string::npos);
  std::remove(p.c_str());
}

TEST(DeepSpeedConfig, SubGroupSizeZeroTrainsWithOneSubGroupPerParameter) {
  // _create_fp16_sub_groups with sub_group_size 0: every parameter closes its sub-group.
  const auto out = temp_path("subgroup0.json");
  const auto r = run_zerobench("run --config " + kCorpus + "axolotl_zero3_bf16.json --nproc 2 --model tiny --steps 3 "
                               "--warmup 1 --seq-len 32 --quiet --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = reports::read_report(out);
  const auto m = models::preset("tiny");
  EXPECT_EQ(report["config"]["backend"]["options"]["sub_group_size"], 0);
  EXPECT_EQ(report["config"]["backend"]["options"]["sub_groups"], 3 + 9 * m.layers);
  EXPECT_EQ(report["config"]["backend"]["options"]["stage3_max_live_parameters"], 0);
  EXPECT_EQ(report["config"]["backend"]["precision"], "bf16");
  for (const auto& s : report["steps"]) EXPECT_TRUE(s["loss"].is_number()) << s.dump();
  std::remove(out.c_str());
}

// ---- accelerate configs ---------------------------------------------------------------------

// OpenRLHF's ddpo_ds_config.json: CPU offload of both states and an "aio" section. aio configures
// NVMe swapping only, so it is ignored — and its reason must not claim offload is off.
TEST(DeepSpeedConfig, AioUnderCpuOffloadIsIgnoredAsNvmeOnly) {
  const auto r = resolve({"--config", kCorpus + "openrlhf_ddpo_ds_config.json", "--model", "tiny"});
  EXPECT_EQ(r.spec.options["offload_optimizer"]["device"], "cpu") << r.spec.options.dump();
  EXPECT_EQ(r.spec.options["offload_param"]["device"], "cpu") << r.spec.options.dump();
  int seen = 0;
  for (const auto& k : r.provenance.notes.ignored)
    if (k.key == "aio") {
      ++seen;
      EXPECT_NE(k.note.find("nothing is offloaded to NVMe"), std::string::npos) << k.note;
      EXPECT_EQ(k.note.find("offload is off"), std::string::npos) << k.note;
    }
  EXPECT_EQ(seen, 1);
}

TEST(AccelerateConfig, PicksTheBackendAndRefusesAConflictingFlag) {
  EXPECT_EQ(resolve({"--config", kCorpus + "trl_fsdp1.yaml"}).backend, "fsdp");
  EXPECT_EQ(resolve({"--config", kCorpus + "trl_zero3.yaml"}).backend, "zero3");
  EXPECT_EQ(resolve({"--config", kCorpus + "alignment-handbook_ddp.yaml"}).backend, "ddp");
  EXPECT_EQ(resolve({"--accelerate-config", kCorpus + "trl_fsdp1.yaml"}).backend, "fsdp");
  EXPECT_NE(usage_error({"--config", kCorpus + "trl_fsdp1.yaml", "--backend", "zero3"})
                .find("--backend zero3 conflicts with the file, which configures fsdp"),
            std::string::npos);
  EXPECT_NE(usage_error({"--deepspeed-config", kCorpus + "trl_zero3.yaml"}).find("not a DeepSpeed JSON"), std::string::npos);
  // fsdp_version 2 is the fsdp2 backend, read by its own reader; --backend fsdp (FSDP) agrees with it.
  const auto v2 = resolve({"--config", kCorpus + "trl_fsdp2.yaml"});
  EXPECT_EQ(v2.backend, "fsdp2");
  EXPECT_EQ(v2.spec.precision, "mixed");
  EXPECT_EQ(v2.spec.options["reshard_after_forward"], true) << v2.spec.options.dump();
  EXPECT_EQ(resolve({"--config", kCorpus + "trl_fsdp2.yaml", "--backend", "fsdp"}).backend, "fsdp2");
  EXPECT_NE(usage_error({"--config", kCorpus + "trl_fsdp2.yaml", "--backend", "zero3"})
                .find("--backend zero3 conflicts with the file, which configures fsdp2"),
            std::string::npos);
  EXPECT_NE(usage_error({"--config", kCorpus + "trl_fsdp1.yaml", "--backend", "fsdp2"})
                .find("--backend fsdp2 conflicts with the file, which configures fsdp"),
            std::string::npos);
  // num_processes is the world size unless --nproc says otherwise.
  CLI::App app;
  bench::RunOptions o;
  bench::add_run_options(app, o);
  o.config = kCorpus + "trl_fsdp1.yaml";
  EXPECT_EQ(o.world_size_hint(), 8);
}

TEST(AccelerateConfig, FsdpBlockFollowsAccelerate115) {
  // accelerate's mixed_precision bf16 is FSDP "mixed"; fsdp_reshard_after_forward FULL_SHARD agrees
  // with the sharding strategy accelerate uses; prefetch and sync flags honoured.
  const auto r = resolve({"--config", kCorpus + "trl_fsdp1.yaml"});
  EXPECT_EQ(r.spec.precision, "mixed");
  EXPECT_EQ(r.spec.options["sharding_strategy"], "FULL_SHARD");
  EXPECT_EQ(r.spec.options["forward_prefetch"], true);
  EXPECT_EQ(r.spec.options["backward_prefetch"], "BACKWARD_PRE");
  // A YAML without fsdp_backward_prefetch gets accelerate's default: no prefetch (not PyTorch's).
  const auto p = write_file("acc.yaml", "distributed_type: FSDP\nmixed_precision: 'no'\nfsdp_config:\n"
                                        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  sharding_strategy: 2\n");
  const auto r2 = resolve({"--config", p});
  EXPECT_EQ(r2.spec.options["backward_prefetch"], "NO_PREFETCH");
  EXPECT_EQ(r2.spec.options["sharding_strategy"], "SHARD_GRAD_OP") << "keys without the fsdp_ prefix are prefixed";
  EXPECT_EQ(r2.spec.precision, "fp32");
  // HYBRID_SHARD_ZERO2 (by number, 5) runs, its shard group the ranks per node as HYBRID_SHARD's.
  const auto p3 = write_file("acc_hsdp_z2.yaml", "distributed_type: FSDP\nnum_processes: 8\nnum_machines: 2\n"
                                                 "fsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                                                 "  fsdp_sharding_strategy: 5\n");
  const auto r3 = resolve({"--config", p3});
  EXPECT_EQ(r3.spec.options["sharding_strategy"], "HYBRID_SHARD_ZERO2");
  EXPECT_EQ(r3.spec.options["hybrid_shard_group_size"], 4);
  // --nproc replaces num_processes, as accelerate launch's --num_processes does: the ranks per node
  // (torchrun's --nproc_per_node) are --nproc / num_machines, not the file's 8 / 2 (oumi's recipe,
  // num_processes 4 and HYBRID_SHARD, refused "shard group size 4 does not divide world size 2").
  EXPECT_EQ(resolve({"--config", p3, "--nproc", "4"}).spec.options["hybrid_shard_group_size"], 2);
  EXPECT_EQ(resolve({"--config", p3, "--nproc", "2"}).spec.options["hybrid_shard_group_size"], 1);
  std::ofstream(p3) << "distributed_type: FSDP\nnum_processes: 4\nnum_machines: 1\nfsdp_config:\n"
                       "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_sharding_strategy: HYBRID_SHARD\n";
  EXPECT_EQ(resolve({"--config", p3}).spec.options["hybrid_shard_group_size"], 4);
  EXPECT_EQ(resolve({"--config", p3, "--nproc", "2"}).spec.options["hybrid_shard_group_size"], 2);
  // fsdp_auto_wrap_policy as accelerate resolves it: absent is NO_WRAP; SIZE_BASED_WRAP takes
  // fsdp_min_num_params (launch's default 1e8 when absent), read only under SIZE_BASED_WRAP.
  const auto p4 = write_file("acc_wrap.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 1\n"
                                              "  fsdp_min_num_params: 5\n");
  const auto r4 = resolve({"--config", p4});
  EXPECT_EQ(r4.spec.options["auto_wrap_policy"], "NO_WRAP");
  EXPECT_FALSE(r4.spec.options.json().contains("min_num_params"));
  std::ofstream(p4) << "distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n";
  EXPECT_EQ(resolve({"--config", p4}).spec.options["min_num_params"], 100000000);
  std::ofstream(p4) << "distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: 2\n  fsdp_min_num_params: 200000000\n";
  EXPECT_EQ(resolve({"--config", p4}).spec.options["auto_wrap_policy"], "SIZE_BASED_WRAP");
  EXPECT_EQ(resolve({"--config", p4}).spec.options["min_num_params"], 200000000);
  std::remove(p4.c_str());
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
       "  fsdp_reshard_after_forward: SHARD_GRAD_OP\n",
       "fsdp_config.fsdp_reshard_after_forward SHARD_GRAD_OP: under fsdp_version 1 accelerate 1.6-1.15 runs the sharding "
       "strategy FULL_SHARD"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
       "  fsdp_reshard_after_forward: false\n",
       "fsdp_config.fsdp_reshard_after_forward false: a boolean is FSDP2's form"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 1.0e+8\n",
       "fsdp_config.fsdp_min_num_params 100000000.0: accelerate reads it with int()"},
      {"distributed_type: FSDP\nmixed_precision: no\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n",
       "mixed_precision false: YAML reads an unquoted no"},
      {"distributed_type: FSDP\nbogus_key: 1\n", "bogus_key: not an accelerate config key"},
      {"distributed_type: XLA\n", "distributed_type XLA"},
      {"distributed_type: FSDP\ndynamo_config:\n  dynamo_backend: INDUCTOR\n", "dynamo_config.dynamo_backend INDUCTOR"},
  };
  for (const auto& [text, expected] : refused) {
    std::ofstream(p) << text;
    EXPECT_NE(usage_error({"--config", p}).find(expected), std::string::npos) << text << "\n" << usage_error({"--config", p});
  }
  std::remove(p.c_str());
}

// `mixed_precision: no` unquoted is a YAML boolean: accelerate launch alone fails on it
// (args.mixed_precision.lower() on a bool), so run refuses it (above); with accelerate launch
// --mixed_precision X the file's value is never read (launch.py: `if not args.mixed_precision`), and
// with zerobench's --precision neither: the key is ignored, the flag decides, for every
// distributed_type. From LiuTaowen-Tony/Retriever's fsdp_config.yaml (312f2cc), keys inline.
TEST(AccelerateConfig, AnUnquotedNoIsIgnoredWhenPrecisionIsGivenAsAccelerateLaunchIgnoresIt) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"distributed_type: FSDP\nmixed_precision: no\nnum_processes: 3\nfsdp_config:\n"
       "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_sharding_strategy: FULL_SHARD\n", "fsdp"},
      {"distributed_type: FSDP\nmixed_precision: no\nfsdp_config:\n  fsdp_version: 2\n", "fsdp2"},
      {"distributed_type: MULTI_GPU\nmixed_precision: no\n", "ddp"},
      {"distributed_type: DEEPSPEED\nmixed_precision: no\ndeepspeed_config:\n  zero_stage: 3\n", "zero3"},
  };
  const auto p = temp_path("unquoted_no.yaml");
  for (const auto& [text, backend] : files) {
    std::ofstream(p) << text;
    EXPECT_NE(usage_error({"--config", p}).find("mixed_precision false: YAML reads an unquoted no"), std::string::npos)
        << text;
    const auto fp32 = resolve({"--config", p, "--precision", "fp32", "--nproc", "2"});
    EXPECT_EQ(fp32.backend, backend) << text;
    EXPECT_EQ(fp32.spec.precision, "fp32") << text;
    const auto& notes = fp32.provenance.notes;
    const auto ignored = std::find_if(notes.ignored.begin(), notes.ignored.end(),
                                      [](const auto& k) { return k.key == "mixed_precision"; });
    ASSERT_NE(ignored, notes.ignored.end()) << text;
    EXPECT_EQ(ignored->value, "false");
    EXPECT_NE(ignored->note.find("--precision decides"), std::string::npos) << ignored->note;
    EXPECT_TRUE(std::none_of(notes.applied.begin(), notes.applied.end(),
                             [](const auto& k) { return k.key == "mixed_precision"; }))
        << text;
  }
  std::ofstream(p) << files[0].first;
  EXPECT_EQ(resolve({"--config", p, "--precision", "mixed"}).spec.precision, "mixed");
  std::ofstream(p) << files[3].first;
  EXPECT_EQ(resolve({"--config", p, "--precision", "bf16"}).spec.precision, "bf16");
  // An unquoted yes/true/on in an FSDP2 file: the same (the FSDP2 reader refused it on its own
  // before, --precision or not: round 2 of the real-config trial).
  for (const char* b : {"yes", "True", "on"}) {
    std::ofstream(p) << "distributed_type: FSDP\nmixed_precision: " << b << "\nfsdp_config:\n  fsdp_version: 2\n";
    EXPECT_NE(usage_error({"--config", p}).find("mixed_precision true: YAML reads an unquoted"), std::string::npos) << b;
    EXPECT_EQ(resolve({"--config", p, "--precision", "mixed", "--nproc", "2"}).spec.precision, "mixed") << b;
  }
  std::remove(p.c_str());
}

TEST(AccelerateConfig, DeepSpeedYamlBuildsTheConfigAccelerateBuilds) {
  // peft's deepspeed_config.yaml: zero_stage 3, gradient_accumulation_steps 4, bf16.
  const auto r = resolve({"--config", kCorpus + "peft_sft_deepspeed_config.yaml", "--nproc", "2"});
  EXPECT_EQ(r.backend, "zero3");
  EXPECT_EQ(r.spec.precision, "bf16");
  EXPECT_EQ(r.spec.train.grad_accum, 4);
  EXPECT_EQ(r.spec.train.grad_clip, 1.0) << "gradient_clipping \"auto\": 1.0 (accelerate's _prepare_deepspeed)";
  EXPECT_EQ(r.spec.options["reduce_bucket_size"], 500000000) << "no \"auto\" in accelerate's config: DeepSpeed defaults";
  EXPECT_EQ(resolve({"--config", kCorpus + "peft_sft_deepspeed_config.yaml", "--grad-accum", "2"}).spec.train.grad_accum, 2)
      << "accelerate launch's flags override the YAML";
  // deepspeed_config_file is opened relative to the working directory, as accelerate opens it.
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  const std::string dir = temp_path("dsdir");
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/ds.json") << R"({"train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto",
      "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}})";
  std::ofstream(dir + "/acc.yaml") << "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
                                      "  zero3_init_flag: true\nnum_processes: 2\n";
  EXPECT_NE(usage_error({"--config", dir + "/acc.yaml"}).find("no such file " + std::string(cwd) + "/ds.json"),
            std::string::npos);
  ASSERT_EQ(chdir(dir.c_str()), 0);
  const auto r2 = resolve({"--config", "acc.yaml"});
  const auto r3 = resolve({"--config", "acc.yaml", "--precision", "bf16"});
  std::ofstream("acc2.yaml") << "distributed_type: DEEPSPEED\nmixed_precision: bf16\ndeepspeed_config:\n"
                                "  deepspeed_config_file: ds.json\n";
  const auto mixed_beside_file = usage_error({"--config", "acc2.yaml"});
  ASSERT_EQ(chdir(cwd), 0);
  EXPECT_EQ(r2.spec.precision, "fp32") << "accelerate's mixed_precision defaults to no";
  EXPECT_EQ(r3.spec.precision, "bf16");
  EXPECT_EQ(r2.spec.options["reduce_bucket_size"], r2.spec.model.hidden * r2.spec.model.hidden) << "\"auto\": hidden^2";
  ASSERT_EQ(r2.provenance.sources.size(), 2u);
  EXPECT_EQ(r2.provenance.sources[1].path, dir + "/ds.json");
  EXPECT_NE(mixed_beside_file.find("mixed_precision beside deepspeed_config_file"), std::string::npos) << mixed_beside_file;
  // trl's zero2.yaml: the plugin's zero_stage 2 picks ZeRO-2 (issue 24).
  EXPECT_EQ(resolve({"--config", kCorpus + "trl_zero2.yaml"}).backend, "zero2");
}

TEST(AccelerateConfig, YamlScalarsAreTypedAsPyYamlTypesThem) {
  // PyYAML (YAML 1.1): 5e8 is a string, 5.0e+8 a float, yes a boolean, '1' a string.
  const auto p = write_file("typing.yaml", "distributed_type: FSDP\nfsdp_config:\n"
                                           "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                                           "  fsdp_forward_prefetch: yes\n  fsdp_sync_module_states: 'false'\n"
                                           "  fsdp_cpu_ram_efficient_loading: false\n");
  const auto r = resolve({"--config", p});
  EXPECT_EQ(r.spec.options["forward_prefetch"], true);
  EXPECT_EQ(r.spec.options["sync_module_states"], false);
  std::remove(p.c_str());
}

// ---- Reports say what they ran from -------------------------------------------------------------

// accelerate opens its YAML with encoding="utf-8", DeepSpeed json.load()s its JSON as text: a byte
// that is not UTF-8 anywhere in the file (a value, a comment) is refused before any key is read.
// Found by the mutation test: a 0xFF where a YAML comment began reached a JSON dump and ended the
// run with nlohmann's type_error (exit 1) instead of one line and exit 2.
TEST(ConfigFile, BytesThatAreNotUtf8AreRefusedNamingTheByte) {
  const std::string yaml_head = "distributed_type: FSDP\nnum_processes: 2  ";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {yaml_head + "\xff the number of GPUs\n", "byte 41 is 0xFF"},           // the mutant: '#' -> 0xFF
      {yaml_head + "# \xc0\xaf overlong\n", "byte 43 is 0xC0"},              // an overlong '/'
      {yaml_head + "# \xed\xa0\x80 a surrogate\n", "byte 43 is 0xED"},      // U+D800
      {yaml_head + "# cut \xe4\xb8", "byte 47 is 0xE4"},                      // truncated at the end
  };
  const auto p = temp_path("not_utf8.yaml");
  for (const auto& [text, what] : bad) {
    std::ofstream(p, std::ios::binary) << text;
    const auto e = usage_error({"--config", p, "--model", "tiny"});
    EXPECT_NE(e.find("not UTF-8 text: " + what), std::string::npos) << e;
  }
  // A DeepSpeed JSON with the byte in a comment (nlohmann skips comments; Python does not).
  const auto j = temp_path("not_utf8.json");
  std::ofstream(j, std::ios::binary) << "{\"train_micro_batch_size_per_gpu\": 1, // \xff\n \"zero_optimization\": {\"stage\": 3}}";
  EXPECT_NE(usage_error({"--config", j, "--model", "tiny"}).find("not UTF-8 text: byte 41 is 0xFF"), std::string::npos);
  // UTF-8 text (a comment in Chinese, an accented value) reads as before.
  std::ofstream(p, std::ios::binary) << "distributed_type: MULTI_GPU\nnum_processes: 2  # \xe8\x8a\x82\xe7\x82\xb9 caf\xc3\xa9 \xf0\x9f\x98\x80\n";
  EXPECT_EQ(usage_error({"--config", p, "--model", "tiny"}), "");
  std::remove(p.c_str());
  std::remove(j.c_str());
}

TEST(ConfigProvenance, Sha256IsTheStandardDigest) {
  const auto p = write_file("abc.txt", "abc");
  EXPECT_EQ(bench::file_sha256(p), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::remove(p.c_str());
}

TEST(ConfigProvenance, OkAndFailedReportsCarrySourcesWarningsAndIgnoredKeys) {
  const auto out = temp_path("prov.json");
  // An ok run: the blog's DeepSpeed config (warnings: none; ignored: the checkpoint key).
  auto r = run_zerobench("run --config " + kSource + "/bench/configs/deepspeed_zero3_blog.json --nproc 2 --model tiny "
                         "--steps 2 --warmup 1 --seq-len 32 --quiet --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = reports::read_report(out);
  EXPECT_EQ(report["config"]["source_files"][0]["sha256"],
            bench::file_sha256(kSource + "/bench/configs/deepspeed_zero3_blog.json"));
  EXPECT_TRUE(listed(report, "zero_optimization.stage3_gather_16bit_weights_on_model_save"));
  EXPECT_EQ(report["config"]["train"]["micro_batch"], 8);
  // A file with unknown top-level keys: DeepSpeed ignores them, the report warns and the table flags it.
  const auto p = write_file("warn.json", R"({"train_micro_batch_size_per_gpu": 1, "monitor_config": {"enabled": true},
      "zero_optimization": {"stage": 3}})");
  r = run_zerobench("run --config " + p + " --nproc 2 --model tiny --steps 2 --warmup 1 --seq-len 32 --quiet --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  report = reports::read_report(out);
  ASSERT_EQ(report["config"]["warnings"].size(), 1u);
  EXPECT_NE(report["config"]["warnings"][0].get<std::string>().find("monitor_config"), std::string::npos);
  report["_cell"] = "warned";
  const auto table = reports::render_table({report}, {"csv", ""});
  EXPECT_NE(table.find("ok (1 config warning)"), std::string::npos) << table;
  // The estimate and the measured peak side by side: est. peak MiB and peak/est are filled in.
  EXPECT_NE(table.find("est. peak MiB,peak/est"), std::string::npos) << table;
  double est = 0;
  for (const auto& rk : report["ranks"]) est = std::max(est, rk["memory"]["estimated_peak_bytes"].get<double>() / 1048576.0);
  char cell[32];
  std::snprintf(cell, sizeof(cell), ",%.2f,", est);
  EXPECT_NE(table.find(cell), std::string::npos) << cell << "\n" << table;
  // A failed run (a rank exits): its report still says what it ran from.
  r = run_zerobench("run --config " + p + " --nproc 2 --model tiny --steps 4 --fault-inject exit:1:1 --quiet --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  report = reports::read_report(out);
  EXPECT_EQ(report["status"]["state"], "failed");
  EXPECT_EQ(report["config"]["source_files"][0]["sha256"], bench::file_sha256(p));
  EXPECT_EQ(report["config"]["warnings"].size(), 1u);
  EXPECT_FALSE(report["config"]["ignored"].empty());
  std::remove(p.c_str());
  std::remove(out.c_str());
}

// ---- Runs that go wrong are named -------------------------------------------------------------

TEST(Divergence, ANanLossEndsTheRunDivergedWithItsReport) {
  const auto out = temp_path("diverged.json");
  const auto r = run_zerobench("run --nproc 2 --model tiny --precision fp32 --grad-clip 0 --lr 1e4 --lr-schedule constant "
                               "--steps 30 --warmup 1 --quiet --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("diverged"), std::string::npos) << r.output;
  const auto report = reports::read_report(out);
  ASSERT_EQ(report["status"]["state"], "diverged");
  const int64_t step = report["status"]["step"];
  EXPECT_EQ(report["steps"].size(), size_t(step + 1)) << "the steps so far, the diverged one last";
  const auto& last = report["steps"].back();
  EXPECT_TRUE(last["loss"].is_null() || last["grad_norm"].is_null()) << last.dump();  // NaN/Inf are null in JSON
  EXPECT_LT(step, 29);
  // regress: a diverged current cell against an ok baseline is a regression.
  auto ok = report;
  ok["status"] = {{"state", "ok"}, {"error", ""}};
  ok["_cell"] = "c";
  auto bad = report;
  bad["_cell"] = "c";
  EXPECT_TRUE(reports::compare_reports({ok}, {bad}, {}).regression());
  std::remove(out.c_str());
}

TEST(Divergence, TheMatrixRecordsADivergedCellAndGoesOn) {
  const auto dir = temp_path("divmatrix");
  const auto file = write_file("divmatrix.yaml",
                               "name: div\ntimeout_s: 120\nbase: {model: tiny, nproc: 2, steps: 20, warmup: 1, "
                               "precision: fp32, grad-clip: 0, lr-schedule: constant, seq-len: 32}\n"
                               "axes:\n  lr: [1e4, 1e-3]\n");
  const auto r = run_zerobench("matrix " + file + " --out " + dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::ifstream in(dir + "/index.json");
  json index;
  in >> index;
  ASSERT_EQ(index["cells"].size(), 2u);
  EXPECT_EQ(index["cells"][0]["status"], "diverged");
  EXPECT_EQ(index["cells"][1]["status"], "ok");
  EXPECT_EQ(reports::read_report(dir + "/" + index["cells"][0]["report"].get<std::string>())["status"]["state"],
            "diverged");
  std::remove(file.c_str());
}

TEST(OomKill, ARankKilledBySigkillIsReportedOomNamingTheSignal) {
  const auto out = temp_path("oom.json");
  const auto r = run_zerobench("run --nproc 2 --model tiny --steps 10 --fault-inject sigkill:1:2 --quiet --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto report = reports::read_report(out);
  EXPECT_EQ(report["status"]["state"], "oom");
  EXPECT_NE(report["status"]["error"].get<std::string>().find("signal 9"), std::string::npos) << report["status"].dump();
  std::remove(out.c_str());
}

// ---- Numeric flags ----------------------------------------------------------------------------

TEST(NumericFlags, NanInfAndOutOfRangeValuesExit2NamingFlagValueAndRange) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--lr nan", "--lr: nan is not a finite number; valid range [0, inf)"},
      {"--lr inf", "--lr: inf is not a finite number"},
      {"--lr -1", "--lr: -1 is outside the valid range [0, inf)"},
      {"--min-lr-ratio 2", "--min-lr-ratio: 2 is outside the valid range [0, 1]"},
      {"--seq-len -5", "--seq-len: -5 is outside the valid range [1, inf)"},
      {"--grad-clip nan", "--grad-clip: nan is not a finite number"},
      {"--peak-tflops -3", "--peak-tflops: -3 is outside the valid range"},
      {"--weight-decay 1e999", "--weight-decay: 1e999 is not"},
  };
  for (const auto& [flags, expected] : cases) {
    const auto r = run_zerobench("run " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.output;
    EXPECT_EQ(lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << flags << ": " << r.output;
    EXPECT_EQ(r.output.find("179769313"), std::string::npos) << "DBL_MAX in the message: " << r.output;
  }
  const auto r = run_zerobench("regress --baseline x --current y --threshold nan");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--threshold: nan is not a finite number"), std::string::npos) << r.output;
}

// ---- Memory pre-flight ------------------------------------------------------------------------

TEST(MemoryPreflight, AnImpossibleSequenceLengthExits2InSecondsWithTheEstimate) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_zerobench("run --model tiny --nproc 2 --seq-len 100000000");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("memory pre-flight: each rank needs an estimated"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("TiB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MemAvailable"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--no-memory-check"), std::string::npos) << r.output;
  EXPECT_LT(s, 30) << "the pre-flight must refuse before anything is allocated";
}

TEST(MemoryPreflight, TheEstimateIsInEveryReportAndInModelInfo) {
  const auto out = temp_path("est.json");
  const auto r = run_zerobench("run --model tiny --nproc 2 --backend zero3 --precision bf16 --steps 2 --warmup 1 --quiet "
                               "--out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = reports::read_report(out);
  for (const auto& rk : report["ranks"]) {
    const auto& m = rk["memory"];
    EXPECT_GT(m["estimated_peak_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(m["estimate"]["peak_bytes"], m["estimated_peak_bytes"]);
    EXPECT_FALSE(m["estimate"]["terms"].empty());
    // The model-state terms (ZeRO-3's IPG bucket included) are the closed form the engine's bytes
    // are tested against.
    int64_t states = 0;
    for (const auto& t : m["estimate"]["terms"])
      if (t["phase"] == "resident" && (t["name"] == "params" || t["name"] == "master params" || t["name"] == "grads" ||
                                       t["name"] == "optimizer states" || t["name"] == "communication buffers"))
        states += t["bytes"].get<int64_t>();
    EXPECT_EQ(states, m["model_states_total_bytes"].get<int64_t>());
  }
  const auto info = run_zerobench("model-info small --world-size 4 --seq-len 256 --micro-batch 2 --json");
  ASSERT_EQ(info.exit_code, 0) << info.output;
  const auto j = json::parse(info.output);
  for (const char* mode : {"ddp:fp32", "fsdp:mixed", "zero3:bf16"})
    EXPECT_GT(j["estimated_peak_bytes_per_rank"]["modes"][mode]["peak_bytes"].get<int64_t>(),
              j["model_state_bytes_per_rank"][mode]["total"].get<int64_t>())
        << mode;
  std::remove(out.c_str());
}

TEST(MemoryPreflight, ActivationFormulaCountsWhatTheBlockSaves) {
  // tiny, B=4, T=64 in bf16: 20NH + 4N*KV + 8NF + 8N + 4*B*nh*T bytes (torch's saved_tensors_hooks
  // over the same ops gave 1,447,936 bytes, weights excluded); fp32: 32NH + 8N*KV + 16NF + ...
  const auto m = models::preset("tiny");
  EXPECT_EQ(models::block_saved_bytes(m, 4, 64, 2), 1447936);
  EXPECT_EQ(models::block_saved_bytes(m, 4, 64, 4), 2627584);
}

// ---- MFU's peak matches the compute dtype -----------------------------------------------------

TEST(PeakDtype, CpuPeakIsMeasuredInTheCellsComputeDtype) {
  const auto out = temp_path("peak.json");
  for (const auto& [precision, gemm] : {std::pair<std::string, std::string>{"fp32", "Float GEMM"}, {"mixed", "BFloat16 GEMM"}}) {
    const auto r = run_zerobench("run --model tiny --steps 2 --warmup 1 --backend fsdp --nproc 2 --precision " + precision +
                                 " --quiet --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto report = reports::read_report(out);
    EXPECT_NE(report["env"]["peak_source"].get<std::string>().find(gemm), std::string::npos)
        << precision << ": " << report["env"]["peak_source"];
  }
  std::remove(out.c_str());
}

// ---- Backend options: parsed once at resolution, typed in EngineSpec (issue 36) ---------------

namespace {
// The JSON round trip resolution ran before issue 36 (to_json(from_json(to_json(options)))).
json round_trip(const std::string& backend, const json& j) {
  namespace b = backends;
  if (backend == "zero3") return b::zero3::to_json(b::zero3::zero3_options_from_json(j));
  if (backend == "zero1" || backend == "zero2")
    return b::zero12::to_json(b::zero12::zero12_options_from_json(j, backend == "zero1" ? 1 : 2));
  if (backend == "zero0") return b::zero0::to_json(b::zero0::zero0_options_from_json(j));
  if (backend == "fsdp") return b::fsdp::to_json(b::fsdp::fsdp_options_from_json(j));
  if (backend == "fsdp2") return b::fsdp2::to_json(b::fsdp2::fsdp2_options_from_json(j));
  if (backend == "ddp") return b::ddp::to_json(b::ddp::ddp_options_from_json(j));
  ADD_FAILURE() << "no round trip for " << backend;
  return j;
}
}  // namespace

// Every corpus file that runs resolves to its backend's typed struct (not JSON), and that
// struct renders exactly as the round trip it replaced: the report's config.backend.options are
// unchanged.
TEST(BackendOptions, ResolutionStoresTheTypedStructTheJsonRoundTripGave) {
  int checked = 0;
  std::set<std::string> backends_seen;
  for (const auto& c : corpus()) {
    if (c.outcome != "runs") continue;
    const auto r = resolve({"--config", kCorpus + c.file, "--model", "tiny", "--nproc", "2"});
    EXPECT_TRUE(r.spec.options.is_typed()) << c.file;
    const json j = r.spec.options.json();
    EXPECT_EQ(j, round_trip(r.backend, j)) << c.file;
    backends_seen.insert(r.backend);
    ++checked;
  }
  EXPECT_GE(checked, 10);
  EXPECT_GE(backends_seen.size(), 3u);
  // Flags alone (no file) store the struct too.
  for (const std::string backend : {"ddp", "fsdp", "fsdp2", "zero0", "zero1", "zero2", "zero3"}) {
    const auto r = resolve({"--backend", backend, "--model", "tiny"});
    EXPECT_TRUE(r.spec.options.is_typed()) << backend;
    EXPECT_EQ(r.spec.options.json(), round_trip(backend, r.spec.options.json())) << backend;
  }
}

TEST(BackendOptions, ARawObjectIsParsedOnceAndATypedOneAskedForAnotherTypeIsALogicError) {
  namespace z3 = backends::zero3;
  // A raw object (a test's spec, model-info's offload choice): parsed by the accessor, once.
  backends::EngineSpec spec;
  spec.options = {{"stage3_prefetch_bucket_size", 7}};
  EXPECT_FALSE(spec.options.is_typed());
  const auto& parsed = z3::zero3_options(spec.options);
  EXPECT_EQ(parsed.stage3_prefetch_bucket_size, 7);
  EXPECT_EQ(parsed.stage3_max_live_parameters, z3::Zero3Options{}.stage3_max_live_parameters);
  EXPECT_EQ(&z3::zero3_options(spec.options), &parsed) << "the parse is kept, not repeated";
  const auto copy = spec;
  EXPECT_EQ(&z3::zero3_options(copy.options), &parsed) << "a copy of the spec shares it";
  // A typed struct is the one the accessor returns, and renders with the backend's to_json.
  z3::Zero3Options o;
  o.reduce_bucket_size = 1234;
  spec.options = o;
  EXPECT_TRUE(spec.options.is_typed());
  EXPECT_EQ(z3::zero3_options(spec.options).reduce_bucket_size, 1234);
  EXPECT_EQ(spec.options.json(), z3::to_json(o));
  // Writing a key makes the options raw again: the next read parses the edited object.
  spec.options["reduce_bucket_size"] = 99;
  EXPECT_FALSE(spec.options.is_typed());
  EXPECT_EQ(z3::zero3_options(spec.options).reduce_bucket_size, 99);
  // A raw object's bad value is the backend reader's one-line UsageError.
  backends::EngineSpec bad;
  bad.options = {{"reduce_bucket_size", 0}};
  EXPECT_THROW(z3::zero3_options(bad.options), UsageError);
  // A typed holder asked for another backend's struct is a logic error naming both types.
  const backends::BackendOptions typed = o;
  try {
    backends::fsdp::fsdp_options(typed);
    ADD_FAILURE() << "fsdp options read from zero3's";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("Zero3Options"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("FsdpOptions"), std::string::npos) << e.what();
  }
  // A raw object names no backend: each backend reading it parses it once, into its own struct
  // (a spec of defaults read by every backend, tests/test_projection_hooks.cpp).
  const backends::BackendOptions raw = nlohmann::json::object();
  const auto& as_zero3 = z3::zero3_options(raw);
  const auto& as_fsdp = backends::fsdp::fsdp_options(raw);
  EXPECT_EQ(&z3::zero3_options(raw), &as_zero3);
  EXPECT_EQ(&backends::fsdp::fsdp_options(raw), &as_fsdp);
  EXPECT_EQ(z3::to_json(as_zero3), z3::to_json(z3::Zero3Options{}));
}
