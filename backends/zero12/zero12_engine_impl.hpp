// zero12_engine_impl.hpp — the ZeRO-1/2 engine's class, shared by the files that implement it
// (private to backends/zero12/; zero12_engine.hpp has the semantics). Split as stage_1_and_2.py is:
//   zero12_engine.cpp   construction (flat buffer, partitions, fp32 master), Engine accessors,
//                       bytes, options JSON, the closed form, BackendInfo
//   zero12_reduce.cpp   the gradient path: hooks (process_gradients), the IPG bucket
//                       (reduce_independent_p_g_buckets_and_remove_grads), average_tensor,
//                       copy_grads_in_partition, reduce_gradients (stage 1) and the epilogue
//   zero12_step.cpp     step(): overflow check (bf16, fp16), get_grad_norm_direct, unscale_and_clip_grads,
//                       AdamW, copy back, all_gather_dp_groups
//   zero12_fp16.cpp     precision fp16: the loss scaler (CreateLossScaler), _update_scale, the
//                       skipped step, the combined unscale-and-clip factor
//   zero12_offload.cpp  offload_optimizer cpu: the host master/states/gradients, the cpu_offload
//                       branches of copy_grads_in_partition and step
// Owns: the class declaration and its state. Must not: be included outside backends/zero12/.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/common/autograd_bridge.hpp"
#include "backends/common/host_offload.hpp"
#include "backends/common/loss_scaler.hpp"
#include "backends/common/optim.hpp"
#include "backends/engine.hpp"
#include "backends/zero12/zero12_layout.hpp"
#include "backends/zero3/zero3_cpu_adam.hpp"
#include "models/llama.hpp"

namespace zb::backends::zero12 {

using common::StreamId;
using common::Streams;

bool fault_planted(const std::string& fault);  // plant_fault's current fault (zero12_reduce.cpp)

class Zero12Engine final : public Engine, public models::UnitParamSource, public common::GatherOwner {
 public:
  Zero12Engine(const EngineSpec& spec, const runtime::World& world, int stage);
  ~Zero12Engine() override;

  std::string name() const override { return "zero" + std::to_string(opts_.stage); }
  common::Comm& comm() override { return comm_; }
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override;
  void state_loaded() override;
  common::LostUpdates lost_updates() const override {
    return optimizer_ ? optimizer_->last_lost_updates() : common::LostUpdates{};
  }
  common::OffloadTraffic offload_traffic() const override { return host_copies_.traffic(); }
  LossScaleStep loss_scale_step() const override { return scale_step_; }  // zero12_fp16.cpp

  // ---- the model's weights: views of the flat buffer behind one autograd edge each ----
  std::vector<at::Tensor> unit_weights(int unit) override;  // checkpointed blocks only
  // Per module: each weight's edge is made right before the model uses it, so its backward (the
  // gradient hook) runs as soon as autograd has the gradient, where DeepSpeed's per-parameter
  // hooks fire (zero12_engine.cpp).
  bool per_module() const override { return !fault_planted("unit_hooks"); }
  at::Tensor module_weight(int unit, int index) override;
  at::Tensor gathered_alias(int id) override;
  void post_backward(int id, const at::Tensor& grad) override;  // the gradient hook (zero12_reduce.cpp)

  // ---- Engine ----
  at::Tensor forward_backward(const models::Batch& batch, double loss_scale, bool last_micro_batch) override;
  double optimizer_step(const StepHyper& h) override;  // zero12_step.cpp
  ModelStateBytes model_state_bytes() const override;
  nlohmann::json resolved_options() const override;
  std::vector<at::Tensor> full_parameters() override;

 private:
  struct Bucket {  // IPGBucket: params in the order they were added, elements used
    std::vector<int> ids;
    int64_t elements = 0;
    int index = 0;                 // which of the (double, with overlap_comm) buffers
    int extra_large = -1;          // extra_large_param_to_reduce: its grad is reduced in place
  };

  // zero12_reduce.cpp
  void setup_buckets();
  void reduce_ready_partitions_and_remove_grads(int id);
  void add_to_bucket(int id);
  void reduce_ipg_grads();
  void average_tensor(at::Tensor tensor);
  void copy_grads_in_partition(int id);
  void reduce_gradients();  // stage 1 at the boundary
  void epilogue();          // independent_gradient_partition_epilogue
  // zero12_step.cpp
  std::vector<at::Tensor> averaged_gradients() const;  // this rank's slices, flat order (get_flat_partition)
  at::Tensor grad_norm(const std::vector<at::Tensor>& grads);

