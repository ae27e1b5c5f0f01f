// rank_record.hpp — what one rank of `run` measured, as the typed report records
// (reports/run_report.hpp): its RankRecord, rank 0's StepRecords and the report's profile section
// made from every rank's record. Owns: the mapping from the trainer's TrainResult, the engine's
// collective counters, the memory estimate and the load/checkpoint measurements to the records.
// Must not: measure (bench/run/trainer.cpp does), or assemble the report (run_command.cpp does,
// through reports/report_builder.hpp).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/run/trainer.hpp"
#include "reports/run_report.hpp"

namespace zb::bench::lifecycle {
struct CheckpointStats;
}

namespace zb::bench {

// One snapshot of collective counters by kind, as `ranks[i].comm` writes them (SCHEMA.md): kinds
// with no collective are left out unless always reported; bus bandwidth from the time.
std::map<std::string, reports::CommStat> comm_records(const CommSnapshot& stats, int world_size);
// One step's collectives by kind: {count, bytes} (`ranks[i].comm_steps[j]`, `steps[j].comm`).
std::map<std::string, reports::StepComm> step_comm_records(const CommSnapshot& stats);
reports::ModelStates model_states_record(const backends::ModelStateBytes& b);
reports::CheckpointRecord checkpoint_record(const lifecycle::CheckpointStats& s);

// What rank_record needs besides the trainer's result.
struct RankInputs {
  int rank = 0, world_size = 1;
  std::string host;
  backends::ModelStateBytes expected_bytes;            // the backend's closed form
  std::optional<backends::PeakEstimate> estimate;      // none: the backend has no estimate
  int64_t peak_rss_bytes = 0;
  runtime::CpuBlockCacheStats cpu_block_cache;
  reports::LoadRecord load;
  reports::CheckpointRecord checkpoint;
  std::string comm_timing_error;                       // empty: every collective timed
};
reports::RankRecord rank_record(const TrainResult& result, const RankInputs& in);

// Rank 0's record of each step run (its peaks; the loss and norm every rank agrees on).
std::vector<reports::StepRecord> step_records(const TrainResult& result, bool cuda);

// The report's profile section: each rank's analysis, the median over ranks of each rank's
// per-step medians, and the tracer's overhead (traced vs untraced step time, rank 0's view).
// Every rank in `ranks` carries its profile; trace_file is "" (run_command sets it with --trace).
reports::Profile profile_section(const std::vector<reports::RankRecord>& ranks,
                                 const std::vector<double>& untraced_step_times, const std::string& source);

}  // namespace zb::bench
