// `zerobench translate` (issue 25): round trips FSDP -> DeepSpeed -> FSDP and DeepSpeed -> FSDP ->
// DeepSpeed keep the resolved options the guide maps exactly (and the keys that are not exact are
// named here); every file of tests/configs/real/ translates to the other framework with every
// leaf key in the mapping (the checker is shown to catch a dropped entry); a translation of a
// runnable file resolves as `zerobench run --config` resolves it, or the mapping names the key
// zerobench refuses; model-state bytes the guide calls equal are equal, or the mapping says why not.
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>

#include "backends/backend_info.hpp"
#include "backends/engine.hpp"
#include "bench/run/config_resolve.hpp"
#include "bench/translate/translate.hpp"
#include "runtime/errors.hpp"
#include "tests/resolve_run.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using namespace zb::bench::translate;
using nlohmann::json;
using test_support::temp_path;

namespace {
const std::string kSource = zb::bench::source_dir();
const std::string kCorpus = kSource + "/tests/configs/real/";

std::string write_translation(const Translation& t, const std::string& name) {
  const auto path = temp_path(name + (t.target == Target::kDeepSpeed ? ".json" : ".yaml"));
  std::ofstream(path) << render_config(t);
  return path;
}

bench::RunOptions::Resolved resolve(const std::string& path) {
  return test_support::resolve_run({"--config", path, "--model", "tiny", "--nproc", "2"});
}

// The test's own leaf walk (not translate's): scalars, arrays and empty mappings are leaves.
void leaves(const json& j, const std::string& prefix, std::vector<std::string>& out) {
  if (!j.is_object() || j.empty()) {
    out.push_back(prefix);
    return;
  }
  for (const auto& [k, v] : j.items()) leaves(v, prefix.empty() ? k : prefix + "." + k, out);
}
std::vector<std::string> source_leaf_keys(const std::string& path) {
  std::vector<std::string> out;
  leaves(bench::read_config_tree(path, "test"), "", out);
  return out;
}

std::vector<std::string> corpus() {
  std::vector<std::string> files;
  if (DIR* d = opendir(kCorpus.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      const std::string ext = n.size() > 5 ? n.substr(n.size() - 5) : "";
      if (ext == ".yaml" || ext == ".json" || ext == ".conf") files.push_back(n);  // .conf: open-instruct's JSON
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

const MappingEntry* entry(const Translation& t, const std::string& source_key) {
  for (const auto& e : t.mapping)
    if (e.source_key == source_key) return &e;
  return nullptr;
}

// Options the guide maps exactly must come back unchanged; the others may differ, and are named.
void expect_round_trip(const std::string& what, const bench::RunOptions::Resolved& a,
                       const bench::RunOptions::Resolved& c, const std::set<std::string>& not_exact,
                       std::set<std::string>* differed) {
  EXPECT_EQ(a.backend, c.backend) << what;
  EXPECT_EQ(a.spec.precision, c.spec.precision) << what;
  const nlohmann::json ao = a.spec.options.json(), co = c.spec.options.json();
  for (const auto& [k, v] : ao.items()) {
    const bool same = co.contains(k) && co[k] == v;
    if (not_exact.count(k)) {
      if (!same) differed->insert(k);
    } else {
      EXPECT_TRUE(same) << what << ": option " << k << " " << v.dump() << " came back as "
                        << (co.contains(k) ? co[k].dump() : "(absent)");
    }
  }
}
}  // namespace

// FSDP -> DeepSpeed -> FSDP. Exact in the guide: sharding strategy <-> stage, offload, state dict
// type <-> 16-bit gather on save, mixed_precision <-> bf16.enabled (the precision). Not exact
// (named): prefetch policy (DeepSpeed's is a budget), loading flags (zero.Init is implied by
// stage 3), wrap policy, use_orig_params, activation checkpointing (no DeepSpeed JSON key).
TEST(TranslateRoundTrip, FsdpToDeepSpeedToFsdpKeepsTheExactOptions) {
  const std::set<std::string> not_exact = {"backward_prefetch", "forward_prefetch", "sync_module_states",
                                           "cpu_ram_efficient_loading", "auto_wrap_policy", "use_orig_params",
                                           "activation_checkpointing"};
  std::set<std::string> differed;
  for (const std::string& f : {kSource + "/bench/configs/accelerate_fsdp_blog.yaml", kCorpus + "trl_fsdp1.yaml",
                              kCorpus + "alignment-handbook_fsdp.yaml", kCorpus + "llamafactory_fsdp_config.yaml",
                              kCorpus + "peft_sft_fsdp_config.yaml", kCorpus + "accelerate_template_fsdp.yaml",
                              kCorpus + "accelerate_tests_latest_fsdp.yaml"}) {
    SCOPED_TRACE(f);
    const auto a = resolve(f);
    const auto to_ds = translate_file(f, Target::kDeepSpeed);
    EXPECT_EQ(to_ds.target_refusal, "");
    const auto ds_path = write_translation(to_ds, "rt_ds");
    const auto b = resolve(ds_path);
    EXPECT_EQ(b.backend, "zero3");
    EXPECT_EQ(b.spec.precision, a.spec.precision == "mixed" ? "bf16" : "fp32");
    // The training settings FSDP leaves to the script come back from the same flags ("auto").
    EXPECT_EQ(b.spec.train.micro_batch, a.spec.train.micro_batch);
    EXPECT_EQ(b.spec.train.grad_accum, a.spec.train.grad_accum);
    EXPECT_EQ(b.spec.train.grad_clip, a.spec.train.grad_clip);
    const auto back = translate_file(ds_path, Target::kFsdp);
    const auto c = resolve(write_translation(back, "rt_fsdp"));
    expect_round_trip(f, a, c, not_exact, &differed);
    // The exact keys are "mapped" in the mapping; the guide's approximate ones are not.
    if (const auto* e = entry(to_ds, "fsdp_config.fsdp_sharding_strategy")) { EXPECT_EQ(e->kind, Kind::kMapped); }
    if (const auto* e = entry(to_ds, "fsdp_config.fsdp_state_dict_type")) { EXPECT_EQ(e->kind, Kind::kMapped); }
    if (const auto* e = entry(to_ds, "fsdp_config.fsdp_backward_prefetch")) { EXPECT_EQ(e->kind, Kind::kApproximate); }
    if (const auto* e = entry(to_ds, "fsdp_config.fsdp_use_orig_params")) { EXPECT_EQ(e->kind, Kind::kNoCounterpart); }
    ASSERT_NE(entry(to_ds, "mixed_precision"), nullptr);
    EXPECT_EQ(entry(to_ds, "mixed_precision")->kind, Kind::kMapped);
  }
  // What did differ, for the record (a subset of not_exact by construction of the check above).
  std::string list;
  for (const auto& k : differed) list += k + " ";
  std::cout << "[ round trip FSDP->DS->FSDP: not exact and changed: " << list << "]\n";
  EXPECT_TRUE(differed.count("forward_prefetch"));  // false -> DeepSpeed's two-way prefetch -> true
}

TEST(TranslateRoundTrip, Fsdp2ToDeepSpeedToFsdp2KeepsReshardAndPrecision) {
  const std::set<std::string> not_exact = {"grouping", "auto_wrap_policy", "cpu_ram_efficient_loading",
                                           "state_dict_type", "transformer_layer_cls_to_wrap",
                                           "activation_checkpointing"};
  std::set<std::string> differed;
  for (const std::string& f : {kSource + "/bench/configs/accelerate_fsdp2.yaml", kCorpus + "trl_fsdp2.yaml"}) {
    SCOPED_TRACE(f);
    const auto a = resolve(f);
    const auto ds_path = write_translation(translate_file(f, Target::kDeepSpeed), "rt2_ds");
    EXPECT_EQ(resolve(ds_path).backend, "zero3");
    const auto c = resolve(write_translation(translate_file(ds_path, Target::kFsdp2), "rt2_fsdp2"));
    expect_round_trip(f, a, c, not_exact, &differed);
    EXPECT_EQ(c.spec.options["reshard_after_forward"], a.spec.options["reshard_after_forward"]);
  }
}

// DeepSpeed -> FSDP -> DeepSpeed. Exact: stage <-> strategy, bf16 <-> mixed_precision, offload,
// 16-bit gather <-> state dict type. Not exact (named): the ZeRO tuning knobs FSDP has no key for
// come back as the translation writes them ("auto" buckets, persistence 0), and the batch settings
// a DeepSpeed JSON carries (FSDP leaves them to the script: "auto", i.e. the flags).
TEST(TranslateRoundTrip, DeepSpeedToFsdpToDeepSpeedKeepsTheExactOptions) {
  const std::set<std::string> not_exact = {"stage3_param_persistence_threshold", "reduce_bucket_size",
                                           "stage3_prefetch_bucket_size", "stage3_max_live_parameters",
                                           "stage3_max_reuse_distance", "sub_group_size", "overlap_comm",
                                           "contiguous_gradients", "communication_data_type", "grad_accum_dtype"};
  std::set<std::string> differed;
  for (const std::string& f :
       {kSource + "/bench/configs/deepspeed_zero3_blog.json", kCorpus + "llamafactory_ds_z3_config.json",
        kCorpus + "axolotl_zero3.json", kCorpus + "axolotl_zero3_bf16.json",
        kCorpus + "deepspeedexamples_bf16_master_weight_baseline.json",
        kCorpus + "deepspeedexamples_autotuning_ds_config_z3.json", kCorpus + "trl_zero3.yaml",
        kCorpus + "alignment-handbook_zero3.yaml", kCorpus + "peft_sft_deepspeed_config.yaml"}) {
    SCOPED_TRACE(f);
    const auto a = resolve(f);
    const auto to_fsdp = translate_file(f, Target::kFsdp);
    EXPECT_EQ(to_fsdp.target_refusal, "");
    const auto fsdp_path = write_translation(to_fsdp, "rt_fsdp_src");
    const auto b = resolve(fsdp_path);
    EXPECT_EQ(b.backend, "fsdp");
    EXPECT_EQ(b.spec.options["sharding_strategy"], "FULL_SHARD");
    EXPECT_EQ(b.spec.precision, a.spec.precision == "bf16" ? "mixed" : "fp32");
    const auto c = resolve(write_translation(translate_file(fsdp_path, Target::kDeepSpeed), "rt_ds_back"));
    expect_round_trip(f, a, c, not_exact, &differed);
  }
  std::string list;
  for (const auto& k : differed) list += k + " ";
  std::cout << "[ round trip DS->FSDP->DS: not exact and changed: " << list << "]\n";
  EXPECT_TRUE(differed.count("stage3_param_persistence_threshold"));  // "auto" (10*hidden) -> 0 (FSDP keeps none whole)
}

// Every real file translates to the other framework; every leaf key of the file (and of a
// deepspeed_config_file it names) is in the mapping with a reason.
TEST(TranslateCorpus, EveryRealFileTranslatesWithEveryKeyInTheMapping) {
  const auto files = corpus();
  ASSERT_GE(files.size(), 30u);
  int translations = 0;
  for (const auto& name : files) {
    SCOPED_TRACE(name);
    const auto expected = source_leaf_keys(kCorpus + name);
    int ok = 0;
    for (const auto to : {Target::kDeepSpeed, Target::kFsdp, Target::kFsdp2}) {
      Translation t;
      try {
        t = translate_file(kCorpus + name, to);
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("already"), std::string::npos) << e.what();  // its own framework only
        continue;
      }
      ++ok, ++translations;
      EXPECT_EQ(unmapped_keys(t.mapping, expected), std::vector<std::string>{}) << to_string(to);
      for (const auto& e : t.mapping) {
        EXPECT_FALSE(e.reason.empty()) << e.source_key << " -> " << e.target_key;
        if (e.kind == Kind::kMapped || e.kind == Kind::kAdded) { EXPECT_FALSE(e.target_key.empty()) << e.source_key; }
      }
      // Runnable source: the translation resolves too, or a mapping entry names what zerobench
      // refuses in it (e.g. NVMe offload); and a refusal the mapping names is a real one.
      bool named = false;
      for (const auto& e : t.mapping) named = named || !e.refused.empty();
      if (t.source_refusal.empty() && !t.target_refusal.empty()) { EXPECT_TRUE(named) << t.target_refusal; }
      if (named) { EXPECT_NE(t.target_refusal, "") << to_string(to); }
      EXPECT_FALSE(render_config(t).empty());
    }
    EXPECT_GE(ok, 1);
  }
  EXPECT_GE(translations, 40);
}

// The checker catches a dropped entry (the planted fault).
TEST(TranslateCorpus, TheCheckerCatchesADroppedMappingEntry) {
  const auto f = kSource + "/bench/configs/accelerate_fsdp_blog.yaml";
  auto t = translate_file(f, Target::kDeepSpeed);
  const auto expected = source_leaf_keys(f);
  ASSERT_EQ(unmapped_keys(t.mapping, expected), std::vector<std::string>{});
  t.mapping.erase(std::remove_if(t.mapping.begin(), t.mapping.end(),
                                 [](const MappingEntry& e) { return e.source_key == "fsdp_config.fsdp_sharding_strategy"; }),
                  t.mapping.end());
  EXPECT_EQ(unmapped_keys(t.mapping, expected), std::vector<std::string>{"fsdp_config.fsdp_sharding_strategy"});
}

// Files zerobench refuses to run still translate; the mapping says which target keys it refuses.
TEST(TranslateCorpus, UnrunnableSourcesTranslateAndTheRefusedKeysAreNamed) {
  // CPU offload runs on both sides (issue 23): FSDP1 CPUOffload <-> ZeRO-3 offload_param +
  // offload_optimizer cpu, as the accelerate guide pairs them; nothing refused either way.
  const auto off = translate_file(kCorpus + "llamafactory_fsdp_config_offload.yaml", Target::kDeepSpeed);
  EXPECT_EQ(off.source_refusal, "");
  EXPECT_EQ(off.config["zero_optimization"]["offload_param"]["device"], "cpu");
  EXPECT_EQ(off.config["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_EQ(entry(off, "fsdp_config.fsdp_offload_params")->refused, "");
  EXPECT_EQ(off.target_refusal, "") << off.target_refusal;

  const auto z2 = translate_file(kCorpus + "llamafactory_ds_z2_config.json", Target::kFsdp);
  EXPECT_EQ(z2.source_refusal, "");  // zero2 runs it (issue 24)
  EXPECT_EQ(z2.config["fsdp_config"]["fsdp_sharding_strategy"], "SHARD_GRAD_OP");
  EXPECT_EQ(entry(z2, "zero_optimization.stage")->kind, Kind::kMapped);
  EXPECT_EQ(z2.target_refusal, "");  // zerobench's fsdp runs SHARD_GRAD_OP

  // accelerate's tp_hsdp.yaml (refused: tp 2): the mesh's data-parallel sizes are the HSDP sentence,
  // its tensor- and context-parallel sizes say what they are (they had the HSDP sentence too).
  const auto tp = translate_file(kCorpus + "accelerate_tp_hsdp.yaml", Target::kDeepSpeed);
  EXPECT_NE(tp.source_refusal.find("parallelism_config_tp_size 2"), std::string::npos) << tp.source_refusal;
  EXPECT_NE(entry(tp, "parallelism_config.parallelism_config_tp_size")->reason.find("tensor parallelism"), std::string::npos);
  EXPECT_NE(entry(tp, "parallelism_config.parallelism_config_tp_size")->reason.find("tensor_parallel.autotp_size"),
            std::string::npos);
  EXPECT_NE(entry(tp, "parallelism_config.parallelism_config_cp_size")->reason.find("context parallelism"), std::string::npos);
  EXPECT_NE(entry(tp, "parallelism_config.parallelism_config_dp_replicate_size")->reason.find("HSDP"), std::string::npos);

  // LLaVA-NeXT's zero3pp.json (hpZ 16) to FSDP2: accelerate takes fsdp_reshard_after_forward as a bool
  // only, so the translation writes true and names hpZ as having no accelerate key (it wrote 16,
  // which accelerate and zerobench's own reader refuse).
  const auto pp = translate_file(kCorpus + "llava-next_zero3pp.json", Target::kFsdp2);
  EXPECT_EQ(pp.source_refusal, "");
  EXPECT_EQ(pp.config["fsdp_config"]["fsdp_reshard_after_forward"], true);
  EXPECT_EQ(pp.target_refusal, "") << pp.target_refusal;
  EXPECT_EQ(entry(pp, "zero_optimization.zero_hpz_partition_size")->kind, Kind::kNoCounterpart);
  EXPECT_NE(entry(pp, "zero_optimization.zero_hpz_partition_size")->reason.find("--reshard-after-forward N"),
            std::string::npos);

  const auto z1 = translate_file(kCorpus + "axolotl_zero1_torch_compile.json", Target::kFsdp);
  EXPECT_EQ(entry(z1, "zero_optimization.stage")->kind, Kind::kApproximate);

  const auto hybrid_src = temp_path("hybrid.yaml");
  std::ofstream(hybrid_src) << "distributed_type: FSDP\nnum_processes: 8\nnum_machines: 2\nfsdp_config:\n"
                               "  fsdp_sharding_strategy: HYBRID_SHARD\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n";
  const auto hybrid = translate_file(hybrid_src, Target::kDeepSpeed);
  EXPECT_EQ(hybrid.config["zero_optimization"]["zero_hpz_partition_size"], 4);
  EXPECT_EQ(entry(hybrid, "fsdp_config.fsdp_sharding_strategy")->kind, Kind::kApproximate);
  EXPECT_EQ(entry(hybrid, "fsdp_config.fsdp_sharding_strategy")->refused, "");  // zero3 runs hpZ (issue 24)
  // HYBRID_SHARD_ZERO2 runs in zerobench's fsdp: the source is not refused; ZeRO stage 2, approximated.
  const auto hz2_src = temp_path("hybrid_zero2.yaml");
  std::ofstream(hz2_src) << "distributed_type: FSDP\nnum_processes: 8\nnum_machines: 2\nfsdp_config:\n"
                            "  fsdp_sharding_strategy: HYBRID_SHARD_ZERO2\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n";
  const auto hz2 = translate_file(hz2_src, Target::kDeepSpeed);
  EXPECT_EQ(hz2.source_refusal, "");
  EXPECT_EQ(hz2.config["zero_optimization"]["stage"], 2);
  EXPECT_EQ(entry(hz2, "fsdp_config.fsdp_sharding_strategy")->kind, Kind::kApproximate);
  EXPECT_EQ(entry(hz2, "fsdp_config.fsdp_sharding_strategy")->refused, "");

  const auto ddp = translate_file(kCorpus + "alignment-handbook_ddp.yaml", Target::kFsdp);
  EXPECT_EQ(ddp.config["fsdp_config"]["fsdp_sharding_strategy"], "NO_SHARD");
  EXPECT_EQ(ddp.target_refusal, "");
}

// A MULTI_GPU file with a leftover fsdp_config block (sippycoder/f-lite's fsdp_config.yaml: JSON
// text, HYBRID_SHARD, a DiTBlock class), the keys inline: accelerate ignores the block, so the
// mapping says so; stage 0 comes from distributed_type (DDP), not from "accelerate's default
// FULL_SHARD"; every added key has its own reason. The same for a leftover deepspeed_config block
// translated to FSDP2: ignored, not "copied as is".
TEST(TranslateCorpus, ADdpFileWithAnotherFrameworksLeftoverBlockMapsItAsIgnored) {
  const auto src = temp_path("ddp_with_fsdp_block.yaml");
  std::ofstream(src) << R"({"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU", )"
                        R"("fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", )"
                        R"("fsdp_sharding_strategy": "HYBRID_SHARD", "fsdp_transformer_layer_cls_to_wrap": "DiTBlock"}, )"
                        R"("mixed_precision": "bf16", "num_processes": 8})";
  const auto t = translate_file(src, Target::kDeepSpeed);
  EXPECT_EQ(t.config["zero_optimization"]["stage"], 0);
  const auto* dist = entry(t, "distributed_type");
  ASSERT_NE(dist, nullptr);
  EXPECT_EQ(dist->target_key, "zero_optimization.stage");
  EXPECT_EQ(dist->target_value, "0");
  EXPECT_NE(dist->reason.find("MULTI_GPU (DDP)"), std::string::npos) << dist->reason;
  for (const char* k : {"fsdp_config.fsdp_auto_wrap_policy", "fsdp_config.fsdp_sharding_strategy",
                        "fsdp_config.fsdp_transformer_layer_cls_to_wrap"}) {
    const auto* e = entry(t, k);
    ASSERT_NE(e, nullptr) << k;
    EXPECT_EQ(e->kind, Kind::kIgnored) << k << ": " << e->reason;
    EXPECT_NE(e->reason.find("read only with distributed_type FSDP"), std::string::npos) << e->reason;
  }
  for (const auto& e : t.mapping) {
    if (e.kind != Kind::kAdded) continue;
    EXPECT_NE(e.target_key, "zero_optimization.stage") << e.reason;
    EXPECT_EQ(e.reason.find("written by the translation"), std::string::npos) << e.target_key;
  }
  EXPECT_EQ(t.target_refusal, "");

  const auto ds_src = temp_path("ddp_with_ds_block.yaml");
  std::ofstream(ds_src) << "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: 'no'\n"
                           "deepspeed_config:\n  zero_stage: 3\n  offload_param_device: none\n";
  const auto f = translate_file(ds_src, Target::kFsdp2);
  EXPECT_FALSE(f.config.contains("deepspeed_config"));
  for (const char* k : {"deepspeed_config.zero_stage", "deepspeed_config.offload_param_device"}) {
    const auto* e = entry(f, k);
    ASSERT_NE(e, nullptr) << k;
    EXPECT_EQ(e->kind, Kind::kIgnored) << k << ": " << e->reason;
    EXPECT_EQ(e->target_key, "") << k;
  }
}

// Bytes. FSDP FULL_SHARD fp32 vs its ZeRO-3 translation at W=2: the guide calls them alike; the
// closed forms (BackendInfo::training.expected_bytes) agree on optimizer states and differ only where the
// layouts do, which the mapping says (padding; DeepSpeed's fp32 master copy and IPG buffer).
TEST(TranslateBytes, FullShardFp32AndItsZero3TranslationHoldTheSameStatesUpToPadding) {
  const auto f = kCorpus + "accelerate_tests_latest_fsdp.yaml";  // FULL_SHARD, mixed_precision 'no'
  const auto t = translate_file(f, Target::kDeepSpeed);
  const auto a = resolve(f);
  const auto b = resolve(write_translation(t, "bytes_ds"));
  ASSERT_EQ(a.spec.precision, "fp32");
  ASSERT_EQ(b.spec.precision, "fp32");
  for (int rank = 0; rank < 2; ++rank) {
    const auto fsdp = backends::backend("fsdp").training.expected_bytes(a.spec, 2, rank);
    const auto zero3 = backends::backend("zero3").training.expected_bytes(b.spec, 2, rank);
    std::cout << "[ rank " << rank << " fsdp params/master/grads/optimizer/buffers " << fsdp.params << "/"
              << fsdp.master_params << "/" << fsdp.grads << "/" << fsdp.optimizer << "/" << fsdp.buffers
              << "  zero3 " << zero3.params << "/" << zero3.master_params << "/" << zero3.grads << "/"
              << zero3.optimizer << "/" << zero3.buffers << " ]\n";
    // Each holds 1/W of every parameter, 4 bytes each: the same up to padding (FSDP pads each
    // unit's flat parameter to a multiple of W, DeepSpeed pads each parameter).
    const int64_t pad_bound = 4 * 2 * 64;  // 4 bytes x (W-1 per param) x params of tiny (< 64), generous
    EXPECT_LE(std::llabs(fsdp.params - zero3.params), pad_bound);
    EXPECT_LE(std::llabs(fsdp.grads - zero3.grads), pad_bound);
    EXPECT_LE(std::llabs(fsdp.optimizer - zero3.optimizer), 2 * pad_bound);
  }
  // Where they differ, the mapping says why: DeepSpeed's fp32 master copy and reduce bucket (and padding).
  const auto fsdp = backends::backend("fsdp").training.expected_bytes(a.spec, 2, 0);
  const auto zero3 = backends::backend("zero3").training.expected_bytes(b.spec, 2, 0);
  const auto* strategy = entry(t, "fsdp_config.fsdp_sharding_strategy");
  ASSERT_NE(strategy, nullptr);
  EXPECT_NE(strategy->reason.find("padding"), std::string::npos);
  if (zero3.master_params != fsdp.master_params) { EXPECT_NE(strategy->reason.find("fp32 master copy"), std::string::npos); }
  if (zero3.buffers != fsdp.buffers) { EXPECT_NE(strategy->reason.find("reduce bucket"), std::string::npos); }
}

// bf16: the same setting (mixed_precision bf16 <-> bf16.enabled), different storage, and the
// mapping says so: FSDP mixed holds fp32 params and grads, DeepSpeed bf16 holds bf16 params and
// grads plus an fp32 master.
TEST(TranslateBytes, Bf16MixedAndDeepSpeedBf16HoldDifferentCopiesAndTheMappingSaysWhy) {
  const auto f = kSource + "/bench/configs/accelerate_fsdp_blog.yaml";
  const auto t = translate_file(f, Target::kDeepSpeed);
  const auto a = resolve(f);
  const auto b = resolve(write_translation(t, "bytes_bf16"));
  ASSERT_EQ(a.spec.precision, "mixed");
  ASSERT_EQ(b.spec.precision, "bf16");
  const auto fsdp = backends::backend("fsdp").training.expected_bytes(a.spec, 2, 0);
  const auto zero3 = backends::backend("zero3").training.expected_bytes(b.spec, 2, 0);
  std::cout << "[ bf16 rank 0 fsdp mixed params/master/grads/optimizer " << fsdp.params << "/" << fsdp.master_params << "/"
            << fsdp.grads << "/" << fsdp.optimizer << "  zero3 bf16 " << zero3.params << "/" << zero3.master_params << "/"
            << zero3.grads << "/" << zero3.optimizer << " ]\n";
  EXPECT_EQ(fsdp.params, 2 * zero3.params);  // fp32 flat shard vs bf16 partition
  EXPECT_EQ(fsdp.master_params, 0);
  EXPECT_EQ(zero3.master_params, fsdp.params);  // DeepSpeed's fp32 master is FSDP mixed's fp32 shard
  EXPECT_EQ(fsdp.optimizer, zero3.optimizer);   // fp32 AdamW states on both
  const auto* mp = entry(t, "mixed_precision");
  ASSERT_NE(mp, nullptr);
  EXPECT_NE(mp->reason.find("fp32 flat params"), std::string::npos);
  EXPECT_NE(mp->reason.find("fp32 master copy"), std::string::npos);
}

TEST(TranslateCli, WritesTheConfigAndTheMappingAndRefusesBadInput) {
  const auto out = temp_path("cli_ds.json");
  auto r = test_support::run_zerobench("translate " + kSource + "/bench/configs/accelerate_fsdp_blog.yaml --to deepspeed --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| fsdp_config.fsdp_sharding_strategy | FULL_SHARD | zero_optimization.stage | 3 | mapped |"),
            std::string::npos)
      << r.output;
  std::ifstream in(out), md(out + ".mapping.md"), js(out + ".mapping.json");
  EXPECT_TRUE(in.good() && md.good() && js.good());
  EXPECT_EQ(json::parse(in)["zero_optimization"]["stage"], 3);
  EXPECT_EQ(json::parse(js)["target"], "deepspeed");

  r = test_support::run_zerobench("translate " + kSource + "/bench/configs/deepspeed_zero3_blog.json --to fsdp2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fsdp_version: 2"), std::string::npos) << r.output;

  r = test_support::run_zerobench("translate " + kSource + "/bench/configs/accelerate_fsdp_blog.yaml --to megatron");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--to megatron"), std::string::npos) << r.output;
  r = test_support::run_zerobench("translate /nonexistent.yaml --to deepspeed");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/nonexistent.yaml"), std::string::npos) << r.output;
  r = test_support::run_zerobench("translate " + kSource + "/bench/configs/accelerate_fsdp_blog.yaml --to fsdp");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("already an FSDP config"), std::string::npos) << r.output;
  r = test_support::run_zerobench("translate --list-mapping");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("`fsdp_sharding_strategy`"), std::string::npos);
}

// docs/configs.md's key table is the code's (`translate --list-mapping`), and the check that says
// so fails on a doctored copy.
TEST(TranslateDocs, TheKeyTableInDocsIsGeneratedFromTheCode) {
  const auto bin = std::string(zb::test_support::zerobench_bin());
  auto r = test_support::run_command("ZEROBENCH_BIN=" + bin + " " + kSource + "/scripts/translate-table.sh --check 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output << " (run scripts/translate-table.sh)";
  const auto table = temp_path("mapping_table.md"), doc = temp_path("configs.md");
  ASSERT_EQ(test_support::run_command(bin + " translate --list-mapping > " + table).exit_code, 0);
  std::ifstream in(kSource + "/docs/configs.md");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = text.find("FULL_SHARD -> 3, SHARD_GRAD_OP -> 2");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 10, "FULL_SHARD -> 2");  // a hand edit of one row
  std::ofstream(doc) << text;
  r = test_support::run_command("python3 " + kSource + "/scripts/splice_table.py translate-mapping --check " + table + " " +
                                doc + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
}
