// The profiler's GPU-independent logic on recorded activity fixtures: kernel classification
// (real H100/A100 kernel names), interval arithmetic, HTA's temporal breakdown and overlap,
// exposed communication, top kernels, the host source, the Chrome/Perfetto export; and
// `zerobench run --profile --trace` end to end on CPU; the report's profile section made from
// every rank's typed profile (bench/run/rank_record.hpp). In a CUDA build also the CUPTI tracer's
// record parsing (profiler/cupti_records.hpp) on a synthetic activity buffer built from the
// CUPTI headers' own record structs and walked by the real libcupti, with no GPU.
#include <gtest/gtest.h>

#include <fstream>
#ifdef ZEROBENCH_WITH_CUDA
#include <cupti.h>

#include <cstring>

#include "profiler/cupti_records.hpp"
#endif

#include "bench/run/rank_record.hpp"
#include "profiler/activity.hpp"
#include "profiler/analysis.hpp"
#include "profiler/chrome_trace.hpp"
#include "profiler/host_source.hpp"
#include "reports/report.hpp"
#include "tests/run_binary.hpp"

using namespace zb::profiler;

namespace {
Activity kernel(const std::string& name, int64_t start, int64_t end, int64_t stream, int64_t correlation = 0) {
  Activity a;
  a.kind = ActivityKind::kKernel;
  a.name = name;
  a.start_ns = start;
  a.end_ns = end;
  a.stream = stream;
  a.correlation = correlation;
  return a;
}
Activity of_kind(ActivityKind kind, const std::string& name, int64_t start, int64_t end, int64_t stream = 7) {
  Activity a = kernel(name, start, end, stream);
  a.kind = kind;
  return a;
}
const char* kNccl = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
const char* kGemm = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT";
const char* kFlash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
                     "cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>(Flash_fwd_params)";
const char* kElementwise = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
                           "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)";
}  // namespace

TEST(KernelClassification, RealKernelNamesFallIntoTheirClasses) {
  EXPECT_EQ(classify_kernel_name(kNccl), KernelClass::kCommunication);
  EXPECT_EQ(classify_kernel_name("ncclKernel_ReduceScatter_RING_LL_Sum_bf16"), KernelClass::kCommunication);
  EXPECT_EQ(classify_kernel_name(kGemm), KernelClass::kGemm);
  EXPECT_EQ(classify_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
                                 "execute_segment_k_off_kernel__5x_cublas"),
            KernelClass::kGemm);
  EXPECT_EQ(classify_kernel_name("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"), KernelClass::kGemm);
  EXPECT_EQ(classify_kernel_name("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
                                 "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)"),
            KernelClass::kGemm);
  EXPECT_EQ(classify_kernel_name(kFlash), KernelClass::kAttention);
  EXPECT_EQ(classify_kernel_name("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
                                 "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)"),
            KernelClass::kAttention);
  EXPECT_EQ(classify_kernel_name("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1"),
            KernelClass::kAttention);
  EXPECT_EQ(classify_kernel_name(kElementwise), KernelClass::kElementwiseOther);
  EXPECT_EQ(classify_kernel_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
                                 "namespace)::OpaqueType<2u>, unsigned int, 1, 128, 1>(...)"),
            KernelClass::kElementwiseOther);
  // "nccl" must start the name (HTA's rule), not appear inside it.
  EXPECT_EQ(classify_kernel_name("my_nccl_wrapper_kernel"), KernelClass::kElementwiseOther);
  EXPECT_EQ(classify(of_kind(ActivityKind::kMemcpy, "memcpy", 0, 1)), KernelClass::kMemory);
  EXPECT_EQ(classify(of_kind(ActivityKind::kMemset, "memset", 0, 1)), KernelClass::kMemory);
  EXPECT_EQ(classify(of_kind(ActivityKind::kRuntime, "cudaLaunchKernel", 0, 1)), KernelClass::kNotKernel);
  EXPECT_EQ(classify(of_kind(ActivityKind::kRange, "step 3", 0, 1)), KernelClass::kNotKernel);
  EXPECT_EQ(classify(of_kind(ActivityKind::kCollective, "all_gather unit1", 0, 1)), KernelClass::kCommunication);
  EXPECT_EQ(classify(of_kind(ActivityKind::kHostCompute, "training thread", 0, 1)), KernelClass::kHostCompute);
  EXPECT_TRUE(is_compute(KernelClass::kGemm));
  EXPECT_TRUE(is_compute(KernelClass::kHostCompute));
  EXPECT_FALSE(is_compute(KernelClass::kCommunication));
  EXPECT_FALSE(is_compute(KernelClass::kMemory));
}

