// world.cpp — c10d process groups over a TCPStore (see world.hpp).
#include "runtime/world.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "runtime/emulated_backend.hpp"
#include "runtime/errors.hpp"
#include "runtime/launcher.hpp"

namespace zb::runtime {

namespace {
std::chrono::milliseconds g_timeout{std::chrono::minutes(5)};
std::string g_master_addr = "127.0.0.1";

// Every NCCL group this process made, newest last, held until exit and shut down (or aborted)
// there. Gloo and emulated groups have nothing to shut down (Backend::shutdown's default).
std::mutex g_groups_mutex;
std::vector<c10::intrusive_ptr<c10d::Backend>>& live_groups() {
  static auto* groups = new std::vector<c10::intrusive_ptr<c10d::Backend>>();  // outlives static destructors
  return *groups;
}
std::atomic<bool> g_abort_at_exit{false};
void shutdown_at_exit() { shutdown_process_groups(g_abort_at_exit.load()); }

c10::intrusive_ptr<c10d::Backend> registered(c10::intrusive_ptr<c10d::Backend> pg) {
  std::lock_guard<std::mutex> lock(g_groups_mutex);
  static const bool once = (std::atexit(shutdown_at_exit), true);
  (void)once;
  live_groups().push_back(pg);
  return pg;
}

c10::intrusive_ptr<c10d::Backend> make_pg(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          at::Device device, std::string& backend_name, bool emulated = false) {
  if (emulated) {
    backend_name = "emulated";
    return c10::make_intrusive<EmulatedBackend>(rank, size);
  }
  if (device.is_cuda()) {
#ifdef USE_C10D_NCCL
    backend_name = "nccl";
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = g_timeout;
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
    pg->enableCollectivesTiming();  // start/end events per collective: Comm's device comm time
    return registered(pg);
#else
    throw UsageError("--device cuda: this build has no NCCL (rebuild with -DZEROBENCH_CUDA=ON)");
#endif
  }
  backend_name = "gloo";
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = g_timeout;
  const bool local = g_master_addr == "127.0.0.1" || g_master_addr == "localhost";
  opts->devices.push_back(local ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                : c10d::ProcessGroupGloo::createDefaultDevice());
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
  // No member returns before every member has connected its pairs: Gloo's connectFullMesh returns
  // on a rank once its own pairs are up, and a member that then drops the group at once (a
  // subgroup made and not used, a thread-rank leaving its test) closes sockets a slower member's
  // listener has not finished accepting — that member then fails with "Connection closed by
  // peer" inside connectFullMesh. A barrier on the new group is one small exchange per group.
  pg->barrier()->wait();
  return pg;
}
}  // namespace

void abort_process_groups_at_exit() { g_abort_at_exit = true; }

void shutdown_process_groups(bool abort) {
  std::vector<c10::intrusive_ptr<c10d::Backend>> groups;
  {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    groups.swap(live_groups());
  }
  // Subgroups before the groups they were made from (the reverse of creation).
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
    try {
      if (abort) (*it)->abort();
      else (*it)->shutdown();
    } catch (const std::exception&) {
      // At exit nothing is left to report to: the run's own error (if any) is already out.
    }
  }
}

int live_process_groups() {
  std::lock_guard<std::mutex> lock(g_groups_mutex);
  return int(live_groups().size());
}

std::vector<int> World::all_ranks() const {
  std::vector<int> r(static_cast<size_t>(size), 0);
  for (int i = 0; i < size; ++i) r[size_t(i)] = i;
  return r;
}

World World::subgroup(const std::string& name, const std::vector<int>& ranks) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  if (it == ranks.end()) throw RunError("rank " + std::to_string(rank) + " is not in subgroup " + name);
  std::string key = "group/" + name;
  for (int r : ranks) key += "/" + std::to_string(r);
  World sub = *this;
  sub.rank = int(it - ranks.begin());
  sub.size = int(ranks.size());
  sub.store = c10::make_intrusive<c10d::PrefixStore>(key, store);
  sub.pg = make_pg(sub.store, sub.rank, sub.size, device, sub.pg_backend, emulated);
  return sub;
}

World init_world_on_store(c10::intrusive_ptr<c10d::Store> store, int rank, int size, at::Device device,
                          std::chrono::milliseconds timeout) {
  g_timeout = timeout;
  World w;
  w.rank = rank;
  w.size = size;
  w.local_rank = rank;
  w.local_size = size;
  w.device = device;
  w.store = c10::make_intrusive<c10d::PrefixStore>("world", store);
  w.pg = make_pg(w.store, rank, size, device, w.pg_backend);
  return w;
}

World init_emulated_world(int rank, int size, at::Device device) {
  if (size < 1 || rank < 0 || rank >= size)
    throw UsageError("--emulate-rank " + std::to_string(rank) + " is not a rank of an emulated world of " +
                     std::to_string(size));
  World w;
  w.rank = rank;
  w.size = size;
  w.device = device;
  w.emulated = true;
  w.store = c10::make_intrusive<c10d::HashStore>();
  w.pg = make_pg(w.store, rank, size, device, w.pg_backend, true);
  return w;
}

World init_world(const DistEnv& env, at::Device device, std::chrono::milliseconds timeout) {
  g_timeout = timeout;
  g_master_addr = env.master_addr;
  c10d::TCPStoreOptions opts;
  opts.port = uint16_t(env.master_port);
  opts.isServer = env.rank == 0;
  opts.numWorkers = size_t(env.world_size);
  opts.waitWorkers = true;
  opts.timeout = timeout;
  // Rank 0 of a job the local launcher started (or a lone rank) serves on the socket the launcher
  // already holds (runtime/launcher.hpp hold_rendezvous_port): no window for another process to
  // take the port. torchrun/srun jobs bind MASTER_PORT as before.
  if (const char* fd = std::getenv(kMasterListenFdEnv); fd && *fd && env.rank == 0) {
    opts.masterListenFd = std::atoi(fd);
    unsetenv(kMasterListenFdEnv);  // the store owns the socket now: never handed out twice
  }
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    throw RunError("rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port) + " failed: " + e.what());
  }
  World w = init_world_on_store(store, env.rank, env.world_size, device, timeout);
  w.local_rank = env.local_rank;
  w.local_size = env.local_world_size;
  return w;
}

}  // namespace zb::runtime
