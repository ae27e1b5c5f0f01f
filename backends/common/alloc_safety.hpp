// alloc_safety.hpp — the CUDA caching allocator's safety rule, checked over the dependency log
// (streams.hpp) on any machine.
//
// The rule (c10/cuda/CUDACachingAllocator.cpp: a block belongs to the stream it was allocated
// on; free() returns it to that stream's pool at once unless record_stream() added other streams
// to block->stream_uses, in which case insert_events() records an event on each and the block is
// reused only after they complete): a storage allocated on stream A and used by work on stream
// B != A must, when it is freed, either have been recorded on B (record_stream, the FSDP1 and
// DeepSpeed way) or be freed only after A is ordered after that use (held until A waited for B's
// event, the FSDP2 way). Otherwise the next allocation on A may overwrite it while B still reads
// or writes it.
//
// Owns: naming storages in the log (StorageTracker: a generation per allocation, so a storage
// resized to 0 and refilled is a new one) and the check. Must not: change what engines do, or
// decide where anything runs (it only reads the log).
//
// What the log knows (and so what is checked): uses declared by engines (Streams::op with
// tensors), every collective's inputs and outputs, record_stream calls, and frees — a storage
// resized to 0 (FSDP's `untyped_storage().resize_(0)`) or released with its last reference
// (a collective's held tensors, HeldTensors, work that held them) — seen at the next logged call.
// A storage's allocation stream is the stream current when it was first seen or refilled: an
// approximation (the allocation itself is not logged), exact where the engine allocates and uses
// a buffer under one Guard.
#pragma once
#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace zb::backends::common {

class Streams;
using StreamId = int;

// Storage generations seen in the log. Holds weak references only: a storage is never kept
// alive by the tracker, and its StorageImpl's address is not reused while tracked.
class StorageTracker {
 public:
  struct Seen {
    int64_t id = -1;      // -1: no storage (undefined tensor or no bytes)
    bool is_new = false;  // first seen (the caller logs its allocation)
  };
  Seen see(const at::Tensor& t, StreamId current);
  struct Freed {
    int64_t id;
    StreamId alloc_stream;
    const char* how;
  };
  // Generations freed since the last sweep (released, resized to 0 or refilled), oldest first;
  // a refilled storage becomes a new generation allocated on `current` (`refilled` lists them).
  std::vector<Freed> sweep(StreamId current, std::vector<int64_t>& refilled);
  void clear();

 private:
  struct Tracked {
    c10::weak_intrusive_ptr<c10::StorageImpl> weak;
    const void* data = nullptr;  // the allocation tracked (null: freed, not refilled yet)
    int64_t id = -1;
    StreamId alloc_stream = 0;
  };
  std::vector<Tracked> tracked_;  // first-seen order (deterministic sweeps)
  std::unordered_map<const c10::StorageImpl*, size_t> index_;
  int64_t next_id_ = 0;
};

// One use that the allocator could overwrite: `tensor` (labels its storage was seen under),
// allocated on `alloc_stream`, used on `use_stream` at `use_seq`, freed at `free_seq` while that
// use was neither ordered before the allocation stream nor recorded on its stream.
struct AllocSafetyViolation {
  int64_t storage = -1;
  std::string tensor, alloc_stream, use_stream, use_label, free_label;
  int64_t use_seq = -1, free_seq = -1;
  std::string message() const;
};

// What a check covered: frees checked, and uses on a stream other than the allocation stream
// that those frees had to cover (0 would mean the check proved nothing).
struct AllocSafetyStats {
  int64_t frees = 0, cross_stream_uses = 0;
};

// Every violation of the rule in `streams`' log (after flush_frees()), in free order.
std::vector<AllocSafetyViolation> check_allocator_safety(Streams& streams, AllocSafetyStats* stats = nullptr);

}  // namespace zb::backends::common
