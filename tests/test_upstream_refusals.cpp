// test_upstream_refusals.cpp — nothing upstream accepts is refused as invalid. Every DeepSpeed
// value zerobench refuses with exit 2 because it is invalid (a bound, a type, an unknown or
// removed key, a setting DeepSpeed refuses when it builds the engine) is fed to DeepSpeed 0.19.8
// itself (scripts/crossval/upstream_config_verdicts.py through the setup venv's interpreter:
// DeepSpeedConfig, deepspeed.initialize, or torch.optim.AdamW for optimizer parameters), which
// must refuse it too; values zerobench refuses as not implemented must say so (upstream accepts
// them); values zerobench used to refuse although upstream accepts them now run, resolved as
// DeepSpeed reads them. A planted row (a value upstream accepts listed as invalid) shows the
// audit catches a false refusal.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "runtime/errors.hpp"
#include "tests/resolve_run.hpp"
#include "tests/run_binary.hpp"

using json = nlohmann::json;

namespace {

enum class Kind {
  kInvalid,      // zerobench refuses it as invalid: upstream must refuse it too
  kUnsupported,  // zerobench refuses it as not implemented: upstream accepts it
  kAccepted,     // upstream accepts it and zerobench runs it
};

struct Case {
  std::string id;
  Kind kind;
  std::string where;     // upstream_config_verdicts.py: config | initialize | adamw
  json config;           // a DeepSpeed JSON
  std::string fragment;  // in zerobench's refusal (kInvalid, kUnsupported)
};

json with_batch(json c) {
  if (!c.contains("train_batch_size") && !c.contains("train_micro_batch_size_per_gpu"))
    c["train_micro_batch_size_per_gpu"] = 1;
  if (!c.contains("zero_optimization")) c["zero_optimization"] = {{"stage", 3}};
  return c;
}
json z3(json keys) {
  keys["stage"] = 3;
  return with_batch({{"zero_optimization", keys}});
}
json fp16(json keys) {
  keys["enabled"] = true;
  return with_batch({{"fp16", keys}});
}
json adamw(json params) {
  params["torch_adam"] = true;
  return with_batch({{"optimizer", {{"type", "AdamW"}, {"params", params}}}});
}
json optimizer(json params) { return with_batch({{"optimizer", {{"type", "AdamW"}, {"params", params}}}}); }

std::vector<Case> cases() {
  using K = Kind;
  return {
      // zero_optimization (DeepSpeedZeroConfig, offload configs: pydantic, extra="forbid")
      {"zero-ge0", K::kInvalid, "config", z3({{"stage3_max_live_parameters", -1}}), "must be >= 0"},
      {"zero-gt0", K::kInvalid, "config", z3({{"reduce_bucket_size", 0}}), "must be >= 1"},
      {"zero-bool-text", K::kInvalid, "config", z3({{"overlap_comm", "maybe"}}), "is not true or false"},
      {"zero-bool-half", K::kInvalid, "config", z3({{"overlap_comm", 0.5}}), "is not true or false"},
      {"zero-int-fraction", K::kInvalid, "config", z3({{"stage3_prefetch_bucket_size", 1.5}}), "is not an integer"},
      {"zero-int-text", K::kInvalid, "config", z3({{"stage3_prefetch_bucket_size", "5e8"}}), "is not an integer"},
      {"zero-twice", K::kInvalid, "config", z3({{"stage3_max_live_parameters", 1}, {"max_live_parameters", 2}}),
       "given twice"},
      {"zero-unknown", K::kInvalid, "config", z3({{"bogus", 1}}), "not a DeepSpeed ZeRO setting"},
      {"zero-stage-negative", K::kInvalid, "config", with_batch({{"zero_optimization", {{"stage", -1}}}}),
       "must be >= 0"},
      {"zero-sub-group-negative", K::kInvalid, "config", z3({{"sub_group_size", -1}}), "must be >= 0"},
      {"zero-removed", K::kInvalid, "config", z3({{"mics_shard_size", 2}}), "removed from DeepSpeed"},
      {"zero-deprecated-beside-new", K::kInvalid, "config",
       z3({{"cpu_offload", true}, {"offload_optimizer", {{"device", "cpu"}}}}), "together"},
      {"offload-device", K::kInvalid, "config", z3({{"offload_optimizer", {{"device", "gpu"}}}}),
       "is not none, cpu or nvme"},
      {"offload-ratio-high", K::kInvalid, "config", z3({{"offload_optimizer", {{"device", "cpu"}, {"ratio", 1.5}}}}),
       "must be in [0, 1]"},
      {"offload-ratio-negative", K::kInvalid, "config",
       z3({{"offload_optimizer", {{"device", "cpu"}, {"ratio", -0.1}}}}), "must be in [0, 1]"},
      {"offload-extra", K::kInvalid, "config", z3({{"offload_param", {{"device", "cpu"}, {"bogus", 1}}}}),
       "extra keys are forbidden"},
      // top level, bf16, fp16 (DeepSpeedConfig, DeepSpeedBF16Config, DeepSpeedFP16Config)
      {"compile-extra", K::kInvalid, "config", with_batch({{"compile", {{"backend", "inductor"}, {"disable", false}}}}),
       "not a DeepSpeed 0.19.8 compile setting"},
      {"top-removed", K::kInvalid, "config", with_batch({{"sparse_attention", json::object()}}), "removed from DeepSpeed"},
      {"bf16-not-section", K::kInvalid, "config", with_batch({{"bf16", true}}), "is not a section"},
      {"bf16-extra", K::kInvalid, "config", with_batch({{"bf16", {{"enabled", true}, {"bogus", 1}}}}),
       "forbids extra keys"},
      {"fp16-and-bf16", K::kInvalid, "config",
       with_batch({{"fp16", {{"enabled", true}}}, {"bf16", {{"enabled", true}}}}), "both true"},
      {"batch-mismatch", K::kInvalid, "config",
       with_batch({{"train_batch_size", 8}, {"train_micro_batch_size_per_gpu", 3}, {"gradient_accumulation_steps", 2}}),
       "train_batch_size 8"},
      {"batch-missing", K::kInvalid, "config", json{{"zero_optimization", {{"stage", 3}}}}, "both missing"},
      {"comm-dtype", K::kInvalid, "config", with_batch({{"communication_data_type", "int8"}}),
       "is not fp16, bf16 or fp32"},
      {"allreduce-op", K::kInvalid, "config", with_batch({{"gradient_allreduce_op", "avg"}}), "is not mean or sum"},
      {"allreduce-sum-stage3", K::kInvalid, "config", with_batch({{"gradient_allreduce_op", "sum"}}),
       "refuses it with ZeRO stage 3"},
      {"fp16-loss-scale-negative", K::kInvalid, "config", fp16({{"loss_scale", -1}}), "must be >= 0"},
      {"fp16-loss-scale-bool", K::kInvalid, "config", fp16({{"loss_scale", true}}), "must be a number"},
      {"fp16-window-bool", K::kInvalid, "config", fp16({{"loss_scale_window", true}}), "not bool"},
      {"fp16-window-zero-dynamic", K::kInvalid, "config", fp16({{"loss_scale_window", 0}}), "must be > 0"},
      {"fp16-min-scale-zero", K::kInvalid, "config", fp16({{"min_loss_scale", 0}}), "must be > 0"},
      {"fp16-extra", K::kInvalid, "config", fp16({{"bogus", 1}}), "forbids extra keys"},
      // refused when DeepSpeed builds the engine (stage3.py asserts; engine.py _configure_basic_optimizer)
      {"predivide", K::kInvalid, "initialize", with_batch({{"gradient_predivide_factor", 2.0}}),
       "refuses a factor other than 1.0"},
      {"prescale", K::kInvalid, "initialize", with_batch({{"prescale_gradients", true}}),
       "refuses pre-scaled gradients"},
      {"optimizer-max-grad-norm", K::kInvalid, "initialize", adamw({{"lr", 1e-3}, {"max_grad_norm", 1.0}}),
       "use gradient_clipping"},
      // the optimizer's own constructor (torch.optim.AdamW, torch_adam)
      {"adamw-betas-one", K::kInvalid, "adamw", adamw({{"betas", {0.9}}}), "is not [beta1, beta2]"},
      {"adamw-beta-one", K::kInvalid, "adamw", adamw({{"betas", {1.0, 0.999}}}), "each beta must be in [0, 1)"},
      {"adamw-lr", K::kInvalid, "adamw", adamw({{"lr", -1}}), "must be >= 0"},
      {"adamw-eps", K::kInvalid, "adamw", adamw({{"eps", -1}}), "must be >= 0"},
      {"adamw-weight-decay", K::kInvalid, "adamw", adamw({{"weight_decay", -1}}), "must be >= 0"},
      {"adamw-unknown", K::kInvalid, "adamw", adamw({{"foo", 1}}), "not a parameter"},
      // upstream accepts; zerobench says it does not implement it
      {"bf16-master", K::kUnsupported, "config",
       with_batch({{"bf16", {{"enabled", true}, {"bf16_master_weights_and_grads", true}}}}), "not implemented"},
      {"grad-accum-int8", K::kUnsupported, "config", with_batch({{"data_types", {{"grad_accum_dtype", "int8"}}}}),
       "not implemented"},
      {"persistence-cap", K::kUnsupported, "config", z3({{"model_persistence_threshold", 100}}), "not implemented"},
      {"offload-nvme", K::kUnsupported, "config", z3({{"offload_param", {{"device", "nvme"}, {"nvme_path", "/tmp"}}}}),
       "not implemented"},
      {"offload-ratio-partial", K::kUnsupported, "config",
       z3({{"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.5}}}}), "not implemented"},
      {"fetch-all-reduce", K::kUnsupported, "config", z3({{"stage3_use_all_reduce_for_fetch_params", true}}),
       "not implemented"},
      {"reduce-scatter-off", K::kUnsupported, "config", z3({{"reduce_scatter", false}}),
       "zerobench implements the reduce-scatter path only"},
      {"autotp", K::kUnsupported, "config", with_batch({{"tensor_parallel", {{"autotp_size", 2}}}}), "not implemented"},
      // upstream accepts, and so does zerobench (each was refused before issue 35)
      {"clip-negative", K::kAccepted, "config", with_batch({{"gradient_clipping", -1.0}}), ""},
      {"fp16-hysteresis-zero", K::kAccepted, "config", fp16({{"hysteresis", 0}}), ""},
      {"fp16-window-zero-static", K::kAccepted, "config", fp16({{"loss_scale", 128}, {"loss_scale_window", 0}}), ""},
      {"fp16-auto-dropped", K::kAccepted, "config", fp16({{"loss_scale", "auto"}, {"initial_scale_power", "auto"}}), ""},
      {"bf16-auto-dropped", K::kAccepted, "config",
       with_batch({{"bf16", {{"enabled", true}, {"bf16_master_weights_and_grads", "auto"}}}}), ""},
      {"zero-bool-float", K::kAccepted, "config", z3({{"overlap_comm", 1.0}}), ""},
      {"zero-int-bool", K::kAccepted, "config", z3({{"stage3_max_live_parameters", true}}), ""},
      {"zero-field-name", K::kAccepted, "config", z3({{"max_live_parameters", 0}, {"prefetch_bucket_size", 0}}), ""},
      // DeepSpeed's own optimizer switches, tested with Python's truthiness (engine.py
      // get_optimizer_configuration `if torch_adam:`); "torch_impl" is in users' files
      {"torch-adam-string", K::kAccepted, "initialize", optimizer({{"lr", 1e-3}, {"torch_adam", "torch_impl"}}), ""},
      {"torch-adam-false-string", K::kAccepted, "initialize", optimizer({{"lr", 1e-3}, {"torch_adam", "false"}}), ""},
      {"adam-w-mode-int", K::kAccepted, "initialize", optimizer({{"lr", 1e-3}, {"torch_adam", 1}, {"adam_w_mode", 0}}),
       ""},
      // torch.optim.AdamW's implementation keywords: with torch_adam DeepSpeed pops foreach and
      // passes fused on; without it they reach FusedAdam, which takes neither (TypeError), and
      // torch refuses both true.
      {"torch-adam-foreach", K::kAccepted, "initialize", optimizer({{"lr", 1e-3}, {"torch_adam", true}, {"foreach", false}}),
       ""},
      {"torch-adam-fused", K::kAccepted, "initialize", optimizer({{"lr", 1e-3}, {"torch_adam", true}, {"fused", true}}), ""},
      {"foreach-without-torch-adam", K::kInvalid, "initialize", optimizer({{"lr", 1e-3}, {"foreach", true}}),
       "unexpected keyword argument 'foreach'"},
      {"fused-and-foreach", K::kInvalid, "initialize",
       optimizer({{"lr", 1e-3}, {"torch_adam", true}, {"fused", true}, {"foreach", true}}), "cannot be `True` together"},
  };
}

// zerobench's verdict: "" when `zerobench run --config FILE --nproc 1` resolves, else its message.
std::string zerobench_refusal(const Case& c) {
  const auto path = zb::test_support::temp_path("upstream_refusal_" + c.id + ".json");
  std::ofstream(path) << c.config.dump(1);
  try {
    zb::test_support::resolve_run({"--config", path, "--nproc", "1", "--model", "tiny"});
  } catch (const zb::UsageError& e) {
    return e.what();
  }
  return "";
}

// DeepSpeed's verdict on every case, in one interpreter.
json upstream_verdicts(const std::vector<Case>& all) {
  json in = json::array();
  for (const auto& c : all) in.push_back({{"id", c.id}, {"where", c.where}, {"config", c.config}});
  const auto file = zb::test_support::temp_path("upstream_refusal_cases.json");
  std::ofstream(file) << in.dump();
  const auto r = zb::test_support::run_command(std::string(ZEROBENCH_PYTHON_EXE) + " " + zb::bench::source_dir() +
                                               "/scripts/crossval/upstream_config_verdicts.py < " + file + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto at = r.output.find("{\"");
  return at == std::string::npos ? json::object() : json::parse(r.output.substr(at));
}

// Every way zerobench's verdict and upstream's may disagree with the case's kind, one line each.
std::vector<std::string> audit(const std::vector<Case>& all, const json& upstream) {
  std::vector<std::string> problems;
  for (const auto& c : all) {
    const std::string ours = zerobench_refusal(c);
    const json theirs = upstream.value(c.id, json::object());
    const bool they_refuse = theirs.value("verdict", std::string()) == "rejects";
    if (!theirs.contains("verdict")) problems.push_back(c.id + ": no upstream verdict");
    switch (c.kind) {
      case Kind::kInvalid:
        if (ours.find(c.fragment) == std::string::npos)
          problems.push_back(c.id + ": zerobench's refusal lacks '" + c.fragment + "': '" + ours + "'");
        if (!they_refuse) problems.push_back(c.id + ": zerobench refuses it as invalid but DeepSpeed accepts it");
        break;
      case Kind::kUnsupported:
        if (ours.find(c.fragment) == std::string::npos)
          problems.push_back(c.id + ": zerobench's refusal lacks '" + c.fragment + "': '" + ours + "'");
        if (they_refuse)
          problems.push_back(c.id + ": DeepSpeed refuses it (" + theirs.value("error", std::string()) +
                             "): zerobench's refusal should say it is invalid");
        break;
      case Kind::kAccepted:
        if (!ours.empty()) problems.push_back(c.id + ": zerobench refuses what DeepSpeed accepts: " + ours);
        if (they_refuse) problems.push_back(c.id + ": DeepSpeed refuses it: " + theirs.value("error", std::string()));
        break;
    }
  }
  return problems;
}

}  // namespace

TEST(UpstreamRefusals, EveryDeepSpeedValueRefusedAsInvalidIsRefusedByDeepSpeedToo) {
  const auto all = cases();
  const auto upstream = upstream_verdicts(all);
  ASSERT_EQ(upstream.size(), all.size()) << upstream.dump(1);
  for (const auto& p : audit(all, upstream)) ADD_FAILURE() << p;
}

// The values accepted now resolve as DeepSpeed reads them.
TEST(UpstreamRefusals, ValuesUpstreamAcceptsResolveAsDeepSpeedReadsThem) {
  auto resolve = [](const json& config) {
    const auto path = zb::test_support::temp_path("upstream_accepts.json");
    std::ofstream(path) << config.dump();
    return zb::test_support::resolve_run({"--config", path, "--nproc", "1", "--model", "tiny"}).spec;
  };
  EXPECT_EQ(resolve(with_batch({{"gradient_clipping", -1.0}})).train.grad_clip, 0.0);  // clips only when > 0
  EXPECT_EQ(resolve(z3({{"stage3_max_live_parameters", true}})).options.json().at("stage3_max_live_parameters"), 1);
  EXPECT_EQ(resolve(z3({{"overlap_comm", 0.0}})).options.json().at("overlap_comm"), false);
  // torch_adam picks torch.optim.AdamW, whose weight_decay default is 0.01 (FusedAdam's is 0): a
  // truthy string picks it, as DeepSpeed's `if torch_adam:` does, even "false".
  EXPECT_EQ(resolve(optimizer({{"torch_adam", "torch_impl"}})).train.weight_decay, 1e-2);
  EXPECT_EQ(resolve(optimizer({{"torch_adam", "false"}})).train.weight_decay, 1e-2);
  EXPECT_EQ(resolve(optimizer({{"torch_adam", 1}})).train.weight_decay, 1e-2);
  EXPECT_EQ(resolve(optimizer({{"torch_adam", false}})).train.weight_decay, 0.0);
  EXPECT_EQ(resolve(optimizer({{"torch_adam", ""}})).train.weight_decay, 0.0);
  EXPECT_EQ(resolve(optimizer({{"torch_adam", 0}})).train.weight_decay, 0.0);
  // Adam with adam_w_mode 0: L2 torch.optim.Adam, whose weight_decay default is 0.
  EXPECT_EQ(resolve(with_batch({{"optimizer", {{"type", "Adam"}, {"params", {{"torch_adam", true}, {"adam_w_mode", 0}}}}}}))
                .train.weight_decay,
            0.0);
  const auto field_names = resolve(z3({{"max_live_parameters", 7}, {"max_reuse_distance", 9}}));
  EXPECT_EQ(field_names.options.json().at("stage3_max_live_parameters"), 7);
  EXPECT_EQ(field_names.options.json().at("stage3_max_reuse_distance"), 9);
}

// The audit catches a false refusal: a value DeepSpeed accepts (gradient_clipping -1), listed as
// invalid with zerobench's old refusal, is reported.
TEST(UpstreamRefusals, APlantedFalseRefusalIsCaught) {
  std::vector<Case> planted = {
      {"planted-clip", Kind::kInvalid, "config", with_batch({{"gradient_clipping", -1.0}}), "must be >= 0"}};
  const auto problems = audit(planted, upstream_verdicts(planted));
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[1].find("planted-clip: zerobench refuses it as invalid but DeepSpeed accepts it"),
            std::string::npos)
      << problems[1];
}