TEST(Intervals, UnionIntersectionAndSubtraction) {
  EXPECT_EQ(interval_union({{5, 9}, {0, 3}, {2, 4}, {9, 10}, {7, 7}}),
            (std::vector<Interval>{{0, 4}, {5, 10}}));
  EXPECT_EQ(covered_ns({{0, 4}, {5, 10}}), 9);
  EXPECT_EQ(intersection_ns({{0, 4}, {5, 10}}, {{3, 6}, {8, 20}}), 1 + 1 + 2);
  EXPECT_EQ(intersection_ns({}, {{0, 5}}), 0);
  EXPECT_EQ(subtract({0, 10}, {{-5, 1}, {3, 4}, {9, 12}}), (std::vector<Interval>{{1, 3}, {4, 9}}));
  EXPECT_EQ(subtract({0, 10}, {}), (std::vector<Interval>{{0, 10}}));
}

// Window [0, 100): compute on stream 7 at [0,40) and [50,70); an all-gather on stream 20 at
// [30,60); a memcpy at [80,90); a runtime call (not device time). Busy = [0,70) + [80,90) = 80,
// compute 60, non-compute 20, idle 20; comm 30 of which [30,40) and [50,60) overlap compute.
TEST(StepAnalysis, TemporalBreakdownOverlapAndExposedCommunicationFollowHta) {
  const std::vector<Activity> acts = {kernel(kGemm, 0, 40, 7), kernel(kFlash, 50, 70, 7), kernel(kNccl, 30, 60, 20),
                                      of_kind(ActivityKind::kMemcpy, "memcpy", 80, 90),
                                      of_kind(ActivityKind::kRuntime, "cudaLaunchKernel", 0, 100)};
  const auto p = analyze_step(acts, {3, 0, 100});
  EXPECT_EQ(p.step, 3);
  EXPECT_EQ(p.window_ns, 100);
  EXPECT_EQ(p.busy_ns, 80);
  EXPECT_EQ(p.compute_ns, 60);
  EXPECT_EQ(p.non_compute_ns, 20);
  EXPECT_EQ(p.idle_ns, 20);
  EXPECT_EQ(p.comm_ns, 30);
  EXPECT_EQ(p.comm_overlapped_ns, 20);
  EXPECT_EQ(p.exposed_comm_ns, 10);
  EXPECT_DOUBLE_EQ(p.overlap_ratio(), 2.0 / 3.0);
  EXPECT_EQ(p.by_class.at(KernelClass::kGemm).total_ns, 40);
  EXPECT_EQ(p.by_class.at(KernelClass::kAttention).count, 1);
  EXPECT_EQ(p.by_class.at(KernelClass::kMemory).total_ns, 10);
  EXPECT_EQ(p.by_class.count(KernelClass::kNotKernel), 0u);
}

TEST(StepAnalysis, ActivityIsClippedToTheWindowAndConcurrentComputeCountsOnce) {
  // Two GEMMs on two streams at the same time cover 10 ns of compute, not 20; a kernel that
  // straddles the window's end counts only inside it; one outside counts nothing.
  const std::vector<Activity> acts = {kernel(kGemm, 10, 20, 7), kernel(kGemm, 10, 20, 8), kernel(kNccl, 90, 130, 20),
                                      kernel(kGemm, 200, 300, 7)};
  const auto p = analyze_step(acts, {0, 0, 100});
  EXPECT_EQ(p.compute_ns, 10);
  EXPECT_EQ(p.by_class.at(KernelClass::kGemm).total_ns, 20);  // summed per kernel
  EXPECT_EQ(p.comm_ns, 10);
  EXPECT_EQ(p.exposed_comm_ns, 10);
  EXPECT_DOUBLE_EQ(p.overlap_ratio(), 0.0);
  EXPECT_EQ(p.idle_ns, 80);
  // No communication at all: the ratio is 0, not a division by zero.
  EXPECT_DOUBLE_EQ(analyze_step({kernel(kGemm, 0, 5, 7)}, {0, 0, 10}).overlap_ratio(), 0.0);
}

