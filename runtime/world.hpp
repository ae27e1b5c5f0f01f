// world.hpp — one rank's view of the job: its rank, the store, the c10d process group, its device.
// Owns: rendezvous (TCPStore) and creating Gloo (CPU) or NCCL (CUDA) groups, including subgroups.
// Must not: count or time collectives (backends/common/comm does that).
#pragma once
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/dist_env.hpp"

namespace zb::runtime {

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  at::Device device = at::kCPU;
  std::string pg_backend;  // "gloo", "nccl" or "emulated"
  bool emulated = false;   // one process playing `rank` of `size` (--emulate-world-size)
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;

  // A new group over `ranks` (this rank must be among them), e.g. HYBRID_SHARD's shard and
  // replicate groups. Every rank must call it with the same `name` and group list order.
  World subgroup(const std::string& name, const std::vector<int>& ranks) const;
  // A second group over the same ranks for uncounted bookkeeping (loss averaging, reports).
  World side_channel() const { return subgroup("side", all_ranks()); }
  std::vector<int> all_ranks() const;
};

// Rendezvous through a TCPStore at env.master_addr:master_port (rank 0 hosts it).
World init_world(const DistEnv& env, at::Device device, std::chrono::milliseconds timeout);
// One process playing rank `rank` of a `size`-rank job on `device`, with an EmulatedBackend
// (collectives keep shapes and bytes, move nothing across ranks) and an in-process store.
World init_emulated_world(int rank, int size, at::Device device);
// A rank of an in-process world (tests): every rank shares one store (e.g. a c10d::HashStore).
World init_world_on_store(c10::intrusive_ptr<c10d::Store> store, int rank, int size, at::Device device,
                          std::chrono::milliseconds timeout);

// NCCL process groups are shut down when the process exits (an atexit handler registered with the
// first one; Gloo and emulated groups hold nothing to shut down): c10d's Backend::shutdown() on a normal exit — for NCCL, ProcessGroupNCCL::shutdown
// (what torch.distributed.destroy_process_group does through _shutdown_backend) — and
// Backend::abort() after abort_process_groups_at_exit() (an error: NCCL aborts its communicators
// instead of waiting on collectives that may never finish). shutdown_process_groups runs it now.
void abort_process_groups_at_exit();
void shutdown_process_groups(bool abort);
int live_process_groups();  // NCCL groups created and not yet shut down (tests)

}  // namespace zb::runtime