  int64_t ipg_bytes_now() const;
  // zero12_offload.cpp (offload_optimizer cpu; DeepSpeedZeroOptimizer's cpu_offload branches)
  void setup_offload();                          // __init__ / initialize_optimizer_states
  void offload_copy_grads_in_partition(int id);  // copy_grads_in_partition with cpu_offload
  double offload_optimizer_step(const StepHyper& h);  // step() with cpu_offload
  ModelStateBytes offload_state_bytes() const;

  // zero12_fp16.cpp (the scaler: precision fp16 only; bf16/fp32 make none, as DeepSpeed)
  bool fp16() const { return dtypes_.model == at::kHalf; }
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  void init_fp16();
  void plant_overflow(std::vector<at::Tensor>& grads) const;  // test-only ZEROBENCH_TEST_FP16_PLANT_INF
  void update_scale(bool overflow);                            // _update_scale, and the step's record (any precision)
  at::Tensor unscale_and_clip_factor(const at::Tensor& scaled_norm) const;  // 1 / combined_scale

  EngineSpec spec_;
  Zero12Options opts_;
  common::Comm comm_;
  Dtypes dtypes_;
  FlatLayout layout_;
  std::vector<int> id_of_;              // unit-spec position (unit_first_[u] + i) -> flat index
  std::vector<int> unit_first_;
  std::vector<bool> in_partition_;      // is_param_in_current_partition, by flat index
  std::vector<int> params_in_partition_;
  at::Tensor flat_params_;              // [padded], model dtype
  at::Tensor partition_;                // this rank's view [P]
  at::Tensor master_;                   // fp32 [P]
  std::unique_ptr<common::AdamW> optimizer_;
  std::vector<at::Tensor> anchors_;     // one 0-d leaf per parameter (flat index)
  std::vector<at::Tensor> grads_;       // param.grad by flat index (undefined: None)
  std::vector<bool> reduced_;           // params_already_reduced
  std::vector<at::Tensor> ipg_buffers_; // [reduce_bucket_size] model dtype, 1 or 2; empty outside backward
  Bucket bucket_;
  bool ready_for_gradients_ = false;
  at::Tensor grads_in_partition_;       // this micro-batch's copies of in-partition gradients
  int64_t grads_in_partition_offset_ = 0;
  std::vector<at::Tensor> all_grad_tensors_;  // accumulated over micro-batches, by position in params_in_partition_
  std::vector<at::Tensor> averaged_;          // averaged_gradients: built at the boundary's epilogue, used by step
  bool boundary_ = true;
  bool skipped_ = false;                // the last step was skipped (overflow)
  std::unique_ptr<common::LossScaler> scaler_;  // fp16 only: CreateLossScaler(dtype=torch.half, ...)
  LossScaleStep scale_step_;                    // the last optimizer step's scale, overflow and skip
  int64_t optimizer_steps_ = 0;                 // step() calls, skipped ones included (the planted steps)
  std::vector<std::pair<int64_t, int>> planted_inf_;  // (step, rank): ZEROBENCH_TEST_FP16_PLANT_INF
  StreamId reduction_stream_ = 0;
  int micro_step_id_ = -1;              // INITIAL_MICRO_STEP_ID; setup_buckets counts backward windows
  // offload_optimizer cpu (zero12_offload.cpp): master_ is then a host tensor.
  common::HostCopies host_copies_;
  std::unique_ptr<zero3::CpuAdam> cpu_adam_;  // DeepSpeedCPUAdam (else optimizer_ steps on the host)
  at::Tensor grad32_;                   // single_partition_of_fp32_groups[0].grad: host fp32 [P]
  at::Tensor bit16_host_;               // param_buffer_of_bit16_for_cpu_offload_groups[0]: host [P]
  at::Tensor temp_grad_host_;           // temp_grad_buffer_for_cpu_offload: host [largest param]
  at::Tensor temp_grad_device_;         // temp_grad_buffer_for_gpu_offload: device [largest param]
  std::vector<at::Tensor> accumulated_host_;  // accumulated_grads_in_cpu, by flat index
  std::vector<at::Tensor> param_norms_;       // norm_for_param_grads (fp64 scalars), by flat index
  bool local_overflow_ = false;
  models::RopeCache rope_;
};

}  // namespace zb::backends::zero12