TEST(StepAnalysis, TopKernelsAreGroupedByNameAndOrderedByTime) {
  const std::vector<Activity> acts = {kernel(kGemm, 0, 10, 7),  kernel(kGemm, 20, 30, 7), kernel(kNccl, 0, 15, 20),
                                      kernel(kElementwise, 40, 41, 7), kernel(kGemm, 500, 900, 7) /* outside */};
  const auto top = top_kernels(acts, {{0, 0, 100}}, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].name, kGemm);
  EXPECT_EQ(top[0].count, 2);
  EXPECT_EQ(top[0].total_ns, 20);
  EXPECT_EQ(top[1].name, kNccl);
  EXPECT_EQ(top[1].cls, KernelClass::kCommunication);
  const auto p = rank_profile(acts, {{0, 0, 100}, {1, 100, 200}}, 5);
  EXPECT_EQ(p.steps.size(), 2u);
  ASSERT_EQ(p.top_kernels.size(), 3u);
  EXPECT_EQ(p.top_kernels[0].name, kGemm);
  EXPECT_EQ(p.top_kernels[1].kernel_class, "communication");
  EXPECT_DOUBLE_EQ(p.top_kernels[0].pct_of_kernel_time, 100.0 * 20 / 36);
  // Step 1 holds only [100,200) of the outside GEMM: nothing; median over the two steps.
  EXPECT_DOUBLE_EQ(p.steps[1].compute_s, 0.0);
  EXPECT_EQ(p.steps[0].by_class.at("communication").count, 1);
  EXPECT_DOUBLE_EQ(p.median.window_s, 100e-9);
  // Step 0: GEMM 20 ns + element-wise 1 ns of compute, NCCL [0,15) beside the GEMM's [0,10).
  EXPECT_DOUBLE_EQ(p.median.compute_pct, 100.0 * 0.5 * (21e-9 + 0.0) / 100e-9);
}

TEST(HostSource, TheTrainingThreadComputesExceptWhileBlockedInWait) {
  // Window [0,100). An all-gather in flight [10,50), waited for [40,50); a reduce-scatter in
  // flight [60,90), waited for [60,90) (issued and waited at once: fully exposed).
  const std::vector<HostCollective> cs = {{"all_gather unit1", 10, 50, 40, 50, 64}, {"reduce_scatter unit1", 60, 90, 60, 90, 32}};
  const auto acts = host_activities(cs, {{0, 0, 100}});
  const auto p = analyze_step(acts, {0, 0, 100});
  EXPECT_EQ(p.compute_ns, 100 - 10 - 30);
  EXPECT_EQ(p.comm_ns, 40 + 30);
  EXPECT_EQ(p.comm_overlapped_ns, 30);  // [10,40)
  EXPECT_EQ(p.exposed_comm_ns, 40);     // exactly the time spent in wait()
  EXPECT_EQ(p.idle_ns, 0);
}

