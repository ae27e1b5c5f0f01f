// Rank discovery from torchrun, SLURM and Open MPI environments.
#include <gtest/gtest.h>

#include <map>

#include "runtime/dist_env.hpp"
#include "runtime/errors.hpp"

using namespace zb::runtime;

namespace {
EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    return it == m.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}
}  // namespace

TEST(DistEnv, SingleProcessByDefault) {
  auto d = discover_dist_env(env_of({}));
  EXPECT_EQ(d.source, "single");
  EXPECT_EQ(d.world_size, 1);
}

TEST(DistEnv, Torchrun) {
  auto d = discover_dist_env(env_of({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                     {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29511"}}));
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_addr, "node0");
  EXPECT_EQ(d.master_port, 29511);
}

TEST(DistEnv, SlurmTakesTheFirstHostOfTheNodelist) {
  auto d = discover_dist_env(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "5"},
                                     {"SLURM_JOB_NODELIST", "gpu[07-08,11],cpu1"}}));
  EXPECT_EQ(d.source, "slurm");
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.world_size, 16);
  EXPECT_EQ(d.local_rank, 5);
  EXPECT_EQ(d.master_addr, "gpu07");
  EXPECT_EQ(first_host_of_nodelist("node7"), "node7");
  EXPECT_EQ(first_host_of_nodelist("a-b[3,5-9]"), "a-b3");
}

TEST(DistEnv, OpenMpi) {
  auto d = discover_dist_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}}));
  EXPECT_EQ(d.source, "openmpi");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.master_addr, "10.0.0.1");
}

TEST(DistEnv, BadValuesNameTheVariable) {
  try {
    discover_dist_env(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
    FAIL();
  } catch (const zb::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK='x'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(discover_dist_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}})), zb::UsageError);
  EXPECT_THROW(discover_dist_env(env_of({{"MASTER_PORT", "70000"}})), zb::UsageError);
}
