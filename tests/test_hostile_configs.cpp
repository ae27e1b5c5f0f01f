// test_hostile_configs.cpp — config readers a hostile file cannot take down (issue 26, part 5;
// config/bounded_readers.hpp, docs/configs.md "Limits"): the alias bomb, deep nesting and
// oversized files exit 2 naming the limit, small legitimate anchors still work, and a bounded
// mutation test over the real-config corpus (tests/configs/real/), bench/configs/, the matrices
// and a --model-dir config.json — truncations, byte flips, deep nesting, aliases, huge numbers,
// wrong types — requires every case to be accepted or refused with a UsageError (exit 2): never
// another exception (exit 1), a crash, a hang or runaway memory. A sample of the refused cases
// goes through the real binary to prove exit code 2 there too, with its memory bounded.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <sstream>

#include "bench/matrix/matrix.hpp"
#include "bench/run/run_options.hpp"
#include "config/bounded_readers.hpp"
#include "models/checkpoint/weight_loader.hpp"
#include "runtime/errors.hpp"
#include "runtime/memory.hpp"
#include "tests/resolve_run.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using test_support::temp_path;

namespace {
const std::string kSource = zb::bench::source_dir();

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::vector<std::string> files_in(const std::string& dir, const std::vector<std::string>& suffixes) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      for (const auto& s : suffixes)
        if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) out.push_back(dir + name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// `zerobench run FLAGS` resolved in-process (no process started): the readers the binary runs.
void resolve_run(const std::vector<std::string>& flags) { test_support::resolve_run(flags); }

// The issue's bomb: fsdp_sharding_strategy is a sequence whose element k anchors 9 aliases of
// element k-1 — `levels` levels, 9^levels scalars once expanded (11 levels: ~3.1e10 nodes).
std::string alias_bomb(int levels) {
  std::string v = "[&a [x,x,x,x,x,x,x,x,x]";
  std::string prev = "a";
  for (int l = 1; l < levels; ++l) {
    const std::string name(1, char('a' + l));
    v += ", &" + name + " [";
    for (int i = 0; i < 9; ++i) v += (i ? ",*" : "*") + prev;
    v += "]";
    prev = name;
  }
  return v + "]";
}

std::string bomb_yaml(int levels) {
  return "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nfsdp_config:\n"
         "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_sharding_strategy: " +
         alias_bomb(levels) + "\nmixed_precision: 'no'\nnum_processes: 2\n";
}

std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// Runs `argv` as a child process and waits for it: exit code (128 + signal when killed) and the
// child's peak RSS in bytes (wait4's rusage.ru_maxrss), stderr+stdout in `output`.
struct ChildResult {
  int exit_code = -1;
  int64_t max_rss_bytes = 0;
  std::string output;
};
ChildResult run_child(const std::vector<std::string>& argv) {
  const auto log = temp_path("child.log");
  ChildResult r;
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> args;
    std::vector<std::string> copy = argv;
    for (auto& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    execv(copy[0].c_str(), args.data());
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.max_rss_bytes = int64_t(ru.ru_maxrss) * 1024;
  r.output = read_text(log);
  return r;
}

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }
}  // namespace

// ---- The alias bomb -------------------------------------------------------------------------