TEST(UnitTimes, HostComputeInsideEachUnitRangeExcludesWaitsAndTheRootIsTheRest) {
  // Window [0,1000). Forward [0,400) nests "forward unit1" [100,200) and "forward unit2"
  // [200,350); backward [400,900) nests "backward unit2" [450,600) and "backward unit1"
  // [600,800); optimizer [900,1000). The thread is blocked in wait() over [150,180) (inside
  // unit 1's forward) and [850,870) (in the root's backward).
  const std::vector<HostCollective> cs = {{"all_gather unit1", 140, 180, 150, 180, 8},
                                          {"reduce_scatter unit1", 800, 870, 850, 870, 8}};
  auto acts = host_activities(cs, {{0, 0, 1000}});
  auto range = [](const std::string& name, int64_t a, int64_t b) { return of_kind(ActivityKind::kRange, name, a, b); };
  for (auto r : {range("forward", 0, 400), range("forward unit1", 100, 200), range("forward unit2", 200, 350),
                 range("backward", 400, 900), range("backward unit2", 450, 600), range("backward unit1", 600, 800),
                 range("optimizer_step", 900, 1000), range("forward unit0", 0, 400) /* nests: not used */})
    acts.push_back(r);
  const auto t = unit_times(acts, {0, 0, 1000});
  ASSERT_EQ(t.forward_s.size(), 3u);
  EXPECT_DOUBLE_EQ(t.forward_s[1], 70e-9);  // 100 ns minus 30 ns blocked
  EXPECT_DOUBLE_EQ(t.forward_s[2], 150e-9);
  EXPECT_DOUBLE_EQ(t.forward_total_s, 370e-9);
  EXPECT_DOUBLE_EQ(t.forward_s[0], 370e-9 - 70e-9 - 150e-9);
  EXPECT_DOUBLE_EQ(t.backward_s[2], 150e-9);
  EXPECT_DOUBLE_EQ(t.backward_s[1], 200e-9);
  EXPECT_DOUBLE_EQ(t.backward_s[0], 480e-9 - 350e-9);
  EXPECT_DOUBLE_EQ(t.optimizer_s, 100e-9);
  EXPECT_DOUBLE_EQ(t.window_s, 1000e-9);
  EXPECT_DOUBLE_EQ(t.other_s, 0.0);  // forward, backward and the optimizer cover the window
  // Two micro-batches: a unit's ranges add up within the step; the JSON carries the median over steps.
  acts.push_back(range("forward unit1", 210, 220));
  EXPECT_DOUBLE_EQ(unit_times(acts, {0, 0, 1000}).forward_s[1], 80e-9);
  const auto p = rank_profile(acts, {{0, 0, 1000}});
  EXPECT_DOUBLE_EQ(p.units.forward_s[1], 80e-9);
  EXPECT_DOUBLE_EQ(p.units.optimizer_s.value_or(-1), 100e-9);
}

TEST(UnitTimes, OnCuptiComputeKernelsCountForTheRangeTheirLaunchWasIn) {
  // Launches at 10 and 20 inside "forward unit1" [0,30) run later, [100,150) and [140,160)
  // (covered: 60 ns); an NCCL kernel launched there does not count; a kernel launched in the
  // root's part of "forward" [0,300) at 200 runs [300,340).
  std::vector<Activity> acts = {of_kind(ActivityKind::kRuntime, "cudaLaunchKernel", 10, 11, 0),
                                of_kind(ActivityKind::kRuntime, "cudaLaunchKernel", 20, 21, 0),
                                of_kind(ActivityKind::kRuntime, "cudaLaunchKernel", 25, 26, 0),
                                of_kind(ActivityKind::kRuntime, "cudaLaunchKernel", 200, 201, 0),
                                kernel(kGemm, 100, 150, 7, 0), kernel(kFlash, 140, 160, 7, 0),
                                kernel(kNccl, 100, 400, 20, 0), kernel(kElementwise, 300, 340, 7, 0),
                                of_kind(ActivityKind::kRange, "forward", 0, 300),
                                of_kind(ActivityKind::kRange, "forward unit1", 0, 30)};
  for (int i = 0; i < 4; ++i) acts[size_t(i)].correlation = i + 1;
  acts[4].correlation = 1;
  acts[5].correlation = 2;
  acts[6].correlation = 3;
  acts[7].correlation = 4;
  const auto t = unit_times(acts, {0, 0, 1000});
  ASSERT_EQ(t.forward_s.size(), 2u);
  EXPECT_DOUBLE_EQ(t.forward_s[1], 60e-9);
  EXPECT_DOUBLE_EQ(t.forward_total_s, 100e-9);
  EXPECT_DOUBLE_EQ(t.forward_s[0], 40e-9);
}

