// trainer.cpp — the training loop (see trainer.hpp).
#include "bench/run/trainer.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "backends/common/optim.hpp"
#include "config/config_file.hpp"
#include "models/llama.hpp"
#include "profiler/host_source.hpp"
#include "profiler/nvtx_capture.hpp"
#include "profiler/tracer.hpp"
#include "runtime/device.hpp"
#include "runtime/memory.hpp"
#include "runtime/nvtx.hpp"

namespace zb::bench {

namespace {
void maybe_inject(const FaultInjection& f, int rank, int64_t step) {
  if (f.kind.empty() || f.kind.rfind("save-", 0) == 0 || f.rank != rank || f.step != step) return;  // save-*: in the save
  if (f.kind == "exit") std::_Exit(1);
  if (f.kind == "crash") std::abort();
  if (f.kind == "sigkill") raise(SIGKILL);  // what the kernel's OOM killer does
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // "hang"
}

// One optimizer step: data (untimed), forward/backward per micro-batch, optimizer; the timed
// region's host-clock bounds go to `window` (the profiler's step window).
class StepRunner {
 public:
  StepRunner(backends::Engine& engine, const backends::EngineSpec& spec, const models::DataSource& data,
             backends::common::Comm& side)
      : engine_(engine), spec_(spec), data_(data), side_(side), comm_(engine.comm()),
        timer_(runtime::make_region_timer(comm_.world().device)) {}

  StepRecord run(int64_t step, TrainResult& result, profiler::StepWindow* window) {
    const auto& t = spec_.train;
    const auto device = comm_.world().device;
    runtime::reset_tracked_peak(device);  // this step's peaks (CUDA: allocated and reserved)
    if (device.is_cuda()) runtime::reset_tracked_cpu_peak();  // and the host's (offload)
    const auto offload_before = engine_.offload_traffic();
    const int rank = comm_.rank(), world = comm_.size();
    runtime::nvtx::Range step_range("step " + std::to_string(step));
    // A step the fp16 loss scaler skipped does not advance the schedule (DeepSpeed engine.py
    // _take_model_step steps the scheduler only without overflow; accelerate's
    // AcceleratedScheduler.step returns when an optimizer's step_was_skipped).
    // The schedule gives the lr and, for DeepSpeed's OneCycle with cycle_momentum, AdamW's betas.
    const backends::StepHyper hyper = backends::common::hyper_at(t, step - skipped_steps_);
    const CommSnapshot before = comm_.stats();
    // Data are made before the timer starts: the benchmark times training, not the generator.
    std::vector<models::Batch> batches;
    std::string batch_bytes;
    {
      runtime::nvtx::Range data_range("data");
      for (int64_t a = 0; a < t.grad_accum; ++a) {
        auto b = data_.samples(models::first_sample_index(step, a, t.grad_accum, rank, world, t.micro_batch),
                               t.micro_batch, t.seq_len);
        for (const auto& x : {b.tokens.contiguous(), b.targets.contiguous()})
          batch_bytes.append(static_cast<const char*>(x.data_ptr()), x.nbytes());
        if (b.document_ids.defined()) {  // per-document batching: the mask's input too
          batch_bytes.append(static_cast<const char*>(b.document_ids.data_ptr()), b.document_ids.nbytes());
          b.position_ids = b.position_ids.to(device);
          b.document_ids = b.document_ids.to(device);
        }
        b.tokens = b.tokens.to(device);
        b.targets = b.targets.to(device);
        batches.push_back(std::move(b));
      }
    }
    // Per-document batches average the loss over the step's label tokens, all ranks and micro-
    // batches together (HF Trainer: num_items_in_batch gathered across devices when
    // average_tokens_across_devices, the summed loss divided by it and multiplied by the number of
    // processes, which the gradient average divides again): micro-batch a's summed loss is scaled
    // by world / labels. One causal mask (no -100 labels) keeps the mean per micro-batch / grad_accum.
    const bool per_document = !batches.empty() && batches.front().document_ids.defined();
    double labels = 0;  // the step's label tokens, all ranks (an emulated rank: its own x world)
    if (per_document) {
      for (const auto& b : batches) labels += double(b.label_tokens);
      if (side_.world().emulated) {
        labels *= double(world);
      } else {
        auto n = at::tensor({labels}, at::TensorOptions().dtype(at::kDouble)).to(device);
        side_.all_reduce_sum(n);  // uncounted bookkeeping
        labels = n.cpu().item<double>();
      }
    }
    const std::string batch_sha256 = config::sha256_hex(batch_bytes);
    runtime::synchronize(device);  // the window starts with the device idle
    const int64_t recomputed_before = models::recomputed_flops();
    const int64_t window_start = profiler::now_ns();
    timer_->start();
    // Summed in fp64: the mean over ranks and micro-batches of the fp32 losses is then exact
    // (an fp32 sum rounds it, ~6e-8 relative — visible next to a reference's own mean).
    at::Tensor loss_sum = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
    for (int64_t a = 0; a < t.grad_accum; ++a) {
      const bool last = a + 1 == t.grad_accum;
      if (per_document) {  // summed loss x grad_accum x world / labels: rec.loss below is then the step's mean
        loss_sum += engine_.forward_backward(batches[size_t(a)], double(world) / labels, last).to(at::kDouble) *
                    (double(t.grad_accum) * double(world) / labels);
      } else {
        loss_sum += engine_.forward_backward(batches[size_t(a)], 1.0 / double(t.grad_accum), last);
      }
      // Taken at every step's last backward: the last step's value stands (or the diverged step's).
      if (last) result.model_state_bytes = engine_.model_state_bytes();
    }
    double grad_norm = 0;
    {
      runtime::nvtx::Range opt_range("optimizer_step");
      grad_norm = engine_.optimizer_step(hyper);
    }
    const double step_time = timer_->stop_s();  // device-synchronised
    if (window) *window = {step, window_start, profiler::now_ns()};
    comm_.collect_device_times();
    result.comm_last_step = backends::common::stats_delta(comm_.stats(), before);

    side_.all_reduce_sum(loss_sum);  // uncounted bookkeeping
    double lost_fraction = -1;
    if (t.measure_lost_updates) {
      const auto lu = engine_.lost_updates();
      auto counts = at::tensor({double(lu.lost), double(lu.counted)}, at::TensorOptions().dtype(at::kDouble)).to(device);
      side_.all_reduce_sum(counts);
      counts = counts.cpu();
      const double counted = counts[1].item<double>();
      lost_fraction = counted > 0 ? counts[0].item<double>() / counted : 0.0;
    }
    StepRecord rec;
    rec.step = step;
    // An emulated world has no peers to average with: the loss is this rank's.
    rec.loss = loss_sum.item<double>() / double(t.grad_accum * (side_.world().emulated ? 1 : world));
    rec.grad_norm = grad_norm;
    rec.lr = hyper.lr;
    if (t.deepspeed_scheduler.cycles_momentum()) rec.betas = {hyper.beta1, hyper.beta2};
    rec.time_s = step_time;
    rec.measured = step >= t.warmup;
    rec.lost_update_fraction = lost_fraction;
    rec.comm = result.comm_last_step;
    rec.recompute_flops = models::recomputed_flops() - recomputed_before;
    rec.peak_tracked_bytes = runtime::tracked_peak_bytes(device);
    if (!device.is_cuda()) {
      rec.peak_program_bytes = runtime::program_peak_bytes();
      rec.program_ledger = runtime::program_ledger_stats();
    }
    const auto cuda = runtime::cuda_memory_stats(device);
    rec.peak_allocated_bytes = cuda.peak_allocated_bytes;
    rec.peak_reserved_bytes = cuda.peak_reserved_bytes;
    rec.offload = engine_.offload_traffic() - offload_before;
    rec.loss_scale = engine_.loss_scale_step();
    rec.batch_sha256 = batch_sha256;
    if (rec.loss_scale.enabled && rec.loss_scale.skipped) ++skipped_steps_;
    if (device.is_cuda()) rec.peak_host_tracked_bytes = runtime::tracked_cpu_peak_bytes();
    return rec;
  }