TEST(AliasBomb, IssueBombExitsTwoNamingTheNodeLimitInProcess) {
  const auto path = temp_path("bomb.yaml");
  const std::string text = bomb_yaml(11);
  EXPECT_LT(text.size(), 600u) << "the issue's bomb is a few hundred bytes";
  write_text(path, text);
  const bool reset = runtime::reset_peak_rss();
  const int64_t before = runtime::current_rss_bytes();
  const auto msg = usage_error_of([&] { resolve_run({"--config", path, "--model", "tiny"}); });
  EXPECT_NE(msg.find("kMaxDocumentNodes"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << "the message names the file: " << msg;
  if (reset) {
    EXPECT_LT(runtime::hwm_rss_bytes() - before, int64_t(16) << 20) << "the refusal costs a few MB at most";
  }
}

TEST(AliasBomb, IssueBombThroughTheBinaryExitsTwoUnder100MB) {
  const auto path = temp_path("bomb_bin.yaml");
  write_text(path, bomb_yaml(11));
  // The binary's own footprint (libtorch loaded) for comparison: a run refused at its first flag.
  const auto base = run_child({zb::test_support::zerobench_bin(), "run", "--config", temp_path("no_such_file.yaml"), "--model", "tiny"});
  ASSERT_EQ(base.exit_code, 2) << base.output;
  const auto r = run_child({zb::test_support::zerobench_bin(), "run", "--config", path, "--model", "tiny"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("kMaxDocumentNodes"), std::string::npos) << r.output;
  // The binary holds ~600 MB with libtorch mapped before reading anything; the file adds a few MB.
  EXPECT_LT(r.max_rss_bytes - base.max_rss_bytes, int64_t(16) << 20)
      << "peak RSS " << r.max_rss_bytes << " vs " << base.max_rss_bytes << " for a run refused before reading";
  EXPECT_LT(r.output.size(), 2000u) << "one line, the value clipped";
  // The accelerate and fsdp2 readers of the same file (fsdp_version 2 takes backends/fsdp2's path).
  const auto v2 = temp_path("bomb_v2.yaml");
  write_text(v2, std::regex_replace(bomb_yaml(11), std::regex("fsdp_config:\n"), "fsdp_config:\n  fsdp_version: 2\n"));
  const auto r2 = run_child({zb::test_support::zerobench_bin(), "run", "--accelerate-config", v2, "--model", "tiny"});
  EXPECT_EQ(r2.exit_code, 2) << r2.output;
  EXPECT_NE(r2.output.find("kMaxDocumentNodes"), std::string::npos) << r2.output;
  // The matrix reader.
  const auto m = temp_path("bomb_matrix.yaml");
  write_text(m, "name: bomb\nbase:\n  model: tiny\naxes:\n  backend: " + alias_bomb(11) + "\n");
  const auto r3 = run_child({zb::test_support::zerobench_bin(), "matrix", m, "--dry-run", "--out", temp_path("bomb_matrix_out")});
  EXPECT_EQ(r3.exit_code, 2) << r3.output;
  EXPECT_NE(r3.output.find("kMaxDocumentNodes"), std::string::npos) << r3.output;
}

// The gate can fail: the walk counts every alias expansion, so a bomb below the budget converts
// to exactly its expanded size, and the same bomb one level up is refused; with the budget lifted
// (the fault the limit exists to catch) the conversion expands it.
TEST(AliasBomb, TheBudgetCountsExpandedNodesExactly) {
  const auto scalar = [](const YAML::Node& n) { return nlohmann::json(n.Scalar()); };
  // 5 levels: 9 + 81 + ... + 9^5 scalars, plus the containers.
  const YAML::Node five = YAML::Load(alias_bomb(5));
  const auto j = config::yaml_to_json_bounded(five, scalar, "five: ");
  int64_t scalars = 0;
  for (int l = 1; l <= 5; ++l) scalars += int64_t(std::pow(9, l));
  EXPECT_EQ(j.flatten().size(), size_t(scalars));
  // 6 levels: 9^6 = 531,441 scalars > kMaxDocumentNodes.
  const YAML::Node six = YAML::Load(alias_bomb(6));
  const auto msg = usage_error_of([&] { config::yaml_to_json_bounded(six, scalar, "six: "); });
  EXPECT_NE(msg.find("kMaxDocumentNodes"), std::string::npos) << msg;
  EXPECT_NE(usage_error_of([&] { config::check_yaml_bounds(six, "six: "); }), "");
  config::Limits lifted;
  lifted.max_nodes = int64_t(1) << 40;
  lifted.max_scalar_bytes = int64_t(1) << 40;
  EXPECT_EQ(usage_error_of([&] { config::yaml_to_json_bounded(six, scalar, "six: ", lifted); }), "")
      << "without the budget the walk expands the bomb (what bench/config_file.cpp did before)";
}

TEST(AliasBomb, SmallLegitimateAnchorsStillWork) {
  const auto path = temp_path("anchors.yaml");
  write_text(path,
             "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nmixed_precision: &mp bf16\n"
             "fsdp_config:\n  fsdp_auto_wrap_policy: &wrap TRANSFORMER_BASED_WRAP\n"
             "  fsdp_sharding_strategy: &strategy FULL_SHARD\n  fsdp_reshard_after_forward: *strategy\n"
             "  fsdp_state_dict_type: SHARDED_STATE_DICT\nnum_processes: 2\n");
  EXPECT_EQ(usage_error_of([&] { resolve_run({"--config", path, "--model", "tiny"}); }), "");
}

// ---- Depth and size -------------------------------------------------------------------------

TEST(HostileJson, DeepNestingAndOversizedFilesExitTwoNamingTheLimit) {
  const auto deep = temp_path("deep.json");
  write_text(deep, std::string(200000, '[') + std::string(200000, ']'));
  auto msg = usage_error_of([&] { resolve_run({"--config", deep, "--model", "tiny"}); });
  EXPECT_NE(msg.find("kMaxNestingDepth"), std::string::npos) << msg;
  // One level over the limit inside a key DeepSpeed ignores; at the limit it is read.
  auto nested = [](int depth) {
    std::string v = "1";
    for (int d = 1; d < depth; ++d) v = "{\"k\": " + v + "}";
    return "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3}, \"wandb\": " + v + "}";
  };
  const auto at = temp_path("at_limit.json"), past = temp_path("past_limit.json");
  write_text(at, nested(config::kMaxNestingDepth));
  write_text(past, nested(config::kMaxNestingDepth + 1));
  EXPECT_EQ(usage_error_of([&] { resolve_run({"--config", at, "--model", "tiny"}); }), "");
  msg = usage_error_of([&] { resolve_run({"--config", past, "--model", "tiny"}); });
  EXPECT_NE(msg.find("kMaxNestingDepth"), std::string::npos) << msg;
  // YAML: 100,000 levels stop in yaml-cpp's parser (DepthGuard); 65 levels in the walk.
  const auto ydeep = temp_path("deep.yaml");
  write_text(ydeep, "distributed_type: FSDP\nfsdp_config: " + std::string(100000, '[') + std::string(100000, ']') + "\n");
  EXPECT_NE(usage_error_of([&] { resolve_run({"--config", ydeep, "--model", "tiny"}); }), "");
  write_text(ydeep, "distributed_type: FSDP\nfsdp_config: " + std::string(70, '[') + std::string(70, ']') + "\n");
  msg = usage_error_of([&] { resolve_run({"--config", ydeep, "--model", "tiny"}); });
  EXPECT_NE(msg.find("kMaxNestingDepth"), std::string::npos) << msg;
  // Size: one byte over kMaxConfigFileBytes (a valid document otherwise).
  const auto big = temp_path("big.json");
  write_text(big, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3}}" +
                      std::string(size_t(config::kMaxConfigFileBytes), ' '));
  msg = usage_error_of([&] { resolve_run({"--config", big, "--model", "tiny"}); });
  EXPECT_NE(msg.find("kMaxConfigFileBytes"), std::string::npos) << msg;
  // A number that overflows a double is bad input, not a crash or exit 1.
  const auto huge = temp_path("huge.json");
  write_text(huge, "{\"train_micro_batch_size_per_gpu\": 1e400, \"zero_optimization\": {\"stage\": 3}}");
  EXPECT_NE(usage_error_of([&] { resolve_run({"--config", huge, "--model", "tiny"}); }), "");
}

TEST(HostileJson, ModelDirConfigJsonIsBoundedToo) {
  const auto dir = test_support::make_clean_dir("hostile_model_dir");
  ASSERT_FALSE(dir.empty());
  write_text(dir + "/config.json", std::string(100000, '[') + std::string(100000, ']'));
  auto msg = usage_error_of([&] { models::checkpoint::read_model_dir_config(dir); });
  EXPECT_NE(msg.find("kMaxNestingDepth"), std::string::npos) << msg;
  write_text(dir + "/config.json", "{\"hidden_size\": 64}" + std::string(size_t(config::kMaxModelJsonBytes), ' '));
  msg = usage_error_of([&] { models::checkpoint::read_model_dir_config(dir); });
  EXPECT_NE(msg.find("kMaxModelJsonBytes"), std::string::npos) << msg;
}

// ---- The mutation test ----------------------------------------------------------------------

namespace {
struct Case {
  std::string what;  // how it was made (for the failure message)
  std::string text;
};

// Values a mutation puts where a scalar was: huge and odd numbers, wrong types.
const std::vector<std::string> kJsonValues = {
    "1e400", "-1e400", "99999999999999999999999999", "-9223372036854775809", "1e-400", "NaN", "0", "-1", "0.5",
    "2147483648", "[]", "{}", "[1, 2]", "{\"a\": 1}", "true", "null", "\"str\"", "\"\"", "\"auto\"", "\"1e9\""};
const std::vector<std::string> kYamlValues = {
    "1e400", "-1e400", "99999999999999999999999999", "-9223372036854775809", ".nan", ".inf", "0", "-1", "0.5",
    "2147483648", "[]", "{}", "[1, 2]", "{a: 1}", "true", "no", "~", "'str'", "''", "auto", "!!binary aGk="};

std::vector<Case> mutations(const std::string& text, bool yaml, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Case> out;
  const size_t n = text.size();
  // Truncations.
  for (int k = 0; k < 16; ++k) out.push_back({"truncated to " + std::to_string(n * k / 16), text.substr(0, n * k / 16)});
  // Byte flips to structural and odd bytes.
  const std::string bytes = std::string("{}[]:,\"'&*!|>-#\n\t 09e.%@`?\\") + '\0' + "\xff\xfe";
  for (int k = 0; k < 24 && n > 0; ++k) {
    std::string t = text;
    const size_t pos = rng() % n;
    t[pos] = bytes[rng() % bytes.size()];
    out.push_back({"byte " + std::to_string(pos) + " set to " + std::to_string(int(uint8_t(t[pos]))), t});
  }
  // Lines dropped or doubled.
  std::vector<size_t> starts = {0};
  for (size_t i = 0; i < n; ++i)
    if (text[i] == '\n' && i + 1 < n) starts.push_back(i + 1);
  for (int k = 0; k < 8; ++k) {
    const size_t li = rng() % starts.size();
    const size_t b = starts[li], e = li + 1 < starts.size() ? starts[li + 1] : n;
    const std::string line = text.substr(b, e - b);
    out.push_back({"line " + std::to_string(li) + (k % 2 ? " doubled" : " dropped"),
                   text.substr(0, b) + (k % 2 ? line + line : "") + text.substr(e)});
  }
  // Value positions: after "key": (JSON) or key: (YAML).
  std::vector<std::pair<size_t, size_t>> values;  // [begin, end) of a scalar value
  const std::regex value_re(yaml ? R"(:[ ]+([^\n#]*[^\n# ]))" : R"(:[ ]*([^,\n{}\[\]]*[^,\n{}\[\] ]))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), value_re); it != std::sregex_iterator(); ++it)
    values.push_back({size_t(it->position(1)), size_t(it->position(1) + it->length(1))});
  const auto& repl = yaml ? kYamlValues : kJsonValues;
  auto at_value = [&](const std::string& v, const std::string& what) {
    if (values.empty()) return;
    const auto [b, e] = values[rng() % values.size()];
    out.push_back({what + " at byte " + std::to_string(b), text.substr(0, b) + v + text.substr(e)});
  };
  for (int k = 0; k < 48; ++k) at_value(repl[size_t(k) % repl.size()], "value " + repl[size_t(k) % repl.size()]);
  // Deep nesting at a value.
  for (int depth : {config::kMaxNestingDepth - 2, config::kMaxNestingDepth + 1, 3000, 200000})
    at_value(std::string(size_t(depth), '[') + std::string(size_t(depth), ']'), "nested " + std::to_string(depth));
  if (!yaml) at_value([] {
      std::string v = "1";
      for (int d = 0; d < 5000; ++d) v = "{\"k\":" + v + "}";
      return v;
    }(), "nested objects 5000");
  // Aliases (YAML): the bomb, a smaller one past the budget, a harmless one, an undefined alias.
  if (yaml) {
    for (int levels : {11, 6, 3}) at_value(alias_bomb(levels), "alias bomb " + std::to_string(levels) + " levels");
    at_value("*undefined", "undefined alias");
    at_value("&a [*a]", "self-referencing anchor");
  }
  return out;
}

struct Tally {
  int64_t cases = 0, accepted = 0, refused = 0;
  std::vector<std::string> failures;            // anything but success or UsageError
  std::vector<std::string> refused_samples;     // files refused, kept for the binary sample
};

// `sample`: keep some refused files for the binary (the --config cases).
void try_case(Tally& t, const std::string& label, const std::function<void()>& read, const std::string& path,
              bool sample = false) {
  ++t.cases;
  try {
    read();
    ++t.accepted;
  } catch (const UsageError&) {
    ++t.refused;
    if (sample && t.refused % 250 == 1) {  // a spread-out sample (~12) of refused files for the binary
      const auto keep = temp_path("refused_" + std::to_string(t.refused_samples.size()) + path.substr(path.rfind('.')));
      write_text(keep, read_text(path));
      t.refused_samples.push_back(keep);
    }
  } catch (const std::exception& e) {
    t.failures.push_back(label + ": " + typeid(e).name() + ": " + e.what());
  }
}
}  // namespace

TEST(MutationTest, EveryMutationOfTheRealFilesIsAcceptedOrRefusedWithExitTwo) {
  Tally t;
  const bool reset = runtime::reset_peak_rss();
  const int64_t rss_before = runtime::current_rss_bytes();
  uint32_t seed = 26;
  // accelerate YAML/JSON and DeepSpeed JSON: the corpus and the project's own example configs.
  auto configs = files_in(kSource + "/tests/configs/real/", {".yaml", ".json", ".conf"});  // .conf: JSON
  for (const auto& f : files_in(kSource + "/bench/configs/", {".yaml", ".json"})) configs.push_back(f);
  ASSERT_GE(configs.size(), 20u);
  for (const auto& file : configs) {
    const bool yaml = file.substr(file.size() - 5) == ".yaml";
    const auto path = temp_path(std::string("mutant") + (yaml ? ".yaml" : ".json"));
    for (const auto& c : mutations(read_text(file), yaml, seed++)) {
      write_text(path, c.text);
      try_case(t, file + " (" + c.what + ")", [&] { resolve_run({"--config", path, "--model", "tiny"}); }, path,
               /*sample=*/true);
    }
  }
  // The matrix reader (every cell is validated as `zerobench run` would parse it).
  for (const auto& file : files_in(kSource + "/bench/matrices/", {".yaml"})) {
    const auto path = temp_path("mutant_matrix.yaml");
    for (const auto& c : mutations(read_text(file), true, seed++)) {
      write_text(path, c.text);
      try_case(t, file + " (" + c.what + ")", [&] { bench::load_matrix(path); }, path);
    }
  }
  // A --model-dir config.json (transformers' LlamaConfig fields).
  const auto dir = test_support::make_clean_dir("mutant_model_dir");
  ASSERT_FALSE(dir.empty());
  const std::string llama =
      "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"hidden_size\": 64,\n  \"intermediate_size\": 176,\n"
      "  \"num_hidden_layers\": 2,\n  \"num_attention_heads\": 4,\n  \"num_key_value_heads\": 2,\n"
      "  \"vocab_size\": 256,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 10000.0,\n  \"hidden_act\": \"silu\",\n"
      "  \"tie_word_embeddings\": false,\n  \"model_type\": \"llama\"\n}\n";
  for (uint32_t s = 0; s < 4; ++s)
    for (const auto& c : mutations(llama, false, seed++)) {
      write_text(dir + "/config.json", c.text);
      try_case(t, "config.json (" + c.what + ")", [&] { models::checkpoint::read_model_dir_config(dir); },
               dir + "/config.json");
    }
  EXPECT_GE(t.cases, 2000);
  EXPECT_GT(t.accepted, 0) << "some mutations keep the file valid";
  EXPECT_GT(t.refused, 0);
  for (size_t i = 0; i < std::min<size_t>(t.failures.size(), 20); ++i) ADD_FAILURE() << t.failures[i];
  EXPECT_TRUE(t.failures.empty()) << t.failures.size() << " of " << t.cases << " cases ended in another exception";
  if (reset) {
    EXPECT_LT(runtime::hwm_rss_bytes() - rss_before, int64_t(64) << 20) << "memory stayed bounded";
  }
  std::cout << "mutation test: " << t.cases << " cases, " << t.accepted << " accepted, " << t.refused << " refused\n";

  // The sample through the real binary: exit 2 with one line, memory bounded (growth over a run
  // refused before reading anything, which holds libtorch's ~600 MB already).
  ASSERT_GE(t.refused_samples.size(), 10u);
  const auto base = run_child({zb::test_support::zerobench_bin(), "run", "--config", temp_path("no_such_file.yaml"), "--model", "tiny"});
  for (const auto& f : t.refused_samples) {
    const auto r = run_child({zb::test_support::zerobench_bin(), "run", "--config", f, "--model", "tiny", "--nproc", "2", "--steps", "1"});
    EXPECT_EQ(r.exit_code, 2) << f << ": " << r.output;
    EXPECT_EQ(lines(r.output), 1) << f << ": " << r.output;
    EXPECT_LT(r.max_rss_bytes - base.max_rss_bytes, int64_t(100) << 20) << f;
  }
}