TEST(ChromeTrace, EventsUseRankAsPidStreamAsTidAndMicrosecondsFromTheOrigin) {
  std::vector<Activity> acts = {kernel(kGemm, 2000, 5000, 7, 42), kernel(kNccl, 3000, 9000, 20, 43),
                                of_kind(ActivityKind::kRuntime, "cudaLaunchKernel_v7000", 1500, 1800, 0),
                                of_kind(ActivityKind::kRange, "forward unit1", 1000, 6000, 0)};
  acts[2].correlation = 42;
  const auto events = trace_events(acts, 3, 1000);
  std::map<std::string, nlohmann::json> by_name;
  int flows = 0;
  std::set<std::string> thread_names;
  for (const auto& e : events) {
    EXPECT_EQ(e["pid"], 3);
    if (e["ph"] == "X") by_name[e["name"]] = e;
    if (e["ph"] == "s" || e["ph"] == "f") ++flows;
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names.insert(e["args"]["name"].get<std::string>());
  }
  ASSERT_EQ(by_name.size(), 4u);
  EXPECT_EQ(by_name[kGemm]["tid"], 7);
  EXPECT_DOUBLE_EQ(by_name[kGemm]["ts"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(by_name[kGemm]["dur"].get<double>(), 3.0);
  EXPECT_EQ(by_name[kGemm]["cat"], "gemm");
  EXPECT_EQ(by_name[kNccl]["cat"], "communication");
  EXPECT_EQ(by_name[kNccl]["tid"], 20);
  EXPECT_EQ(by_name["forward unit1"]["tid"], kTidNvtx);
  EXPECT_EQ(by_name["forward unit1"]["cat"], "nvtx");
  EXPECT_EQ(by_name["cudaLaunchKernel_v7000"]["tid"], kTidRuntime);
  EXPECT_EQ(flows, 2);  // launch 42 -> its GEMM; the NCCL kernel's launch was not recorded
  EXPECT_TRUE(thread_names.count("stream 7") && thread_names.count("stream 20") &&
              thread_names.count("host: NVTX ranges"));
  const auto doc = trace_document(events, {{"run_id", "x"}});
  EXPECT_EQ(nlohmann::json::parse(doc.dump())["traceEvents"].size(), events.size());
}

TEST(ProfileCli, ACpuRunWritesAProfileSectionAndAMergedTwoRankTrace) {
  using zb::test_support::run_zerobench;
  using zb::test_support::temp_path;
  const auto report = temp_path("profile.json"), trace = temp_path("trace.json");
  const auto r = run_zerobench("run --backend zero3 --precision bf16 --nproc 2 --model tiny --steps 3 --warmup 1 "
                               "--threads 1 --profile-steps 2 --trace " + trace + " --out " + report + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(std::ifstream(report));
  EXPECT_EQ(j["steps"].size(), 3u);  // the profiled steps are extra, not in steps[]
  const auto& p = j["profile"];
  EXPECT_EQ(p["source"], "host");
  EXPECT_EQ(p["steps_traced"], 2);
  EXPECT_EQ(p["ranks"].size(), 2u);
  EXPECT_EQ(p["ranks"][1]["steps"].size(), 2u);
  EXPECT_EQ(p["trace_file"], trace);
  const double ratio = p["overlap_ratio"];
  EXPECT_GE(ratio, 0.0);
  EXPECT_LE(ratio, 1.0);
  const auto& med = p["summary"];
  EXPECT_NEAR(med["compute_pct"].get<double>() + med["non_compute_pct"].get<double>() + med["idle_pct"].get<double>(),
              100.0, 1e-6);
  EXPECT_TRUE(p["tracer_overhead"].contains("overhead_pct"));
  const auto t = nlohmann::json::parse(std::ifstream(trace));
  std::set<int> pids;
  bool saw_collective = false, saw_range = false;
  for (const auto& e : t["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "X" && e["cat"] == "communication") saw_collective = true;
    if (e["ph"] == "X" && e["cat"] == "nvtx") saw_range = true;
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_TRUE(saw_collective);
  EXPECT_TRUE(saw_range);
  std::remove(report.c_str());
  std::remove(trace.c_str());
}

// The section is the median over ranks of each rank's medians and unit times, rank 0's traced
// steps and tracer counts: made again from a committed two-rank report's typed ranks (their
// profiles, rank 0's untraced step times) it is that report's profile section, byte for byte.
TEST(ProfileSection, MadeFromACommittedReportsRanksItIsThatReportsProfile) {
  const auto j = zb::reports::read_report(std::string(zb::bench::source_dir()) +
                                          "/reports/results/cpu/compare-blog/runs/a_accelerate_fsdp_blog_r5.json");
  const auto record = zb::reports::run_report_from_json(j);
  const auto& ranks = record.rank_records();
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_TRUE(record.profile && record.profile->source && ranks[0].step_times_s);
  auto section = zb::bench::profile_section(ranks, *ranks[0].step_times_s, *record.profile->source);
  EXPECT_EQ(section.trace_file, "");  // run sets it with --trace
  section.trace_file = record.profile->trace_file;
  EXPECT_EQ(zb::reports::to_json(section).dump(2), j["profile"].dump(2));
  // The two ranks differ: the section is their median, not one rank's.
  EXPECT_NE(ranks[0].profile->median.compute_s, ranks[1].profile->median.compute_s);
  EXPECT_DOUBLE_EQ(*section.overlap_ratio,
                   0.5 * (ranks[0].profile->median.overlap_ratio + ranks[1].profile->median.overlap_ratio));
}

TEST(ProfileCli, BadProfileStepsIsAUsageError) {
  const auto r = zb::test_support::run_zerobench("run --profile --profile-steps 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--profile-steps"), std::string::npos) << r.output;
}

#ifdef ZEROBENCH_WITH_CUDA
namespace {
// A CUPTI activity buffer as the library fills one: records back to back, each the size of its
// kind's newest struct in the headers (what cuptiActivityGetNextRecord steps by), 8-byte aligned.
class RecordBuffer {
 public:
  template <typename Record>
  void add(const Record& r) {
    const size_t at = bytes_.size();
    bytes_.resize(at + ((sizeof(Record) + 7) & ~size_t(7)));
    std::memcpy(bytes_.data() + at, &r, sizeof(Record));
  }
  std::vector<Activity> parse(KernelNames& names, SkippedRecords& skipped) {
    std::vector<Activity> out;
    parse_cupti_buffer(bytes_.data(), bytes_.size(), names, out, skipped);
    return out;
  }

 private:
  std::vector<uint8_t> bytes_;  // operator new's alignment (16) is CUPTI's 8 at least
};

// Timestamps near 2^62 ns: a conversion through double (53-bit mantissa) would round them.
constexpr uint64_t kT = uint64_t(1) << 62;

// Kernel names as CUPTI hands them: mangled (generated with g++ from NCCL's and ATen's
// signatures), or plain for cuBLAS's nvjet kernels.
const char* kNcclDevMangled = "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE";
const char* kNcclOldMangled = "_Z39ncclKernel_AllGather_RING_LL_Sum_int8_tP11ncclDevCommmP8ncclWork";
const char* kAddMangled =
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIN3c108BFloat16EEESt5arrayIPcLm3EEEEviT0_T1_";

#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;  // the newest kernel record, as cupti_records.cpp
#else
using KernelRecord = CUpti_ActivityKernel9;
#endif
KernelRecord kernel_record(const char* name, uint64_t start, uint64_t end, uint32_t stream, uint32_t correlation) {
  KernelRecord k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.start = start;
  k.end = end;
  k.deviceId = 1;
  k.streamId = stream;
  k.correlationId = correlation;
  return k;
}
CUpti_ActivityMemcpy6 memcpy_record(uint8_t copy_kind, uint64_t bytes, uint64_t start, uint64_t end,
                                    uint32_t correlation) {
  CUpti_ActivityMemcpy6 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = copy_kind;
  m.bytes = bytes;
  m.start = start;
  m.end = end;
  m.deviceId = 1;
  m.streamId = 7;
  m.correlationId = correlation;
  return m;
}
CUpti_ActivityAPI api_record(CUpti_ActivityKind kind, uint32_t cbid, uint64_t start, uint64_t end,
                             uint32_t correlation) {
  CUpti_ActivityAPI a{};
  a.kind = kind;
  a.cbid = cbid;
  a.start = start;
  a.end = end;
  a.correlationId = correlation;
  return a;
}

// One line per activity, every field the parser sets: compared exactly.
std::string describe(const Activity& a) {
  return std::string(activity_kind_name(a.kind)) + " '" + a.name + "' [" + std::to_string(a.start_ns) + "," +
         std::to_string(a.end_ns) + ") stream " + std::to_string(a.stream) + " corr " +
         std::to_string(a.correlation) + " bytes " + std::to_string(a.bytes) + " dev " + std::to_string(a.device);
}
std::string stamp(uint64_t offset) { return std::to_string(kT + offset); }

// A step's worth of records: launches (runtime and driver API), compute and NCCL kernels,
// every memcpy direction, a memset, two kinds the profile does not read, two untimed records.
RecordBuffer step_buffer() {
  RecordBuffer b;
  b.add(api_record(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, kT + 10, kT + 12, 101));
  b.add(kernel_record(kAddMangled, kT + 100, kT + 150, 7, 101));
  b.add(api_record(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, kT + 20, kT + 22, 102));
  b.add(kernel_record(kNcclDevMangled, kT + 120, kT + 400, 20, 102));
  b.add(kernel_record(kNcclOldMangled, kT + 500, kT + 600, 20, 103));  // its launch not in this buffer
  b.add(api_record(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, kT + 200, kT + 201, 104));
  b.add(kernel_record("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", kT + 300, kT + 340, 7, 104));
  b.add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 4096, kT + 600, kT + 650, 105));
  b.add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 2048, kT + 650, kT + 700, 106));
  b.add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, 1024, kT + 700, kT + 710, 107));
  CUpti_ActivityMemset4 ms{};
  ms.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  ms.bytes = 512;
  ms.start = kT + 710;
  ms.end = kT + 720;
  ms.deviceId = 1;
  ms.streamId = 8;
  ms.correlationId = 108;
  b.add(ms);
  CUpti_ActivitySynchronization2 sync{};  // kinds the tracer does not enable, nor the parser read
  sync.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  sync.start = kT + 720;
  sync.end = kT + 730;
  b.add(sync);
  CUpti_ActivityMarker2 marker{};
  marker.kind = CUPTI_ACTIVITY_KIND_MARKER;
  b.add(marker);
  b.add(kernel_record(kAddMangled, 0, 0, 7, 109));  // CUPTI could not time it
  b.add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 8, kT + 900, kT + 800, 110));  // ends before it starts
  b.add(api_record(CUPTI_ACTIVITY_KIND_RUNTIME, 999999, kT + 30, kT + 31, 111));  // a cbid CUPTI has no name for
  return b;
}
}  // namespace

