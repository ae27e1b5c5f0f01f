// test_run_report.cpp — the typed report record (reports/run_report.hpp): every committed report
// parses and re-serialises to the same JSON, the typed fields hold the values (a profiled
// report's profile with nothing left in `extra`), validation still
// refuses what it refused, and SCHEMA.md documents exactly the record's keys (planted faults).
#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <type_traits>

#include <gtest/gtest.h>

#include "reports/report.hpp"
#include "reports/run_report.hpp"
#include "tests/build_paths.hpp"

namespace {
using json = nlohmann::json;
using namespace zb::reports;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every *.json under `dir` whose schema is zerobench.report (recursively; POSIX, not std::filesystem).
void find_reports(const std::string& dir, std::vector<std::string>& out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      find_reports(path, out);
    } else if (name.size() > 5 && name.substr(name.size() - 5) == ".json") {
      const json j = json::parse(slurp(path), nullptr, false);
      if (j.is_object() && j.contains("schema") && j["schema"].is_object() &&
          j["schema"].value("name", "") == kSchemaName)
        out.push_back(path);
    }
  }
  closedir(d);
}

std::vector<std::string> committed_reports() {
  std::vector<std::string> out;
  find_reports(std::string(zb::bench::source_dir()) + "/reports/baselines", out);
  find_reports(std::string(zb::bench::source_dir()) + "/reports/results", out);
  return out;
}

TEST(RunReport, EveryCommittedReportRoundTripsByteForByte) {
  const auto files = committed_reports();
  ASSERT_GE(files.size(), 60u);  // 24 cpu-smoke baselines + 39 results reports when this was written
  for (const auto& f : files) {
    const std::string text = slurp(f);
    const json j = json::parse(text);
    ASSERT_TRUE(validate_report(j).empty()) << f;
    const RunReport r = run_report_from_json(j);
    const json back = to_json(r);
    EXPECT_EQ(back.dump(2), j.dump(2)) << f;
    EXPECT_EQ(back.dump(2) + "\n", text) << f << ": the file is not write_json_atomic's text";
    // The typed fields hold the values (not everything carried in extra).
    EXPECT_FALSE(r.extra.contains("summary") || r.extra.contains("env") || r.extra.contains("ranks")) << f;
    ASSERT_TRUE(r.summary && r.env && r.ranks && r.steps) << f;
    EXPECT_EQ(r.summary->tokens_per_gpu_per_s.median, j["summary"]["tokens_per_gpu_per_s"]["median"].get<double>());
    EXPECT_EQ(r.env->world_size, j["env"]["world_size"].get<int64_t>());
    EXPECT_EQ(r.ranks->at(0).memory.peak_tracked_bytes, j["ranks"][0]["memory"]["peak_tracked_bytes"].get<int64_t>());
    EXPECT_EQ(r.steps->size(), j["steps"].size());
    EXPECT_EQ(r.config.backend_name(), j["config"]["backend"]["name"].get<std::string>());
    // What crossval reads is typed too (reports before comm_steps / batch_sha256 lack them).
    const auto& r0 = r.ranks->at(0);
    const json& j0 = j["ranks"][0];
    EXPECT_EQ(r0.batch_sha256.has_value(), j0.contains("batch_sha256")) << f;
    if (r0.batch_sha256 && !r0.batch_sha256->empty()) {
      EXPECT_EQ(r0.batch_sha256->back(), j0["batch_sha256"].back().get<std::string>()) << f;
    }
    EXPECT_EQ(r0.comm_steps.has_value(), j0.contains("comm_steps")) << f;
    if (r0.comm_steps && !r0.comm_steps->empty()) {
      for (const auto& [kind, c] : r0.comm_steps->back()) {
        EXPECT_EQ(c.bytes, j0["comm_steps"].back()[kind]["bytes"].get<int64_t>()) << f << " " << kind;
      }
    }
    if (j0["memory"].contains("cuda")) {
      ASSERT_TRUE(r0.memory.cuda) << f;
      EXPECT_EQ(r0.memory.cuda->peak_allocated_bytes, j0["memory"]["cuda"]["peak_allocated_bytes"].get<int64_t>()) << f;
    }
  }
}

