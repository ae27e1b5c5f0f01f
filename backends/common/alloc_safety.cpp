// alloc_safety.cpp — storage generations and the allocator-safety check (see alloc_safety.hpp).
#include "backends/common/alloc_safety.hpp"

#include <map>
#include <set>

#include "backends/common/streams.hpp"

namespace zb::backends::common {

StorageTracker::Seen StorageTracker::see(const at::Tensor& t, StreamId current) {
  if (!t.defined() || !t.has_storage()) return {};
  auto* impl = t.storage().unsafeGetStorageImpl();
  const void* data = impl->data_ptr().get();
  if (data == nullptr || impl->nbytes() == 0) return {};  // freed (resized to 0): nothing to use
  auto it = index_.find(impl);
  if (it != index_.end()) {
    auto& k = tracked_[it->second];
    if (k.data == data && k.id >= 0) return {k.id, false};
    // Refilled since the last sweep: a new generation (the caller swept first, so the old one's
    // free is already logged).
    k.data = data;
    k.id = next_id_++;
    k.alloc_stream = current;
    return {k.id, true};
  }
  Tracked k{c10::weak_intrusive_ptr<c10::StorageImpl>(t.storage().getWeakStorageImpl()), data, next_id_++, current};
  index_.emplace(impl, tracked_.size());
  tracked_.push_back(std::move(k));
  return {tracked_.back().id, true};
}

std::vector<StorageTracker::Freed> StorageTracker::sweep(StreamId current, std::vector<int64_t>& refilled) {
  std::vector<Freed> freed;
  std::vector<Tracked> kept;
  kept.reserve(tracked_.size());
  for (auto& k : tracked_) {
    auto strong = k.weak.lock();
    if (!strong) {  // the last reference was dropped: the allocation went back to its pool
      if (k.id >= 0) freed.push_back({k.id, k.alloc_stream, "released (last reference dropped)"});
      continue;
    }
    const void* data = strong->nbytes() > 0 ? strong->data_ptr().get() : nullptr;
    if (k.id >= 0 && data != k.data) {
      freed.push_back({k.id, k.alloc_stream, data ? "storage refilled (resized)" : "storage resized to 0"});
      k.id = -1;
    }
    if (k.id < 0 && data != nullptr) {  // refilled: a new allocation on the current stream
      k.id = next_id_++;
      k.alloc_stream = current;
      refilled.push_back(k.id);
    }
    k.data = data;
    kept.push_back(std::move(k));
  }
  tracked_ = std::move(kept);
  index_.clear();
  for (size_t i = 0; i < tracked_.size(); ++i) {
    auto strong = tracked_[i].weak.lock();
    index_.emplace(strong.get(), i);
  }
  return freed;
}

void StorageTracker::clear() {
  tracked_.clear();
  index_.clear();
}

std::string AllocSafetyViolation::message() const {
  return "allocator safety: " + tensor + " (storage #" + std::to_string(storage) + ", allocated on stream '" +
         alloc_stream + "') is used on stream '" + use_stream + "' at #" + std::to_string(use_seq) + " (" + use_label +
         ") and " + free_label + " at #" + std::to_string(free_seq) + " while '" + alloc_stream +
         "' is not ordered after that use, with no record_stream on '" + use_stream +
         "' and no reference held until then: the caching allocator may hand the block out again on '" + alloc_stream +
         "' under that use";
}

std::vector<AllocSafetyViolation> check_allocator_safety(Streams& streams, AllocSafetyStats* stats) {
  AllocSafetyStats local;
  auto& st_out = stats ? *stats : local;
  streams.flush_frees();
  struct Use {
    int64_t seq;
    std::string stream, label;
  };
  struct State {
    std::string alloc_stream;
    std::vector<std::string> names;
    std::vector<Use> uses;
    std::set<std::string> recorded_on;
  };
  std::map<int64_t, State> live;
  std::vector<AllocSafetyViolation> out;
  // A storage is named by the labels it was seen under: allocation, first uses, records (up to 4).
  auto name = [](State& st, const std::string& label) {
    if (label.empty() || st.names.size() >= 4) return;
    for (const auto& n : st.names)
      if (n == label) return;
    st.names.push_back(label);
  };
  for (const auto& e : streams.log()) {
    if (e.storage < 0) continue;
    auto& st = live[e.storage];
    switch (e.kind) {
      case StreamLogEntry::Kind::kAlloc:
        st.alloc_stream = e.stream;
        name(st, e.label);
        break;
      case StreamLogEntry::Kind::kUse:
        st.uses.push_back({e.seq, e.stream, e.label});
        name(st, e.label);
        break;
      case StreamLogEntry::Kind::kRecordStream:
        st.recorded_on.insert(e.stream);
        name(st, e.label);
        break;
      case StreamLogEntry::Kind::kFree: {
        std::string names;
        for (const auto& n : st.names) names += (names.empty() ? "'" : ", '") + n + "'";
        st_out.frees += 1;
        for (const auto& u : st.uses) {
          if (u.stream == st.alloc_stream) continue;
          st_out.cross_stream_uses += 1;
          if (st.recorded_on.count(u.stream) > 0) continue;
          if (streams.happens_before(u.seq, e.seq)) continue;
          AllocSafetyViolation v;
          v.storage = e.storage;
          v.tensor = names.empty() ? "an unnamed tensor" : names;
          v.alloc_stream = st.alloc_stream;
          v.use_stream = u.stream;
          v.use_label = u.label;
          v.use_seq = u.seq;
          v.free_label = e.label;
          v.free_seq = e.seq;
          out.push_back(std::move(v));
        }
        live.erase(e.storage);
        break;
      }
      default:
        break;
    }
  }
  return out;
}

}  // namespace zb::backends::common