TEST(CuptiRecords, EveryRecordKindBecomesItsActivityWithExactTimestampsAndIds) {
  KernelNames names;
  SkippedRecords skipped;
  std::vector<std::string> got;
  for (const auto& a : step_buffer().parse(names, skipped)) got.push_back(describe(a));
  const std::vector<std::string> want = {
      "cuda_runtime 'cudaLaunchKernel_v7000' [" + stamp(10) + "," + stamp(12) + ") stream 0 corr 101 bytes 0 dev 0",
      "kernel 'void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
      "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)' [" +
          stamp(100) + "," + stamp(150) + ") stream 7 corr 101 bytes 0 dev 1",
      "cuda_runtime 'cuLaunchKernelEx' [" + stamp(20) + "," + stamp(22) + ") stream 0 corr 102 bytes 0 dev 0",
      "kernel 'ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)' [" + stamp(120) + "," +
          stamp(400) + ") stream 20 corr 102 bytes 0 dev 1",
      "kernel 'ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)' [" + stamp(500) + "," +
          stamp(600) + ") stream 20 corr 103 bytes 0 dev 1",
      "cuda_runtime 'cudaLaunchKernel_v7000' [" + stamp(200) + "," + stamp(201) + ") stream 0 corr 104 bytes 0 dev 0",
      "kernel 'nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT' [" + stamp(300) + "," + stamp(340) + ") stream 7 corr 104 bytes 0 dev 1",
      "memcpy 'memcpy HtoD' [" + stamp(600) + "," + stamp(650) + ") stream 7 corr 105 bytes 4096 dev 1",
      "memcpy 'memcpy DtoH' [" + stamp(650) + "," + stamp(700) + ") stream 7 corr 106 bytes 2048 dev 1",
      "memcpy 'memcpy DtoD' [" + stamp(700) + "," + stamp(710) + ") stream 7 corr 107 bytes 1024 dev 1",
      "memset 'memset' [" + stamp(710) + "," + stamp(720) + ") stream 8 corr 108 bytes 512 dev 1",
      "cuda_runtime 'cuda_runtime' [" + stamp(30) + "," + stamp(31) + ") stream 0 corr 111 bytes 0 dev 0",
  };
  EXPECT_EQ(got, want);
  EXPECT_EQ(skipped.other_kind, 2);    // the synchronization and the marker
  EXPECT_EQ(skipped.no_timestamp, 2);  // the kernel at 0, the memcpy ending before it starts
  EXPECT_EQ(skipped.unreadable_buffers, 0);
  // The same name pointer is demangled once and reused; a second buffer adds to the counts.
  step_buffer().parse(names, skipped);
  EXPECT_EQ(skipped.total(), 8);
}

