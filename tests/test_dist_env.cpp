// Rank discovery from torchrun, SLURM and Open MPI environments.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <cerrno>

#include <map>

#include "runtime/dist_env.hpp"
#include "runtime/errors.hpp"
#include "runtime/launcher.hpp"

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

// srun without --ntasks-per-node sets no SLURM_NTASKS_PER_NODE: the node's task count comes from
// SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID (here 3 tasks on nodes 0-1, 1 on node 2).
TEST(DistEnv, SlurmTasksPerNodeFromTheStepLayout) {
  auto d = discover_dist_env(env_of({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "0"},
                                     {"SLURM_NODEID", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"},
                                     {"SLURM_TASKS_PER_NODE", "4(x2)"}}));
  EXPECT_EQ(d.local_world_size, 1);
  d = discover_dist_env(env_of({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "1"},
                                {"SLURM_NODEID", "1"}, {"SLURM_TASKS_PER_NODE", "3(x2),1"}}));
  EXPECT_EQ(d.local_world_size, 3);
  EXPECT_EQ(tasks_on_node("2", 0), 2);
  for (const char* bad : {"2(x", "x", "2(x0)", ",1", "2(y2)", "0"})
    EXPECT_THROW(tasks_on_node(bad, 0), zb::UsageError) << bad;
  EXPECT_THROW(tasks_on_node("2(x2)", 2), zb::UsageError);  // only two nodes listed
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

// The rendezvous port is held, not merely found free: while the launcher holds it nobody else can
// bind it (a port found free by find_free_port can be taken by a parallel job before rank 0's
// TCPStore binds it — EADDRINUSE at rendezvous, seen in a ctest -j2 run), and rank 0's TCPStore
// serves on the held socket (TCPStoreOptions::masterListenFd) so a client on that port reaches it.
TEST(RendezvousPort, AHeldPortCannotBeTakenAndTheStoreServesOnIt) {
  auto try_bind = [](int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    const int rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    const int err = errno;
    close(fd);
    return rc == 0 ? 0 : err;
  };
  // The old way leaves the window: the found port is free for anyone.
  EXPECT_EQ(try_bind(zb::runtime::find_free_port()), 0);
  const auto held = zb::runtime::hold_rendezvous_port(/*into_env=*/false);
  EXPECT_EQ(try_bind(held.port), EADDRINUSE);
  c10d::TCPStoreOptions server;
  server.port = uint16_t(held.port);
  server.isServer = true;
  server.numWorkers = 2;
  server.waitWorkers = false;
  server.masterListenFd = held.fd;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server);
  c10d::TCPStoreOptions client;
  client.port = uint16_t(held.port);
  client.isServer = false;
  client.numWorkers = 2;
  client.waitWorkers = false;
  auto peer = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client);
  peer->set("k", std::vector<uint8_t>{4, 2});
  EXPECT_EQ(store->get("k"), (std::vector<uint8_t>{4, 2}));
}
