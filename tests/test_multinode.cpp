// test_multinode.cpp — a real two-node launch on this host, two ways: two torchrun agents
// (--nnodes 2 --nproc-per-node 2, c10d rendezvous on loopback), and four processes with the
// environment srun sets for `srun -N 2 -n 4` (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
// SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE "2(x2)", no SLURM_NTASKS_PER_NODE). FSDP-mode
// HYBRID_SHARD shards within a node (torch/distributed/fsdp/_init_utils.py
// _init_process_group_state_for_hybrid_shard: the intra-node group of LOCAL_WORLD_SIZE ranks) and
// FSDP2-mode HSDP within the mesh's dp_shard dimension: every rank's model-state bytes equal the
// backend's closed form for 2 nodes x 2 ranks, and the pre-flight estimate's resident terms, and
// differ from a shard over the whole world.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>

#include "backends/backend_info.hpp"
#include "models/model_config.hpp"
#include "reports/report.hpp"
#include "runtime/launcher.hpp"
#include "tests/run_binary.hpp"

namespace zb {
namespace {
using json = nlohmann::json;
using test_support::run_command;
using test_support::temp_path;

std::string venv_bin(const std::string& tool) {
  const char* v = std::getenv("ZEROBENCH_VENV");
  const char* home = std::getenv("HOME");
  return (v && *v ? std::string(v) : std::string(home ? home : "") + "/.cache/zerobench/venv") + "/bin/" + tool;
}

std::string run_flags(const std::string& backend_flags, const std::string& out) {
  return std::string(zb::test_support::zerobench_bin()) + " run --model tiny " + backend_flags +
         " --precision fp32 --micro-batch 2 --seq-len 64 --steps 2 --warmup 1 --threads 1 --quiet --out " + out;
}

// Two torchrun agents, one per "node"; true when both exit 0.
bool launch_torchrun(const std::string& run, const std::string& tag, std::string& log) {
  const auto tr = venv_bin("torchrun");
  if (access(tr.c_str(), X_OK) != 0) {
    log = "torchrun not found at " + tr + " (scripts/setup.sh installs it)";
    return false;
  }
  const int port = runtime::find_free_port();
  auto agent = [&](int node) {
    return tr + " --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
           " --node-rank " + std::to_string(node) + " --no-python " + run + " > " +
           temp_path(tag + "_node" + std::to_string(node) + ".log") + " 2>&1";
  };
  const auto r = run_command("(" + agent(0) + ") & (" + agent(1) + "); s1=$?; wait $!; s0=$?; echo \"$s0 $s1\"");
  log = r.output + run_command("cat " + temp_path(tag + "_node0.log") + " " + temp_path(tag + "_node1.log")).output;
  return r.output.find("0 0") != std::string::npos;
}

// Four tasks as `srun -N 2 -n 4` starts them (tasks 0-1 on node 0, 2-3 on node 1); the job script
// exports MASTER_ADDR/MASTER_PORT, as torch's SLURM recipes do. True when all exit 0.
bool launch_slurm(const std::string& run, const std::string& tag, std::string& log) {
  const int port = runtime::find_free_port();
  std::string cmd;
  for (int task = 0; task < 4; ++task) {
    cmd += "(env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE SLURM_JOB_ID=1 SLURM_STEP_ID=0 SLURM_NNODES=2 "
           "SLURM_JOB_NODELIST='node[1-2]' SLURM_STEP_NODELIST='node[1-2]' SLURM_NTASKS=4 SLURM_NPROCS=4 "
           "SLURM_STEP_NUM_TASKS=4 SLURM_STEP_NUM_NODES=2 SLURM_TASKS_PER_NODE='2(x2)' SLURM_STEP_TASKS_PER_NODE='2(x2)' "
           "SLURM_PROCID=" + std::to_string(task) + " SLURM_LOCALID=" + std::to_string(task % 2) +
           " SLURM_NODEID=" + std::to_string(task / 2) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
           " " + run + " > " + temp_path(tag + "_task" + std::to_string(task) + ".log") + " 2>&1; echo \"task" +
           std::to_string(task) + "=$?\") & ";
  }
  const auto r = run_command(cmd + "wait");
  log = r.output;
  for (int task = 0; task < 4; ++task) log += run_command("cat " + temp_path(tag + "_task" + std::to_string(task) + ".log")).output;
  for (int task = 0; task < 4; ++task)
    if (r.output.find("task" + std::to_string(task) + "=0") == std::string::npos) return false;
  return true;
}

int64_t term(const json& estimate, const std::string& name) {
  for (const auto& t : estimate["terms"])
    if (t["name"] == name && t["phase"] == "resident") return t["bytes"].get<int64_t>();
  return -1;
}

struct Case {
  std::string backend, flags;
  json options;        // the options the closed form is asked with here
  json world_options;  // the same backend sharding over all 4 ranks, for contrast
};

void check_two_nodes(const Case& c, const std::string& out) {
  const auto report = reports::read_report(out);
  ASSERT_EQ(report["ranks"].size(), 4u);
  backends::EngineSpec spec;
  spec.model = models::preset("tiny");
  spec.precision = "fp32";
  spec.options = c.options;
  const auto& info = backends::backend(c.backend);
  for (const auto& rk : report["ranks"]) {
    const int rank = rk["rank"].get<int>();
    SCOPED_TRACE(c.backend + " rank " + std::to_string(rank));
    const auto& mem = rk["memory"];
    const auto& got = mem["model_states_bytes"];
    const auto closed = backends::to_json(info.training.expected_bytes(spec, backends::Topology(4, 2), rank));
    EXPECT_EQ(got, closed) << "measured vs the closed form for 2 nodes x 2 ranks";
    EXPECT_EQ(got, mem["model_states_expected_bytes"]);
    auto world_spec = spec;
    world_spec.options = c.world_options;
    const auto over_world = info.training.expected_bytes(world_spec, backends::Topology(4, 4), rank);
    EXPECT_NE(got["params"].get<int64_t>(), over_world.params) << "sharded over the world, not the node";
    EXPECT_EQ(term(mem["estimate"], "params"), got["params"].get<int64_t>());
    EXPECT_EQ(term(mem["estimate"], "master params"), got["master_params"].get<int64_t>());
    EXPECT_EQ(term(mem["estimate"], "optimizer states"), got["optimizer"].get<int64_t>());
    EXPECT_EQ(mem["estimate"]["topology"]["shard_group"], 2);
    EXPECT_EQ(mem["estimate"]["topology"]["ranks_per_node"], 2);
  }
}

// HYBRID_SHARD on one node of 4 would shard over all 4; FSDP2 without HSDP shards over the world.
const Case kHybridShard{"fsdp", "--backend fsdp --sharding-strategy HYBRID_SHARD",
                        {{"sharding_strategy", "HYBRID_SHARD"}}, {{"sharding_strategy", "HYBRID_SHARD"}}};
const Case kHsdp{"fsdp2", "--backend fsdp2 --dp-replicate-size 2", {{"dp_replicate_size", 2}}, json::object()};

TEST(TwoNodes, TorchrunFsdpHybridShard) {
  const auto out = temp_path("tr_hybrid.json");
  std::remove(out.c_str());
  std::string log;
  ASSERT_TRUE(launch_torchrun(run_flags(kHybridShard.flags, out), "tr_hybrid", log)) << log;
  check_two_nodes(kHybridShard, out);
  EXPECT_EQ(reports::read_report(out)["config"]["backend"]["options"]["shard_group_size"], 2);
}

TEST(TwoNodes, TorchrunFsdp2Hsdp) {
  const auto out = temp_path("tr_hsdp.json");
  std::remove(out.c_str());
  std::string log;
  ASSERT_TRUE(launch_torchrun(run_flags(kHsdp.flags, out), "tr_hsdp", log)) << log;
  check_two_nodes(kHsdp, out);
}

TEST(TwoNodes, SlurmFsdpHybridShard) {
  const auto out = temp_path("slurm_hybrid.json");
  std::remove(out.c_str());
  std::string log;
  ASSERT_TRUE(launch_slurm(run_flags(kHybridShard.flags, out), "slurm_hybrid", log)) << log;
  check_two_nodes(kHybridShard, out);
  EXPECT_EQ(reports::read_report(out)["env"]["launcher"], "slurm");
}

TEST(TwoNodes, SlurmFsdp2Hsdp) {
  const auto out = temp_path("slurm_hsdp.json");
  std::remove(out.c_str());
  std::string log;
  ASSERT_TRUE(launch_slurm(run_flags(kHsdp.flags, out), "slurm_hsdp", log)) << log;
  check_two_nodes(kHsdp, out);
}

}  // namespace
}  // namespace zb
