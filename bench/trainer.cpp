// trainer.cpp — the training loop (see trainer.hpp).
#include "bench/trainer.hpp"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "backends/common/optim.hpp"
#include "runtime/device.hpp"
#include "runtime/memory.hpp"
#include "runtime/nvtx.hpp"

namespace zb::bench {

namespace {
void maybe_inject(const FaultInjection& f, int rank, int64_t step) {
  if (f.kind.empty() || f.rank != rank || f.step != step) return;
  if (f.kind == "exit") std::_Exit(1);
  if (f.kind == "crash") std::abort();
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // "hang"
}
}  // namespace

TrainResult run_training(backends::Engine& engine, const backends::EngineSpec& spec, const models::DataSource& data,
                         backends::common::Comm& side, const FaultInjection& fault) {
  const auto& t = spec.train;
  auto& comm = engine.comm();
  const auto device = comm.world().device;
  const int rank = comm.rank(), world = comm.size();
  TrainResult result;
  result.tracked_after_init_bytes = runtime::tracked_bytes(device);
  runtime::reset_tracked_peak(device);
  auto timer = runtime::make_region_timer(device);

  uint64_t measured_range = 0;  // nsys --capture-range=nvtx keys on "measured@zerobench"
  for (int64_t step = 0; step < t.steps; ++step) {
    maybe_inject(fault, rank, step);
    if (step == t.warmup) measured_range = runtime::nvtx::start("measured");
    runtime::nvtx::Range step_range("step " + std::to_string(step));
    const double lr = backends::common::lr_at(t, step);
    const CommSnapshot before = comm.stats();
    // Data are made before the timer starts: the benchmark times training, not the generator.
    std::vector<models::Batch> batches;
    {
      runtime::nvtx::Range data_range("data");
      for (int64_t a = 0; a < t.grad_accum; ++a) {
        auto b = data.samples(models::first_sample_index(step, a, t.grad_accum, rank, world, t.micro_batch),
                              t.micro_batch, t.seq_len);
        batches.push_back({b.tokens.to(device), b.targets.to(device)});
      }
    }
    timer->start();
    at::Tensor loss_sum = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device));
    for (int64_t a = 0; a < t.grad_accum; ++a) {
      const bool last = a + 1 == t.grad_accum;
      loss_sum += engine.forward_backward(batches[size_t(a)], 1.0 / double(t.grad_accum), last);
      if (last && step + 1 == t.steps) result.model_state_bytes = engine.model_state_bytes();
    }
    double grad_norm = 0;
    {
      runtime::nvtx::Range opt_range("optimizer_step");
      grad_norm = engine.optimizer_step(lr);
    }
    const double step_time = timer->stop_s();
    result.comm_last_step = backends::common::stats_delta(comm.stats(), before);

    side.all_reduce_sum(loss_sum);  // uncounted bookkeeping
    double lost_fraction = -1;
    if (t.measure_lost_updates) {
      const auto lu = engine.lost_updates();
      auto counts = at::tensor({double(lu.lost), double(lu.counted)}, at::TensorOptions().dtype(at::kDouble)).to(device);
      side.all_reduce_sum(counts);
      counts = counts.cpu();
      const double counted = counts[1].item<double>();
      lost_fraction = counted > 0 ? counts[0].item<double>() / counted : 0.0;
    }
    StepRecord rec;
    rec.step = step;
    // An emulated world has no peers to average with: the loss is this rank's.
    rec.loss = loss_sum.item<double>() / double(t.grad_accum * (side.world().emulated ? 1 : world));
    rec.grad_norm = grad_norm;
    rec.lr = lr;
    rec.time_s = step_time;
    rec.measured = step >= t.warmup;
    rec.lost_update_fraction = lost_fraction;
    result.steps.push_back(rec);
  }
  runtime::nvtx::end(measured_range);
  result.peak_tracked_bytes = runtime::tracked_peak_bytes(device);
  result.comm_total = comm.stats();
  return result;
}

}  // namespace zb::bench