 private:
  backends::Engine& engine_;
  const backends::EngineSpec& spec_;
  const models::DataSource& data_;
  backends::common::Comm& side_;
  backends::common::Comm& comm_;
  std::unique_ptr<runtime::RegionTimer> timer_;
  int64_t skipped_steps_ = 0;  // optimizer steps the fp16 loss scaler skipped so far
};

// The traced steps: CUPTI on CUDA; on CPU the host source built from the collectives' intervals.
ProfileResult run_profiled_steps(StepRunner& runner, backends::common::Comm& comm, int64_t first_step, int n,
                                 TrainResult& result) {
  ProfileResult p;
  const bool cuda = comm.world().device.is_cuda();
  p.source = cuda ? "cupti" : "host";
  std::unique_ptr<profiler::ActivityTracer> tracer;
  if (cuda) tracer = profiler::make_cupti_tracer();
  profiler::NvtxCapture ranges;
  runtime::synchronize(comm.world().device);
  ranges.set_enabled(true);
  comm.set_interval_recording(!cuda);  // the host source's input; CUPTI sees NCCL kernels itself
  if (tracer) tracer->start();
  for (int i = 0; i < n; ++i) {
    profiler::StepWindow w;
    const auto rec = runner.run(first_step + i, result, &w);
    p.windows.push_back(w);
    p.step_times_s.push_back(rec.time_s);
  }
  if (tracer) {
    tracer->stop();
    p.activities = tracer->take();
    p.dropped_records = tracer->dropped_records();
    p.skipped_records = tracer->skipped_records();
    p.processing_s = tracer->processing_s();
  }
  comm.set_interval_recording(false);
  ranges.set_enabled(false);
  if (!cuda) {
    std::vector<profiler::HostCollective> collectives;
    for (const auto& c : comm.take_intervals())
      collectives.push_back({std::string(backends::common::collective_name(c.kind)) + " " + c.label, c.start_ns,
                             c.end_ns, c.wait_start_ns, c.wait_end_ns, c.bytes});
    p.activities = profiler::host_activities(collectives, p.windows);
  }
  for (auto& r : ranges.take()) p.activities.push_back(std::move(r));
  return p;
}
}  // namespace

TrainResult run_training(backends::Engine& engine, const backends::EngineSpec& spec, const models::DataSource& data,
                         backends::common::Comm& side, const FaultInjection& fault, int profile_steps,
                         const TrainHooks& hooks) {
  const auto& t = spec.train;
  auto& comm = engine.comm();
  const auto device = comm.world().device;
  TrainResult result;
  result.tracked_after_init_bytes = runtime::tracked_bytes(device);
  result.cuda_after_init = runtime::cuda_memory_stats(device);
  StepRunner runner(engine, spec, data, side);
  // The peak window: from the first measured step, but never the first step this process runs
  // (ZeRO-3's trace-recording step, first-use allocations) unless it is the only one.
  result.peak_from_step = std::max(t.warmup, hooks.first_step + (t.steps - hooks.first_step > 1 ? 1 : 0));

  uint64_t measured_range = 0;  // nsys --capture-range=nvtx keys on "measured@zerobench"
  for (int64_t step = hooks.first_step; step < t.steps; ++step) {
    maybe_inject(fault, comm.rank(), step);
    if (step == std::max(t.warmup, hooks.first_step)) measured_range = runtime::nvtx::start("measured");
    result.steps.push_back(runner.run(step, result, nullptr));
    const auto& rec = result.steps.back();
    // A step the loss scaler skipped reports its overflow (grad_norm inf, as DeepSpeed's
    // _global_grad_norm) and the run goes on, as the frameworks' do.
    const bool skipped = rec.loss_scale.enabled && rec.loss_scale.skipped;
    if (!std::isfinite(rec.loss) || (!std::isfinite(rec.grad_norm) && !skipped)) {
      const bool loss_bad = !std::isfinite(rec.loss);
      const double bad = loss_bad ? rec.loss : rec.grad_norm;
      result.diverged_step = step;
      result.diverged_what = std::string(loss_bad ? "loss " : "grad_norm ") + (std::isnan(bad) ? "nan" : "inf");
      break;
    }
    if (hooks.after_step) hooks.after_step(step);
  }
  runtime::nvtx::end(measured_range);
  // Peaks over the window's steps (each step's were reset as it started); the profiled steps
  // below come after and are not in them. A run shorter than its warm-up: its last step.
  result.cuda_peaks = runtime::cuda_memory_stats(device);
  bool any = false;
  for (const auto& s : result.steps) any = any || s.step >= result.peak_from_step;
  if (!any && !result.steps.empty()) result.peak_from_step = result.steps.back().step;
  result.cuda_peaks.peak_allocated_bytes = result.cuda_peaks.peak_reserved_bytes = 0;
  for (const auto& s : result.steps) {
    if (s.step < result.peak_from_step) continue;
    result.peak_tracked_bytes = std::max(result.peak_tracked_bytes, s.peak_tracked_bytes);
    result.peak_program_bytes = std::max(result.peak_program_bytes, s.peak_program_bytes);
    auto& l = result.program_ledger;
    l.late_frees += s.program_ledger.late_frees;
    l.open_at_read += s.program_ledger.open_at_read;
    l.other_thread_peak_bytes = std::max(l.other_thread_peak_bytes, s.program_ledger.other_thread_peak_bytes);
    l.comm_buffers_peak_bytes = std::max(l.comm_buffers_peak_bytes, s.program_ledger.comm_buffers_peak_bytes);
    result.peak_host_tracked_bytes = std::max(result.peak_host_tracked_bytes, s.peak_host_tracked_bytes);
    result.cuda_peaks.peak_allocated_bytes = std::max(result.cuda_peaks.peak_allocated_bytes, s.peak_allocated_bytes);
    result.cuda_peaks.peak_reserved_bytes = std::max(result.cuda_peaks.peak_reserved_bytes, s.peak_reserved_bytes);
  }
  result.comm_total = comm.stats();
  result.offload_total = engine.offload_traffic();
  if (profile_steps > 0 && result.diverged_step < 0) {
    const auto last_step_comm = result.comm_last_step;
    result.profile = run_profiled_steps(runner, comm, t.steps, profile_steps, result);
    result.comm_last_step = last_step_comm;  // the report's traffic is the last measured step's
  }
  return result;
}

}  // namespace zb::bench
