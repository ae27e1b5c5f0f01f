// test_config_claims.cpp — config files and backend CLI flags reach a backend only through its
// descriptor (issue 21): a backend registered with one line claims a config kind and declares a
// flag, and config/ and bench/ pick it without naming it; a stronger claim wins over a backend's
// catch-all (how ZeRO stages 1/2 join later, issue 24); a file nobody claims and another
// backend's flag are refused with one line (exit 2 in the binary).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "backends/backend_info.hpp"
#include "bench/run/run_options.hpp"
#include "runtime/errors.hpp"
#include "tests/resolve_run.hpp"

namespace zb {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/zb_config_claims_" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

std::string usage_error(const std::vector<std::string>& flags) {
  try {
    test_support::resolve_run(flags);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// A backend of the test's own: ddp's engine under another name, claiming accelerate's
// MEGATRON_LM (which no built-in backend runs) and DeepSpeed stage 2, with one flag.
backends::BackendInfo toy_backend() {
  backends::BackendInfo info = backends::backend(backends::default_backend_name());
  info.name = "toy_claims";
  info.config.claim = [](const backends::ConfigIdentity& id) {
    if (id.accelerate && id.distributed_type == "MEGATRON_LM") return 2;
    if (!id.accelerate && id.zero_stage == 2) return 3;  // above zero2's own claim (2)
    return 0;
  };
  info.config.claim_text = "MEGATRON_LM";
  info.config.read = [](const backends::ConfigInput& in, backends::ResolvedConfig& out) {
    out.precision = "fp32";
    out.options = {{"read_by", "toy_claims"}, {"stage", in.launch ? -1 : in.file.root["zero_optimization"]["stage"].get<int>()}};
    out.provenance.notes.apply("distributed_type", in.launch ? in.launch->distributed_type : "(DeepSpeed JSON)", "toy");
  };
  backends::BackendFlag flag;
  flag.name = "--toy-knob";
  flag.help = "toy_claims: a knob";
  flag.kind = backends::BackendFlag::Kind::kCount;
  info.config.flags = {flag};
  info.config.flags_title = "Toy";
  info.config.apply_flags = [](const backends::FlagValues& given, bool, backends::EngineSpec& spec,
                               config::ConfigNotes&) {
    if (given.count("--toy-knob")) spec.options["knob"] = given.at("--toy-knob").count;
  };
  info.training.broadcasts_initial_weights = nullptr;
  return info;
}

class ConfigClaims : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static bool registered = false;
    if (!registered) backends::register_backend(toy_backend());  // the one line a new backend adds
    registered = true;
  }
};

TEST_F(ConfigClaims, ANewBackendClaimsItsOwnAccelerateTypeWithoutConfigOrBenchNamingIt) {
  const auto p = write_file("megatron.yaml", "distributed_type: MEGATRON_LM\nmixed_precision: 'no'\n");
  const auto r = test_support::resolve_run({"--config", p, "--toy-knob", "7"});
  EXPECT_EQ(r.backend, "toy_claims");
  EXPECT_EQ(r.spec.options["read_by"], "toy_claims");
  EXPECT_EQ(r.spec.options["knob"], 7);
  // A built-in reader still reads what it claims.
  const auto ddp = write_file("ddp.yaml", "distributed_type: MULTI_GPU\nmixed_precision: bf16\n");
  EXPECT_EQ(test_support::resolve_run({"--config", ddp}).spec.precision, "mixed");
}

TEST_F(ConfigClaims, TheStrongestClaimWinsOverABackendsCatchAll) {
  // zero3 claims every DeepSpeed JSON (refusing stages other than 3 with its own message), zero1
  // and zero2 their stages with 2; a backend claiming stage 2 more strongly (3) takes stage-2
  // files and leaves stage 3 to zero3.
  const auto s2 = write_file("s2.json", R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}})");
  const auto r2 = test_support::resolve_run({"--config", s2});
  EXPECT_EQ(r2.backend, "toy_claims");
  EXPECT_EQ(r2.spec.options["stage"], 2);
  const auto s3 = write_file("s3.json", R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})");
  EXPECT_NE(test_support::resolve_run({"--config", s3}).backend, "toy_claims");
  // Stage 1: zero1's claim (2) beats zero3's catch-all (1).
  const auto s1 = write_file("s1.json", R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}})");
  EXPECT_EQ(test_support::resolve_run({"--config", s1}).backend, "zero1");
  // Stage 0: zero0's claim (2) beats zero3's catch-all (1).
  const auto s0 = write_file("s0.json", R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}})");
  EXPECT_EQ(test_support::resolve_run({"--config", s0}).backend, "zero0");
}

TEST_F(ConfigClaims, AFileNobodyClaimsIsRefusedNamingWhatIsClaimed) {
  const auto p = write_file("tpu.yaml", "distributed_type: XLA\n");
  const auto msg = usage_error({"--config", p});
  EXPECT_NE(msg.find("distributed_type XLA: zerobench runs "), std::string::npos) << msg;
  EXPECT_NE(msg.find("MEGATRON_LM (toy_claims)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("FSDP (fsdp)"), std::string::npos) << msg;
}

TEST_F(ConfigClaims, ABackendsFlagWithAnotherBackendIsRefusedNamingItsOwner) {
  EXPECT_NE(usage_error({"--backend", "fsdp", "--toy-knob", "1"}).find("Toy options (--toy-knob, ...) need --backend toy_claims"),
            std::string::npos);
  EXPECT_NE(usage_error({"--backend", "toy_claims", "--sharding-strategy", "FULL_SHARD"})
                .find("FSDP options (--sharding-strategy, --backward-prefetch, ...) need --backend fsdp"),
            std::string::npos);
  // --backend X with a file X does not claim conflicts with it.
  const auto p = write_file("megatron2.yaml", "distributed_type: MEGATRON_LM\n");
  EXPECT_NE(usage_error({"--config", p, "--backend", "fsdp"}).find("--backend fsdp conflicts with the file, which "
                                                                   "configures toy_claims"),
            std::string::npos);
}

}  // namespace
}  // namespace zb