// Every `extra` in a record's tree emptied: what remains is only what the structs type.
template <class T, class = void>
struct has_extra : std::false_type {};
template <class T>
struct has_extra<T, std::void_t<decltype(std::declval<T&>().extra)>> : std::true_type {};
template <class T>
void strip_extra(T& t);
template <class T>
void strip_extra(std::optional<T>& t);
template <class T>
void strip_extra(std::vector<T>& v);
template <class T>
void strip_extra(std::map<std::string, T>& m);
struct StripExtra {
  template <class M>
  void operator()(const char*, M& member) { strip_extra(member); }
};
template <class T>
void strip_extra(std::optional<T>& t) {
  if (t) strip_extra(*t);
}
template <class T>
void strip_extra(std::vector<T>& v) {
  for (auto& x : v) strip_extra(x);
}
template <class T>
void strip_extra(std::map<std::string, T>& m) {
  for (auto& [k, x] : m) strip_extra(x);
}
template <class T>
void strip_extra(T& t) {
  if constexpr (has_extra<T>::value) {
    t.extra.keys = json::object();
    StripExtra s;
    t.fields(s);
  }
}

// A profiled report (--profile: the profile section and every rank's profile) parses into typed
// fields throughout: JSON -> RunReport -> JSON is byte-identical with every `extra` under the
// profiles emptied (a key a struct did not name, or a number read as another type, would be lost).
TEST(RunReport, AProfiledReportsProfileIsTypedThroughoutAndRoundTripsByteForByte) {
  const std::string path =
      std::string(zb::bench::source_dir()) + "/reports/results/cpu/compare-blog/runs/a_accelerate_fsdp_blog_r5.json";
  const std::string text = slurp(path);
  const json j = json::parse(text);
  ASSERT_TRUE(j["profile"].is_object());
  RunReport r = run_report_from_json(j);
  EXPECT_EQ(to_json(r).dump(2) + "\n", text);
  ASSERT_TRUE(r.profile && r.profile->ranks && r.ranks);
  strip_extra(*r.profile);
  for (auto& rank : *r.ranks) strip_extra(rank.profile);
  const json back = to_json(r);
  EXPECT_EQ(back["profile"].dump(2), j["profile"].dump(2));
  for (size_t i = 0; i < j["ranks"].size(); ++i) EXPECT_EQ(back["ranks"][i]["profile"].dump(2), j["ranks"][i]["profile"].dump(2));
  EXPECT_EQ(back.dump(2) + "\n", text);
  // The typed fields hold the values.
  const Profile& p = *r.profile;
  const json& jp = j["profile"];
  EXPECT_EQ(p.source, jp["source"].get<std::string>());
  EXPECT_EQ(p.steps_traced, jp["steps_traced"].get<int64_t>());
  EXPECT_EQ(p.summary->compute_pct, jp["summary"]["compute_pct"].get<double>());
  EXPECT_EQ(p.tracer_overhead->dropped_records, jp["tracer_overhead"]["dropped_records"].get<int64_t>());
  EXPECT_EQ(p.units->forward_s, jp["units"]["forward_s"].get<std::vector<double>>());
  ASSERT_EQ(p.ranks->size(), jp["ranks"].size());
  const RankProfile& r1 = p.ranks->back();
  const json& j1 = jp["ranks"].back();
  EXPECT_EQ(r1.rank, j1["rank"].get<int64_t>());
  EXPECT_EQ(r1.median.overlap_ratio, j1["median"]["overlap_ratio"].get<double>());
  EXPECT_EQ(r1.traced_step_times_s, j1["traced_step_times_s"].get<std::vector<double>>());
  ASSERT_EQ(r1.top_kernels.size(), j1["top_kernels"].size());
  EXPECT_EQ(r1.top_kernels[0].kernel_class, j1["top_kernels"][0]["class"].get<std::string>());
  ASSERT_EQ(r1.steps.size(), j1["steps"].size());
  EXPECT_EQ(r1.steps[0].by_class.at("communication").count, j1["steps"][0]["by_class"]["communication"]["count"].get<int64_t>());
  EXPECT_EQ(r1.units.window_s, j1["units"]["window_s"].get<double>());
  EXPECT_FALSE(r1.skipped_records.has_value());  // only when the tracer skipped a record
  // Every rank's profile is the same object as the section's entry for it.
  EXPECT_EQ(to_json(r.ranks->back()).at("profile"), to_json(p).at("ranks").back());
  // skipped_records (CUPTI) is written only when the tracer skipped something, as integers.
  RankProfile made = r1;
  EXPECT_FALSE(to_json(made).contains("skipped_records"));
  made.skipped_records = ProfileSkippedRecords{3, 0, 1, {}};
  EXPECT_EQ(to_json(made)["skipped_records"].dump(), R"({"no_timestamp":0,"other_kind":3,"unreadable_buffers":1})");
}

