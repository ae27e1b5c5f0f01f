// test_lifecycle.cpp — the model lifecycle (docs/lifecycle.md): `--model-dir` loading of HF Llama
// folders (written by the project and by Python's `safetensors`), the three load strategies
// (all-ranks, rank0-broadcast, sharded) on every backend with their bytes read asserted exactly,
// and the per-rank `lifecycle.load` report section with the RSS shape the article describes.
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>

#include "backends/backend_info.hpp"
#include "backends/common/initial_weights.hpp"
#include "bench/crossval/crossval.hpp"
#include "bench/lifecycle/study_lifecycle.hpp"
#include "models/checkpoint/hf_llama.hpp"
#include "models/checkpoint/weight_loader.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

namespace ckpt = zb::models::checkpoint;
using zb::test_support::temp_path;

namespace {

// Checkpoints and model folders of this test process (~100 MB each for the RSS tests) are removed
// when it exits: ctest runs each test in its own process, so every run leaves /tmp as it found it.
struct RemoveScratchAtExit {
  ~RemoveScratchAtExit() { std::system(("rm -rf " + temp_path("") + "*").c_str()); }
} remove_scratch_at_exit;

std::string make_dir(const std::string& name) {
  const auto d = zb::test_support::make_clean_dir(name);
  EXPECT_FALSE(d.empty()) << "cannot create " << temp_path(name);
  return d;
}

zb::test_support::BinaryResult python(const std::string& code) {
  const auto script = temp_path("lifecycle_script.py");
  std::ofstream(script) << code;
  return zb::test_support::run_command(zb::bench::default_python() + " " + script + " 2>&1");
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Weights different from every engine's seeded init (seed 1234), so a load that silently fell
// back to the init would fail the comparisons.
std::vector<at::Tensor> checkpoint_units(const zb::models::ModelConfig& cfg, uint64_t seed = 7) {
  std::vector<at::Tensor> units;
  for (int u = 0; u < int(zb::models::unit_count(cfg)); ++u) units.push_back(zb::models::init_unit_flat(cfg, u, seed));
  return units;
}

int64_t model_numel(const zb::models::ModelConfig& cfg) {
  int64_t n = 0;
  for (int u = 0; u < int(zb::models::unit_count(cfg)); ++u) n += zb::backends::common::unit_numel(cfg, u);
  return n;
}

struct RankLoad {
  std::vector<at::Tensor> params;  // full_parameters() after the load
  ckpt::LoadStats stats;
};

// Builds `backend` on W thread-ranks from `dir` by `strategy`; every rank's full parameters and stats.
std::vector<RankLoad> load_on_ranks(const std::string& backend, const std::string& dir, const std::string& strategy,
                                    int w, const std::string& precision = "fp32") {
  zb::backends::EngineSpec base;
  base.model = ckpt::read_model_dir_config(dir);
  base.train.micro_batch = 1;
  base.train.seq_len = 16;
  base.precision = precision;
  std::vector<RankLoad> out(static_cast<size_t>(w));
  zb::test_support::run_ranks(w, [&](zb::runtime::World& world) {
    zb::backends::common::Comm side(world.side_channel());
    auto loader = std::make_shared<ckpt::CheckpointWeightLoader>(
        dir, base.model, ckpt::load_strategy_from_name(strategy), world.rank, world.device,
        [&side](at::Tensor& t) { side.broadcast(t, 0, "load"); });
    auto spec = base;
    spec.initial_weights = loader;
    auto engine = zb::backends::create_engine(backend, spec, world);
    auto& r = out[size_t(world.rank)];
    r.stats = loader->stats();
    loader->release();
    r.params = engine->full_parameters();
  });
  return out;
}

}  // namespace

// --model-dir reads config.json into the model shape; bad folders are named.
TEST(ModelDir, ConfigJsonGivesTheModelShape) {
  const auto cfg = zb::models::preset("tiny");
  const auto dir = make_dir("shape");
  ckpt::write_hf_llama(dir, cfg, checkpoint_units(cfg), at::kFloat);
  const auto back = ckpt::read_model_dir_config(dir);
  EXPECT_EQ(back.layers, cfg.layers);
  EXPECT_EQ(back.hidden, cfg.hidden);
  EXPECT_EQ(back.heads, cfg.heads);
  EXPECT_EQ(back.kv_heads, cfg.kv_heads);
  EXPECT_EQ(back.ffn, cfg.ffn);
  EXPECT_EQ(back.vocab, cfg.vocab);
  try {
    ckpt::read_model_dir_config(dir + "/nope");
    ADD_FAILURE() << "missing folder accepted";
  } catch (const zb::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
  // Granite's multipliers change the math: refused unless neutral.
  auto j = read_json(dir + "/config.json");
  j["model_type"] = "granite";
  j["residual_multiplier"] = 0.22;
  std::ofstream(dir + "/config.json") << j.dump();
  try {
    ckpt::read_model_dir_config(dir);
    ADD_FAILURE() << "granite residual_multiplier accepted";
  } catch (const zb::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("residual_multiplier"), std::string::npos) << e.what();
  }
  j["residual_multiplier"] = 1.0;
  j["embedding_multiplier"] = 1.0;
  j["logits_scaling"] = 1.0;
  std::ofstream(dir + "/config.json") << j.dump();
  EXPECT_EQ(ckpt::read_model_dir_config(dir).layers, cfg.layers);
}

// Every backend x strategy starts from exactly the checkpoint's weights, and reads exactly the
// bytes its strategy says: all-ranks the whole model on every rank, rank0-broadcast the whole
// model on rank 0 and nothing elsewhere (received instead), sharded each element once over the
// ranks (ddp: every rank needs every weight).
class LoadStrategies : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(LoadStrategies, StartFromTheCheckpointAndReadTheirBytes) {
  const auto& [backend, strategy] = GetParam();
  const int W = 2;
  const auto cfg = zb::models::preset("tiny");
  const auto dir = make_dir("strategies_" + backend + "_" + strategy);
  const auto units = checkpoint_units(cfg);
  ckpt::write_hf_llama(dir, cfg, units, at::kFloat, /*max_shard_bytes=*/1 << 20);  // sharded index
  const auto ranks = load_on_ranks(backend, dir, strategy, W);
  const int64_t model_bytes = model_numel(cfg) * 4;
  int64_t sum_read = 0;
  for (int r = 0; r < W; ++r) {
    const auto& rl = ranks[size_t(r)];
    ASSERT_EQ(rl.params.size(), units.size());
    for (size_t u = 0; u < units.size(); ++u) EXPECT_TRUE(at::equal(rl.params[u], units[u])) << "rank " << r << " unit " << u;
    sum_read += rl.stats.bytes_read;
    if (strategy == "all-ranks" || (strategy == "sharded" && backend == "ddp")) {
      EXPECT_EQ(rl.stats.bytes_read, model_bytes) << "rank " << r;
    } else if (strategy == "rank0-broadcast") {
      EXPECT_EQ(rl.stats.bytes_read, r == 0 ? model_bytes : 0) << "rank " << r;
      EXPECT_EQ(rl.stats.bytes_received, r == 0 ? 0 : model_bytes) << "rank " << r;
    }
  }
  if (strategy == "sharded" && backend != "ddp") {
    EXPECT_EQ(sum_read, model_bytes);  // each element read by exactly one rank
    for (int r = 0; r < W; ++r) EXPECT_LT(ranks[size_t(r)].stats.bytes_read, model_bytes) << "rank " << r;
  }
  if (strategy == "sharded" && backend == "fsdp") {
    // FSDP1's flat parameter per unit: numel padded to W chunks, rank r owns chunk r (_get_shard).
    for (int r = 0; r < W; ++r) {
      int64_t expect = 0;
      for (int u = 0; u < int(zb::models::unit_count(cfg)); ++u) {
        const int64_t n = zb::backends::common::unit_numel(cfg, u), chunk = (n + W - 1) / W;
        expect += std::max<int64_t>(0, std::min<int64_t>(int64_t(r + 1) * chunk, n) - int64_t(r) * chunk) * 4;
      }
      EXPECT_EQ(ranks[size_t(r)].stats.bytes_read, expect) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, LoadStrategies,
                         ::testing::Combine(::testing::Values("ddp", "fsdp", "fsdp2", "zero3"),
                                            ::testing::Values("all-ranks", "rank0-broadcast", "sharded")),
                         [](const auto& info) {
                           auto s = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (auto& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// A bf16 checkpoint (what HF ships) is read as bf16 bytes and upcast exactly; W=3 pads shards.
TEST(LoadBf16, CheckpointShardedOverThreeRanks) {
  const auto cfg = zb::models::preset("tiny");
  const auto dir = make_dir("bf16");
  const auto units = checkpoint_units(cfg);
  ckpt::write_hf_llama(dir, cfg, units, at::kBFloat16);
  for (const std::string backend : {"fsdp", "zero3", "fsdp2"}) {
    const auto ranks = load_on_ranks(backend, dir, "sharded", 3);
    int64_t sum_read = 0;
    for (const auto& rl : ranks) {
      for (size_t u = 0; u < units.size(); ++u)
        EXPECT_TRUE(at::equal(rl.params[u], units[u].to(at::kBFloat16).to(at::kFloat))) << backend << " unit " << u;
      sum_read += rl.stats.bytes_read;
    }
    EXPECT_EQ(sum_read, model_numel(cfg) * 2) << backend;
  }
}

// A folder written by Python's `safetensors` (HF names, its own tensor order) trains exactly as
// the project-written folder with the same weights, and not as the seeded init.
TEST(ModelDir, PythonWrittenFolderTrainsLikeTheProjectWrittenOne) {
  const auto cfg = zb::models::preset("tiny");
  const auto dir = make_dir("project_written");
  const auto pydir = make_dir("python_written");
  ckpt::write_hf_llama(dir, cfg, checkpoint_units(cfg), at::kFloat);
  const auto py = python(
      "import json, shutil, torch\n"
      "from safetensors.torch import load_file, save_file\n"
      "t = load_file('" + dir + "/model.safetensors')\n"
      "assert 'model.embed_tokens.weight' in t and 'lm_head.weight' in t\n"
      "assert 'model.layers.1.mlp.down_proj.weight' in t\n"
      "# two shards with an index, as save_pretrained writes larger models\n"
      "names = sorted(t)\n"
      "a, b = names[: len(names) // 2], names[len(names) // 2 :]\n"
      "save_file({k: t[k].contiguous() for k in a}, '" + pydir + "/model-00001-of-00002.safetensors', metadata={'format': 'pt'})\n"
      "save_file({k: t[k].contiguous() for k in b}, '" + pydir + "/model-00002-of-00002.safetensors', metadata={'format': 'pt'})\n"
      "wm = {k: 'model-00001-of-00002.safetensors' for k in a}\n"
      "wm.update({k: 'model-00002-of-00002.safetensors' for k in b})\n"
      "size = sum(v.numel() * v.element_size() for v in t.values())\n"
      "json.dump({'metadata': {'total_size': size}, 'weight_map': wm}, open('" + pydir + "/model.safetensors.index.json', 'w'))\n"
      "shutil.copy('" + dir + "/config.json', '" + pydir + "/config.json')\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  auto losses = [&](const std::string& extra, const std::string& out) {
    const auto r = zb::test_support::run_zerobench("run --backend fsdp --nproc 2 --steps 3 --warmup 1 --micro-batch 2 "
                                                   "--seq-len 16 --threads 1 --quiet --out " + out + " " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::vector<double> l;
    const auto report = read_json(out);
    for (const auto& s : report["steps"]) l.push_back(s["loss"].get<double>());
    return l;
  };
  const auto from_project = losses("--model-dir " + dir + " --load-strategy all-ranks", temp_path("proj.json"));
  const auto from_python = losses("--model-dir " + pydir + " --load-strategy sharded", temp_path("py.json"));
  const auto from_init = losses("--model tiny", temp_path("init.json"));
  ASSERT_EQ(from_project.size(), 3u);
  EXPECT_EQ(from_project, from_python);
  EXPECT_NE(from_project, from_init);
  const auto report = read_json(temp_path("py.json"));
  EXPECT_EQ(report["config"]["load"]["strategy"], "sharded");
  EXPECT_EQ(report["config"]["model"]["preset"], "hf");
  int64_t sum_read = 0;
  for (const auto& r : report["ranks"]) sum_read += r["lifecycle"]["load"]["bytes_read"].get<int64_t>();
  EXPECT_EQ(sum_read, model_numel(cfg) * 4);
}

TEST(ModelDir, BadFlagsExitTwoNamingTheValue) {
  const auto cfg = zb::models::preset("tiny");
  const auto dir = make_dir("bad_flags");
  ckpt::write_hf_llama(dir, cfg, checkpoint_units(cfg), at::kFloat);
  struct Case {
    std::string args, expect;
  };
  for (const auto& c : std::vector<Case>{
           {"--model-dir " + dir + " --load-strategy everywhere", "everywhere"},
           {"--load-strategy sharded", "--model-dir"},
           {"--model-dir " + dir + " --model small", "--model"},
           {"--model-dir " + dir + " --layers 3", "--layers"},
           {"--model-dir " + dir + "/missing", "config.json"},
       }) {
    const auto r = zb::test_support::run_zerobench("run --steps 2 --warmup 1 --quiet --out " + temp_path("bad.json") + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
  }
}

// The article's shape, measured on real processes (RSS is per process): rank0-broadcast's rank 0
// pays about the model's bytes more than rank 1; all-ranks makes every rank pay; sharded about
// 1/W each. RSS is noisy, so the bounds are loose; bytes_read is exact.
TEST(LoadRss, StrategiesShapeTheLoadPeak) {
  const auto cfg = zb::models::preset("small");  // ~29M parameters: ~116 MB fp32
  const auto dir = make_dir("rss_small");
  ckpt::write_hf_llama(dir, cfg, checkpoint_units(cfg), at::kFloat);
  const double model_bytes = double(model_numel(cfg) * 4);
  std::map<std::string, std::vector<nlohmann::json>> loads;
  for (const std::string strategy : {"all-ranks", "rank0-broadcast", "sharded"}) {
    const auto out = temp_path("rss_" + strategy + ".json");
    const auto r = zb::test_support::run_zerobench("run --backend fsdp --nproc 2 --steps 2 --warmup 1 --micro-batch 1 "
                                                   "--seq-len 16 --threads 1 --quiet --no-memory-check --out " + out +
                                                   " --model-dir " + dir + " --load-strategy " + strategy);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto report = read_json(out);
    for (const auto& rank : report["ranks"]) loads[strategy].push_back(rank["lifecycle"]["load"]);
  }
  auto increase = [](const nlohmann::json& l) {
    return double(l["peak_rss_bytes"].get<int64_t>() - l["rss_before_bytes"].get<int64_t>());
  };
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(loads["all-ranks"][size_t(r)]["bytes_read"].get<int64_t>(), int64_t(model_bytes));
    EXPECT_GT(increase(loads["all-ranks"][size_t(r)]), 0.8 * model_bytes) << "rank " << r;
    EXPECT_LT(increase(loads["sharded"][size_t(r)]), increase(loads["all-ranks"][size_t(r)]) - 0.25 * model_bytes)
        << "rank " << r;
  }
  EXPECT_EQ(loads["rank0-broadcast"][1]["bytes_read"].get<int64_t>(), 0);
  EXPECT_GT(increase(loads["rank0-broadcast"][0]) - increase(loads["rank0-broadcast"][1]), 0.5 * model_bytes);
  EXPECT_EQ(loads["sharded"][0]["bytes_read"].get<int64_t>() + loads["sharded"][1]["bytes_read"].get<int64_t>(),
            int64_t(model_bytes));
  for (const auto& [s, ls] : loads)
    for (size_t r = 0; r < ls.size(); ++r)
      std::printf("%-16s rank %zu  bytes_read %12lld  rss increase %8.1f MB  wall %.3f s\n", s.c_str(), r,
                  (long long)ls[r]["bytes_read"].get<int64_t>(), increase(ls[r]) / 1e6, ls[r]["wall_s"].get<double>());
}

// ---- checkpoints and exact resume ----

namespace {

std::vector<double> report_losses(const std::string& path) {
  std::vector<double> l;
  const auto report = read_json(path);
  for (const auto& s : report["steps"]) l.push_back(s["loss"].get<double>());
  return l;
}

const char* kTrain = "--nproc 2 --steps 6 --warmup 1 --micro-batch 2 --seq-len 16 --threads 1 --quiet --model tiny ";

zb::test_support::BinaryResult run_job(const std::string& args, const std::string& out) {
  return zb::test_support::run_zerobench("run " + std::string(kTrain) + "--out " + out + " " + args);
}

}  // namespace

// Resume after 3 of 6 steps gives the 6-step run's losses bitwise (CPU), and saving does not
// perturb the run: every backend, precision and state-dict type.
class ExactResume : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {};

TEST_P(ExactResume, LossesMatchTheUninterruptedRun) {
  const auto& [backend, precision, state_dict] = GetParam();
  const std::string job = "--backend " + backend + " --precision " + precision + " ";
  const std::string name = backend + "_" + precision + "_" + state_dict;
  const auto ref_out = temp_path("ref_" + name + ".json");
  auto r = run_job(job, ref_out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ref = report_losses(ref_out);
  ASSERT_EQ(ref.size(), 6u);

  // The interrupted job: checkpoints every 3 steps, rank 0 dies before step 4.
  const auto dir = make_dir("ckpt_" + name);
  r = run_job(job + "--checkpoint-dir " + dir + " --checkpoint-every 3 --state-dict " + state_dict +
                  " --fault-inject exit:0:4",
              temp_path("killed_" + name + ".json"));
  ASSERT_NE(r.exit_code, 0) << r.output;
  std::ifstream latest(dir + "/latest");
  std::string tag;
  latest >> tag;
  EXPECT_EQ(tag, backend == "zero3" ? "global_step3" : "step-3");

  const auto resumed_out = temp_path("resumed_" + name + ".json");
  r = run_job(job + "--resume " + dir, resumed_out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = read_json(resumed_out);
  const auto resumed = report_losses(resumed_out);
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[i], ref[3 + i]) << "step " << 3 + i;  // bitwise
  EXPECT_EQ(report["steps"][0]["step"], 3);
  for (const auto& rank : report["ranks"]) {
    const auto& c = rank["lifecycle"]["checkpoint"];
    EXPECT_EQ(c["resumed_from_step"], 3);
    EXPECT_GT(c["bytes_read"].get<int64_t>(), 0);
  }

  // A run that saves (every 2 steps) trains exactly as one that does not; its stats are reported.
  const auto saving_out = temp_path("saving_" + name + ".json");
  r = run_job(job + "--checkpoint-dir " + make_dir("saving_" + name) + " --checkpoint-every 2 --state-dict " + state_dict,
              saving_out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(report_losses(saving_out), ref);
  const auto saving = read_json(saving_out);
  for (const auto& rank : saving["ranks"]) {
    const auto& c = rank["lifecycle"]["checkpoint"];
    EXPECT_EQ(c["saves"], 3);
    if (state_dict == "sharded" || rank["rank"] == 0) {
      EXPECT_GT(c["bytes_written"].get<int64_t>(), 0);
    } else {
      EXPECT_EQ(c["bytes_written"].get<int64_t>(), 0);  // full: rank 0 writes everything
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryBackend, ExactResume,
    ::testing::Values(std::make_tuple("fsdp", "fp32", "sharded"), std::make_tuple("fsdp", "fp32", "full"),
                      std::make_tuple("fsdp", "mixed", "sharded"), std::make_tuple("fsdp", "low", "full"),
                      std::make_tuple("zero3", "fp32", "sharded"), std::make_tuple("zero3", "fp32", "full"),
                      std::make_tuple("zero3", "bf16", "sharded"), std::make_tuple("fsdp2", "fp32", "sharded"),
                      std::make_tuple("fsdp2", "fp32", "full"), std::make_tuple("fsdp2", "mixed", "sharded"),
                      std::make_tuple("fsdp2", "low", "full"), std::make_tuple("ddp", "fp32", "sharded"),
                      std::make_tuple("ddp", "fp32", "full"), std::make_tuple("ddp", "low", "sharded"),
                      std::make_tuple("ddp", "mixed", "full")),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" + std::get<2>(info.param);
    });

// A rank killed in the middle of a save leaves the previous checkpoint and `latest` whole; the
// job resumes from it exactly.
TEST(Checkpoint, RankKilledMidSaveLeavesThePreviousCheckpointWhole) {
  const auto dir = make_dir("killed_mid_save");
  const std::string job = "--backend fsdp --checkpoint-dir " + dir + " --checkpoint-every 2 --state-dict sharded ";
  auto r = run_job(job + "--fault-inject save-sigkill:1:4", temp_path("mid_save.json"));
  ASSERT_NE(r.exit_code, 0) << r.output;
  std::ifstream latest(dir + "/latest");
  std::string tag;
  latest >> tag;
  EXPECT_EQ(tag, "step-2");
  EXPECT_FALSE(std::ifstream(dir + "/step-4/metadata.json").good());  // never committed
  const auto meta = read_json(dir + "/step-2/metadata.json");
  EXPECT_EQ(meta["step"], 2);
  for (int r2 = 0; r2 < 2; ++r2) EXPECT_TRUE(std::ifstream(dir + "/step-2/rank-" + std::to_string(r2) + ".safetensors").good());

  const auto ref_out = temp_path("mid_save_ref.json");
  ASSERT_EQ(run_job("--backend fsdp", ref_out).exit_code, 0);
  const auto resumed_out = temp_path("mid_save_resumed.json");
  r = run_job("--backend fsdp --resume " + dir, resumed_out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ref = report_losses(ref_out), resumed = report_losses(resumed_out);
  ASSERT_EQ(resumed.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed[i], ref[2 + i]);
}

// Resuming another job's checkpoint exits 2 naming what differs.
TEST(Checkpoint, ResumeMismatchExitsTwoNamingIt) {
  const auto dir = make_dir("mismatch");
  auto r = run_job("--backend fsdp --checkpoint-dir " + dir + " --checkpoint-every 3", temp_path("mm.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string tag_dir = dir + "/step-3";
  struct Case {
    std::string args, expect;
  };
  for (const auto& c : std::vector<Case>{
           {"--backend zero3 --resume " + tag_dir, "backend"},
           {"--backend fsdp --precision mixed --resume " + tag_dir, "precision"},
           {"--backend fsdp --layers 3 --resume " + tag_dir, "model.layers"},
           {"--backend fsdp --grad-accum 2 --resume " + tag_dir, "train.grad_accum"},
           {"--backend fsdp --resume " + dir, "leaves none"},  // latest = step-6 of 6
           {"--backend fsdp --resume " + dir + "/nothing", "--resume"},
           {"--backend fsdp --state-dict partial --checkpoint-dir " + dir + " --checkpoint-every 2", "--state-dict"},
           {"--backend fsdp --checkpoint-every 2", "--checkpoint-dir"},
       }) {
    const auto m = run_job(c.args, temp_path("mm_bad.json"));
    EXPECT_EQ(m.exit_code, 2) << c.args << "\n" << m.output;
    EXPECT_NE(m.output.find(c.expect), std::string::npos) << c.args << "\n" << m.output;
  }
  // Another world size.
  const auto w = zb::test_support::run_zerobench("run --nproc 1 --steps 6 --warmup 1 --micro-batch 2 --seq-len 16 --quiet "
                                                 "--model tiny --backend fsdp --out " + temp_path("mm_w.json") +
                                                 " --resume " + tag_dir);
  EXPECT_EQ(w.exit_code, 2) << w.output;
  EXPECT_NE(w.output.find("world_size"), std::string::npos) << w.output;
}

// A full checkpoint is an HF Llama folder: Python's safetensors opens it with HF names and shapes,
// --model-dir loads it, and a zero3 sharded checkpoint consolidates (zero_to_fp32) to the same bytes.
TEST(Checkpoint, FullIsAnHfFolderAndZero3ShardedConsolidatesToIt) {
  const auto full_dir = make_dir("full_hf");
  const auto sharded_dir = make_dir("sharded_zero3");
  auto r = run_job("--backend zero3 --checkpoint-dir " + full_dir + " --checkpoint-every 3 --state-dict full",
                   temp_path("full_hf.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_job("--backend zero3 --checkpoint-dir " + sharded_dir + " --checkpoint-every 3 --state-dict sharded",
              temp_path("sharded_zero3.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cfg = zb::models::preset("tiny");
  const std::string hf = full_dir + "/global_step6";
  const auto py = python(
      "import json\n"
      "from safetensors.torch import load_file\n"
      "t = load_file('" + hf + "/model.safetensors')\n"
      "c = json.load(open('" + hf + "/config.json'))\n"
      "H, V, L, F = c['hidden_size'], c['vocab_size'], c['num_hidden_layers'], c['intermediate_size']\n"
      "kv = c['num_key_value_heads'] * (H // c['num_attention_heads'])\n"
      "want = {'model.embed_tokens.weight': [V, H], 'model.norm.weight': [H], 'lm_head.weight': [V, H]}\n"
      "for i in range(L):\n"
      "    p = f'model.layers.{i}.'\n"
      "    want.update({p + 'input_layernorm.weight': [H], p + 'post_attention_layernorm.weight': [H],\n"
      "                 p + 'self_attn.q_proj.weight': [H, H], p + 'self_attn.k_proj.weight': [kv, H],\n"
      "                 p + 'self_attn.v_proj.weight': [kv, H], p + 'self_attn.o_proj.weight': [H, H],\n"
      "                 p + 'mlp.gate_proj.weight': [F, H], p + 'mlp.up_proj.weight': [F, H], p + 'mlp.down_proj.weight': [H, F]})\n"
      "got = {k: list(v.shape) for k, v in t.items()}\n"
      "assert got == want, (sorted(set(got) ^ set(want)), [(k, got.get(k), want[k]) for k in want if got.get(k) != want[k]])\n"
      "assert c['architectures'] == ['LlamaForCausalLM'], c['architectures']\n"
      "print('ok', len(t))\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("ok " + std::to_string(3 + 9 * cfg.layers)), std::string::npos) << py.output;

  const auto consolidated = make_dir("consolidated");
  r = zb::test_support::run_zerobench("checkpoint consolidate --from " + sharded_dir + " --out " + consolidated);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = ckpt::SafetensorsCheckpoint::open(hf), b = ckpt::SafetensorsCheckpoint::open(consolidated);
  ASSERT_EQ(a.names(), b.names());
  for (const auto& n : a.names()) EXPECT_TRUE(at::equal(a.tensor(n), b.tensor(n))) << n;

  // The full checkpoint is a starting point for any backend (fsdp2 here).
  r = zb::test_support::run_zerobench("run --backend fsdp2 --nproc 2 --steps 2 --warmup 1 --micro-batch 2 --seq-len 16 "
                                      "--threads 1 --quiet --out " + temp_path("from_full.json") + " --model-dir " + hf +
                                      " --load-strategy sharded");
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// ---- zerobench study lifecycle ----

// The article's arithmetic: 70B x 4 bytes x 8 ranks ~ 2.2 TB when every rank loads; rank 0 alone
// (sync_module_states) ~ 280 GB fp32 / ~140 GB bf16 on one rank, the others one unit each.
TEST(LifecycleStudy, ProjectionIsTheArticlesArithmetic) {
  const auto cfg = zb::models::preset("llama2-70b");
  const int64_t n = zb::models::count_params(cfg).total;
  int64_t unit = 0;
  for (int u = 0; u < int(zb::models::unit_count(cfg)); ++u) unit = std::max(unit, zb::backends::common::unit_numel(cfg, u));
  const auto all = zb::bench::lifecycle::project_load_ram("all-ranks", n, unit, 4, 8);
  EXPECT_DOUBLE_EQ(all.node_bytes, 8.0 * 4.0 * double(n));
  EXPECT_GT(all.node_bytes, 2.0e12);
  const auto r0 = zb::bench::lifecycle::project_load_ram("rank0-broadcast", n, unit, 2, 8);
  EXPECT_DOUBLE_EQ(r0.rank0_bytes, 2.0 * double(n));
  EXPECT_NEAR(r0.rank0_bytes / 1e9, 138, 2);
  EXPECT_DOUBLE_EQ(r0.other_bytes, 2.0 * double(unit));
  const auto sh = zb::bench::lifecycle::project_load_ram("sharded", n, unit, 4, 8);
  EXPECT_DOUBLE_EQ(sh.rank0_bytes, 4.0 * double(n) / 8);
  EXPECT_THROW(zb::bench::lifecycle::project_load_ram("nope", n, unit, 4, 8), zb::UsageError);
}

TEST(LifecycleStudy, RunsEveryStrategyAndStateDictOnTiny) {
  const auto out = make_dir("study_lifecycle");
  const auto r = zb::test_support::run_zerobench("study lifecycle --models tiny --worlds 2 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = read_json(out + "/summary.json");
  ASSERT_EQ(s["cells"].size(), 6u);
  const double model_bytes = double(model_numel(zb::models::preset("tiny")) * 4);
  for (const auto& c : s["cells"]) {
    ASSERT_EQ(c["state"], "ok") << c.dump();
    const double r0 = c["bytes_read"]["rank0"], other = c["bytes_read"]["others_max"];
    if (c["load_strategy"] == "all-ranks") {
      EXPECT_EQ(r0, model_bytes);
      EXPECT_EQ(other, model_bytes);
    } else if (c["load_strategy"] == "rank0-broadcast") {
      EXPECT_EQ(r0, model_bytes);
      EXPECT_EQ(other, 0);
    } else {
      EXPECT_LT(r0, model_bytes);
      EXPECT_LT(other, model_bytes);
    }
    if (c["state_dict"] == "full") {
      EXPECT_GT(double(c["bytes_written"]["rank0"]), model_bytes);  // the HF folder
    }
  }
  EXPECT_EQ(s["projections_w8"].size(), 12u);
  EXPECT_NE(r.output.find("llama2-70b"), std::string::npos) << r.output;
}