TEST(CuptiRecords, NcclKernelsAreCommunicationAndComputeKernelsCountForTheRangeTheyWereLaunchedIn) {
  KernelNames names;
  SkippedRecords skipped;
  auto acts = step_buffer().parse(names, skipped);
  // The zerobench NVTX ranges (the recorder hook's CPU slices, not CUPTI's) of the step.
  Activity fwd, unit1;
  fwd.kind = unit1.kind = ActivityKind::kRange;
  fwd.name = "forward";
  fwd.start_ns = int64_t(kT);
  fwd.end_ns = int64_t(kT + 300);
  unit1.name = "forward unit1";
  unit1.start_ns = int64_t(kT);
  unit1.end_ns = int64_t(kT + 15);
  acts.push_back(fwd);
  acts.push_back(unit1);
  const StepWindow w{0, int64_t(kT), int64_t(kT + 1000)};
  const auto p = analyze_step(acts, w);
  EXPECT_EQ(p.by_class.at(KernelClass::kCommunication).count, 2);  // both NCCL kernel families
  EXPECT_EQ(p.comm_ns, 380);                                        // [120,400) + [500,600)
  EXPECT_EQ(p.by_class.at(KernelClass::kGemm).count, 1);
  EXPECT_EQ(p.by_class.at(KernelClass::kElementwiseOther).count, 1);
  EXPECT_EQ(p.by_class.at(KernelClass::kMemory).count, 4);
  EXPECT_EQ(p.by_class.at(KernelClass::kMemory).total_ns, 120);  // 50 + 50 + 10 + 10
  EXPECT_EQ(p.compute_ns, 90);              // [100,150) + [300,340)
  EXPECT_EQ(p.comm_overlapped_ns, 70);      // [120,150) + [300,340)
  EXPECT_EQ(p.exposed_comm_ns, 310);
  // Launches link by correlation id: the add (launched at +10, inside unit1) is unit1's; the
  // nvjet GEMM (launched at +200) is the root's; the NCCL kernel launched at +20 is not compute.
  const auto t = unit_times(acts, w);
  ASSERT_EQ(t.forward_s.size(), 2u);
  EXPECT_DOUBLE_EQ(t.forward_s[1], 50e-9);
  EXPECT_DOUBLE_EQ(t.forward_s[0], 40e-9);
  EXPECT_DOUBLE_EQ(t.forward_total_s, 90e-9);
  // The fault this catches: a parser that kept CUPTI's mangled names would call both NCCL
  // kernels compute (their names no longer start with "nccl"), and the NCCL kernel launched in
  // "forward" would add [120,400) to its compute.
  EXPECT_EQ(classify_kernel_name(kNcclDevMangled), KernelClass::kElementwiseOther);
  EXPECT_EQ(classify_kernel_name(kNcclOldMangled), KernelClass::kElementwiseOther);
}

TEST(CuptiRecords, ARecordCuptiCannotReadEndsItsBufferAndIsCounted) {
  KernelNames names;
  SkippedRecords skipped;
  RecordBuffer b;
  b.add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 64, kT + 1, kT + 2, 1));
  auto bad = memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 64, kT + 3, kT + 4, 2);
  bad.kind = CUpti_ActivityKind(9999);  // no kind CUPTI knows: it cannot size the record
  b.add(bad);
  b.add(memcpy_record(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 64, kT + 5, kT + 6, 3));
  const auto acts = b.parse(names, skipped);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].correlation, 1);
  EXPECT_EQ(skipped.unreadable_buffers, 1);
  EXPECT_EQ(skipped.other_kind, 0);
  // An empty buffer (no bytes, no storage) is no error.
  SkippedRecords none;
  EXPECT_TRUE(RecordBuffer().parse(names, none).empty());
  EXPECT_EQ(none.total(), 0);
}
#endif