TEST(RunReport, FailedAndHandBuiltReportsRoundTrip) {
  json failed = failed_report("timeout", "rank 1 timed out", {{"cell", "c1"}, {"options", {{"backend", "fsdp"}}}});
  ASSERT_TRUE(validate_report(failed).empty());
  RunReport r = run_report_from_json(failed);
  EXPECT_EQ(to_json(r), failed);
  EXPECT_FALSE(r.env.has_value());
  EXPECT_EQ(r.config.backend_name(), "fsdp");
  EXPECT_EQ(r.config.precision_name(), "?");
  // null where a number is typed (a diverged step's loss, a skipped step's grad norm, CUDA's
  // peak_program_bytes) is carried as null, not turned into 0.
  json step = {{"step", 3}, {"loss", nullptr}, {"grad_norm", nullptr}, {"lr", 1e-3}, {"time_s", 0.5}};
  json j = failed;
  j["steps"] = json::array({step});
  j["profile"] = nullptr;
  r = run_report_from_json(j);
  EXPECT_FALSE(r.steps->at(0).loss.has_value());
  EXPECT_DOUBLE_EQ(*r.steps->at(0).lr, 1e-3);
  EXPECT_FALSE(r.profile.has_value());
  EXPECT_EQ(to_json(r).dump(), j.dump());
  // A record filled in code writes its typed fields.
  RunReport made;
  made.schema = {kSchemaName, kSchemaVersion, {}};
  made.run_id = "x";
  made.created = "2026-11-27T00:00:00Z";
  made.status.state = "failed";
  made.status.error = "e";
  EXPECT_TRUE(validate_report(to_json(made)).empty()) << validate_report(to_json(made)).front();
}

TEST(RunReport, ValidationRefusesWhatItRefused) {
  const auto files = committed_reports();
  ASSERT_FALSE(files.empty());
  json j = json::parse(slurp(files.front()));
  j["summary"]["mfu"] = "high";
  auto p = validate_report(j);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), "summary/mfu: expected number");
  j = json::parse(slurp(files.front()));
  j["status"]["state"] = "fine";
  EXPECT_FALSE(validate_report(j).empty());
  // What crossval compares per step (checked when present).
  j = json::parse(slurp(files.front()));
  j["ranks"][0]["batch_sha256"] = json::array({"ab", nullptr});
  p = validate_report(j);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), "ranks[0]/batch_sha256: expected strings");
  j = json::parse(slurp(files.front()));
  j["ranks"][0]["comm_steps"] = json::array({{{"all_gather", {{"count", "5"}, {"bytes", 0}}}}});
  p = validate_report(j);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), "ranks[0]/comm_steps[0]/all_gather/count: expected number");
  j = json::parse(slurp(files.front()));
  j["steps"][0]["comm"] = {{"broadcast", {{"count", 1}}}};
  p = validate_report(j);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), "steps[0]/comm/broadcast/bytes: missing");
  j = json::parse(slurp(files.front()));
  j["ranks"][0]["memory"]["cuda"]["peak_allocated_bytes"] = "lots";
  p = validate_report(j);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.front(), "ranks[0]/memory/cuda/peak_allocated_bytes: expected number");
}

TEST(RunReport, SchemaDocMatchesTheRecord) {
  const std::string md = slurp(std::string(zb::bench::source_dir()) + "/reports/SCHEMA.md");
  const auto problems = check_schema_doc(md);
  EXPECT_TRUE(problems.empty()) << problems.front();
  // Planted: the loss_scale row removed -> its typed keys are undocumented.
  std::string no_row = md;
  const auto at = no_row.find("| `steps[j].loss_scale` |");
  ASSERT_NE(at, std::string::npos);
  no_row.erase(at, no_row.find('\n', at) + 1 - at);
  const auto missing = check_schema_doc(no_row);
  ASSERT_FALSE(missing.empty());
  EXPECT_EQ(missing.front(), "SCHEMA.md does not document the record's key steps[i].loss_scale.kind");
  // Planted: a documented key the record does not have.
  std::string extra_row = md;
  extra_row.insert(extra_row.find("| `summary.skipped_steps` |"), "| `summary.tokens_per_watt` | number | made up |\n");
  const auto unknown = check_schema_doc(extra_row);
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown.front(), "SCHEMA.md documents summary.tokens_per_watt, which the record neither types nor carries");
  // Planted: a dim dropped from config.model's meaning.
  std::string no_dim = md;
  no_dim.replace(no_dim.find("`kv_heads`, "), 12, "");
  const auto dim = check_schema_doc(no_dim);
  ASSERT_EQ(dim.size(), 1u);
  EXPECT_EQ(dim.front(), "SCHEMA.md does not document the record's key config.model.kv_heads");
}

}  // namespace
