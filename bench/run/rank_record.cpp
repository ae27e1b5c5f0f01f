// rank_record.cpp — the typed records of one rank of `run` (see rank_record.hpp).
#include "bench/run/rank_record.hpp"

#include "backends/common/comm.hpp"
#include "bench/lifecycle/checkpoint.hpp"
#include "reports/stats.hpp"

namespace zb::bench {
namespace {
using backends::common::CollectiveKind;

// Every kind that is reported in this snapshot: used, or always reported.
template <class F>
void for_each_reported(const CommSnapshot& stats, F&& f) {
  for (size_t k = 0; k < stats.size(); ++k)
    if (stats[k].count > 0 || backends::common::reported_when_unused(CollectiveKind(k)))
      f(CollectiveKind(k), stats[k]);
}

reports::OffloadTraffic traffic_record(const backends::common::OffloadTraffic& t) {
  reports::OffloadTraffic r;
  r.h2d_bytes = t.h2d_bytes;
  r.d2h_bytes = t.d2h_bytes;
  r.h2d_copies = t.h2d_copies;
  r.d2h_copies = t.d2h_copies;
  return r;
}

// Offload (docs/metrics.md "Offload"): where the model states live and what crossed between host
// and device, per step. None for a run that offloads nothing.
std::optional<reports::Offload> offload_record(const TrainResult& r, const std::optional<backends::PeakEstimate>& e) {
  const auto& h = r.model_state_bytes.host;
  if (h.total() == 0 && r.offload_total.h2d_bytes == 0 && r.offload_total.d2h_bytes == 0) return std::nullopt;
  reports::Offload o;
  o.device_model_states_bytes = r.model_state_bytes.total();
  o.host_model_states_bytes = h.total();
  o.host_pinned = h.pinned;
  o.estimated_host_peak_bytes = e ? e->host_peak_bytes() : 0;
  o.peak_host_tracked_bytes = r.peak_host_tracked_bytes;  // CUDA runs (unpinned host buffers)
  o.steps.emplace();
  for (const auto& s : r.steps) o.steps->push_back(traffic_record(s.offload));
  o.last_step = o.steps->empty() ? traffic_record({}) : o.steps->back();
  o.total = traffic_record(r.offload_total);
  return o;
}

// What could make the program-order peak depend on timing, over the peak window (all 0 when it
// is exact), and the largest comm buffers one collective held in it.
reports::ProgramOrder program_order_record(const runtime::ProgramLedgerStats& l) {
  reports::ProgramOrder p;
  p.exact = l.late_frees == 0 && l.open_at_read == 0;
  p.late_frees = l.late_frees;
  p.open_collectives_at_read = l.open_at_read;
  p.other_thread_peak_bytes = l.other_thread_peak_bytes;
  p.comm_buffers_peak_bytes = l.comm_buffers_peak_bytes;
  return p;
}

reports::MemoryEstimate estimate_record(const backends::PeakEstimate& e) {
  reports::MemoryEstimate m;
  m.peak_bytes = e.peak_bytes();
  m.extra.keys = backends::to_json(e);  // its breakdown (terms, moments), the backend's shape
  m.extra.keys.erase("peak_bytes");
  return m;
}

reports::RankMemory memory_record(const TrainResult& r, const RankInputs& in) {
  reports::RankMemory m;
  m.model_states_bytes = model_states_record(r.model_state_bytes);
  m.model_states_total_bytes = r.model_state_bytes.total();
  // The backend's closed form for this rank (docs/backends/*.md), next to what it owns.
  m.model_states_expected_bytes = model_states_record(in.expected_bytes);
  // The pre-flight estimate of this rank's peak (BackendInfo::training.estimate_peak), next to the measured
  // peaks below (peak_tracked_bytes: the counting CPU allocator or CUDA allocated).
  m.estimated_peak_bytes = in.estimate ? in.estimate->peak_bytes() : 0;
  if (in.estimate) m.estimate = estimate_record(*in.estimate);
  else m.extra.keys["estimate"] = nullptr;
  m.tracked_after_init_bytes = r.tracked_after_init_bytes;
  m.peak_tracked_bytes = r.peak_tracked_bytes;
  // The program-order peak (runtime/memory.hpp): comm buffers held from issue to wait, so it does
  // not depend on when collectives complete — what `regress` gates. CPU only (null on CUDA).
  if (r.peak_program_bytes >= 0) {
    m.peak_program_bytes = r.peak_program_bytes;
    m.program_order = program_order_record(r.program_ledger);
  } else {
    m.extra.keys["peak_program_bytes"] = nullptr;
    m.extra.keys["program_order"] = nullptr;
  }
  m.peak_from_step = r.peak_from_step;
  m.peak_rss_bytes = in.peak_rss_bytes;
  const auto& c = in.cpu_block_cache;
  m.cpu_block_cache = reports::CpuBlockCache{c.limit_bytes, c.hits, c.misses, c.evictions, c.cached_bytes,
                                             c.cached_peak_bytes, {}};
  const auto& peaks = r.cuda_peaks;  // over the peak window: no warm-up, trace or profiled step
  reports::CudaMemory cuda;
  cuda.after_init_allocated_bytes = r.cuda_after_init.allocated_bytes;
  cuda.after_init_reserved_bytes = r.cuda_after_init.reserved_bytes;
  cuda.allocated_bytes = peaks.allocated_bytes;
  cuda.peak_allocated_bytes = peaks.peak_allocated_bytes;
  cuda.reserved_bytes = peaks.reserved_bytes;
  cuda.peak_reserved_bytes = peaks.peak_reserved_bytes;
  // Device memory in use (cudaMemGetInfo) minus what the caching allocator holds: the CUDA context,
  // NCCL communicator buffers and other non-allocator memory (device-wide).
  cuda.outside_allocator_bytes = peaks.device_used_bytes > 0 ? peaks.device_used_bytes - peaks.reserved_bytes : 0;
  m.cuda = cuda;
  return m;
}
}  // namespace

std::map<std::string, reports::CommStat> comm_records(const CommSnapshot& stats, int world_size) {
  std::map<std::string, reports::CommStat> out;
  for_each_reported(stats, [&](CollectiveKind kind, const backends::common::CollectiveStats& c) {
    auto& s = out[backends::common::collective_name(kind)];
    s.count = c.count;
    s.bytes = c.bytes;
    s.time_s = c.time_s;
    s.wait_s = c.wait_s;
    // algbw = bytes / time; busbw = algbw * factor (nccl-tests' PERFORMANCE.md).
    s.busbw_gbps = c.time_s > 0 ? double(c.bytes) / c.time_s * backends::common::busbw_factor(kind, world_size) / 1e9
                                : 0.0;
    if (c.untimed > 0) s.untimed = c.untimed;
    if (c.not_measured > 0) {  // emulated: no time or busbw is measured; null, never a number
      s.not_measured = c.not_measured;
      if (c.not_measured == c.count) {
        s.time_s.reset();
        s.extra.keys["time_s"] = nullptr;
      }
      s.busbw_gbps.reset();
      s.extra.keys["busbw_gbps"] = nullptr;
      s.timing = "not measured: emulated collectives are local copies on the issuing stream";
    }
  });
  return out;
}

std::map<std::string, reports::StepComm> step_comm_records(const CommSnapshot& stats) {
  std::map<std::string, reports::StepComm> out;
  for_each_reported(stats, [&](CollectiveKind kind, const backends::common::CollectiveStats& c) {
    auto& s = out[backends::common::collective_name(kind)];
    s.count = c.count;
    s.bytes = c.bytes;
  });
  return out;
}

// The five categories, on the device or on the host.
template <class To, class From>
void copy_categories(To& to, const From& from) {
  to.params = from.params;
  to.master_params = from.master_params;
  to.grads = from.grads;
  to.optimizer = from.optimizer;
  to.buffers = from.buffers;
}

reports::ModelStates model_states_record(const backends::ModelStateBytes& b) {
  reports::ModelStates m;
  copy_categories(m, b);
  if (const auto& h = b.host; h.total() > 0) {  // only when something is offloaded
    reports::HostModelStates host;
    copy_categories(host, h);
    host.pinned = h.pinned;
    m.host = host;
  }
  return m;
}

reports::CheckpointRecord checkpoint_record(const lifecycle::CheckpointStats& s) {
  reports::CheckpointRecord c;
  c.saves = s.saves;
  c.save_s_total = s.save_s_total;
  c.save_s_max = s.save_s_max;
  c.bytes_written = s.bytes_written;
  c.peak_rss_bytes = s.peak_rss_bytes;
  c.longest_wait_s = s.longest_wait_s;
  c.load_s = s.load_s;
  c.bytes_read = s.bytes_read;
  c.resumed_from_step = s.resumed_from_step;
  c.last_tag = s.last_tag;
  return c;
}

reports::RankRecord rank_record(const TrainResult& result, const RankInputs& in) {
  reports::RankRecord r;
  r.rank = in.rank;
  r.host = in.host;
  r.memory = memory_record(result, in);
  if (auto o = offload_record(result, in.estimate)) r.offload = std::move(*o);
  else r.extra.keys["offload"] = nullptr;
  r.comm = comm_records(result.comm_last_step, in.world_size);
  r.comm_total = comm_records(result.comm_total, in.world_size);
  // This rank's collectives and inputs per step (zerobench crossval compares every rank's).
  r.comm_steps.emplace();
  r.batch_sha256.emplace();
  r.step_times_s.emplace();
  for (const auto& s : result.steps) {
    r.comm_steps->push_back(step_comm_records(s.comm));
    r.batch_sha256->push_back(s.batch_sha256);
    if (s.measured) r.step_times_s->push_back(s.time_s);
  }
  r.lifecycle = reports::RankLifecycle{in.load, in.checkpoint, {}};
  // NCCL collectives whose device time could not be read (comm.<kind>.untimed counts them).
  if (!in.comm_timing_error.empty()) r.comm_timing_error = in.comm_timing_error;
  if (result.profile) {
    const auto& p = *result.profile;
    auto prof = profiler::rank_profile(p.activities, p.windows);
    prof.rank = in.rank;
    prof.traced_step_times_s = p.step_times_s;
    prof.dropped_records = p.dropped_records;
    if (p.skipped_records.total() > 0)
      prof.skipped_records = reports::ProfileSkippedRecords{p.skipped_records.other_kind, p.skipped_records.no_timestamp,
                                                            p.skipped_records.unreadable_buffers, {}};
    prof.buffer_processing_s = p.processing_s;
    r.profile = std::move(prof);
  }
  return r;
}

std::vector<reports::StepRecord> step_records(const TrainResult& result, bool cuda) {
  std::vector<reports::StepRecord> out;
  for (const auto& s : result.steps) {
    reports::StepRecord r;
    r.step = s.step;
    r.loss = s.loss;
    r.grad_norm = s.grad_norm;
    r.lr = s.lr;
    if (s.betas) {  // OneCycle with cycle_momentum: the betas it set this step
      r.beta1 = s.betas->first;
      r.beta2 = s.betas->second;
    }
    r.time_s = s.time_s;
    r.measured = s.measured;
    if (s.lost_update_fraction >= 0) r.lost_update_fraction = s.lost_update_fraction;
    if (s.loss_scale.enabled) {  // fp16 (Engine::loss_scale_step; SCHEMA.md steps[i].loss_scale)
      const auto& l = s.loss_scale;
      r.loss_scale = reports::LossScale{l.kind, l.scale, l.next_scale, l.overflow, l.skipped, {}};
      if (l.skipped) {  // the overflowed norm (inf): no number
        r.grad_norm.reset();
        r.extra.keys["grad_norm"] = nullptr;
      }
    }
    r.peak_tracked_bytes = s.peak_tracked_bytes;  // rank 0's, this step only
    if (s.peak_program_bytes >= 0) r.peak_program_bytes = s.peak_program_bytes;
    if (cuda) {
      r.peak_allocated_bytes = s.peak_allocated_bytes;
      r.peak_reserved_bytes = s.peak_reserved_bytes;
    }
    r.comm = step_comm_records(s.comm);  // rank 0's collectives in this step (count, bytes)
    out.push_back(std::move(r));
  }
  return out;
}

namespace {
// Every member of a breakdown, in its fields() order (all are numbers).
std::vector<double*> breakdown_fields(reports::ProfileBreakdown& b) {
  std::vector<double*> out;
  auto each = [&](const char*, double& field) { out.push_back(&field); };
  b.fields(each);
  return out;
}
}  // namespace

reports::Profile profile_section(const std::vector<reports::RankRecord>& ranks,
                                 const std::vector<double>& untraced_step_times, const std::string& source) {
  std::vector<reports::RankProfile> per_rank;
  for (const auto& r : ranks)
    if (r.profile) per_rank.push_back(*r.profile);
  auto median_over_ranks = [&](auto get) {
    std::vector<double> v;
    for (auto& r : per_rank) v.push_back(get(r));
    return reports::summarize(v).median;
  };
  // The median over ranks of each of their per-step medians.
  reports::ProfileBreakdown summary;
  const auto summary_fields = breakdown_fields(summary);
  for (size_t i = 0; i < summary_fields.size(); ++i)
    *summary_fields[i] = median_over_ranks([i](reports::RankProfile& r) { return *breakdown_fields(r.median)[i]; });
  // Per-unit compute times: the median over ranks of each rank's per-step medians.
  reports::ProfileUnits units;
  using U = reports::ProfileUnits;
  for (std::optional<double> U::*f : {&U::forward_total_s, &U::backward_total_s, &U::optimizer_s, &U::window_s,
                                      &U::other_s, &U::root_forward_pre_s, &U::root_backward_post_s})
    units.*f = median_over_ranks([f](const reports::RankProfile& r) { return (r.units.*f).value_or(0.0); });
  for (std::vector<double> U::*f : {&U::forward_s, &U::backward_s})
    for (size_t u = 0; u < (per_rank.front().units.*f).size(); ++u)
      (units.*f).push_back(median_over_ranks([f, u](const reports::RankProfile& r) {
        const auto& times = r.units.*f;
        return u < times.size() ? times[u] : 0.0;
      }));
  // The tracer's overhead, rank 0's view: its traced steps against the untraced ones.
  const auto& first = per_rank.front();
  const double traced_median = reports::summarize(first.traced_step_times_s).median;
  const double untraced_median = reports::summarize(untraced_step_times).median;
  reports::TracerOverhead overhead;
  overhead.traced_step_time_s = traced_median;
  overhead.untraced_step_time_s = untraced_median;
  overhead.overhead_pct = untraced_median > 0 ? 100.0 * (traced_median / untraced_median - 1.0) : 0.0;
  overhead.buffer_processing_s = first.buffer_processing_s;
  overhead.dropped_records = first.dropped_records;
  reports::Profile out;
  out.source = source;
  out.steps_traced = int64_t(first.traced_step_times_s.size());
  out.overlap_ratio = summary.overlap_ratio;
  out.exposed_comm_s = summary.exposed_comm_s;
  out.summary = summary;
  out.units = units;
  out.tracer_overhead = overhead;
  out.trace_file = "";
  out.ranks = std::move(per_rank);
  return out;
}

}  // namespace zb::bench
