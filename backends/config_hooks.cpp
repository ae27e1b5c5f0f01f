// config_hooks.cpp — the TrainingArguments bridge and the default backend (see config_hooks.hpp).
#include "backends/config_hooks.hpp"

#include "backends/backend_info.hpp"

namespace zb::backends {

config::TrainingArguments training_arguments(const TrainConfig& t) {
  config::TrainingArguments a;
  a.micro_batch = t.micro_batch;
  a.grad_accum = t.grad_accum;
  a.steps = t.steps;
  a.lr = t.lr;
  a.lr_schedule = t.lr_schedule;
  a.lr_warmup_steps = t.lr_warmup_steps;
  a.deepspeed_scheduler = t.deepspeed_scheduler;
  a.weight_decay = t.weight_decay;
  a.beta1 = t.beta1;
  a.beta2 = t.beta2;
  a.eps = t.eps;
  a.grad_clip = t.grad_clip;
  a.adamw_impl = t.adamw_impl;
  return a;
}

void apply_training_arguments(const config::TrainingArguments& a, TrainConfig& t) {
  t.micro_batch = a.micro_batch;
  t.grad_accum = a.grad_accum;
  t.steps = a.steps;
  t.lr = a.lr;
  t.lr_schedule = a.lr_schedule;
  t.lr_warmup_steps = a.lr_warmup_steps;
  t.deepspeed_scheduler = a.deepspeed_scheduler;
  t.weight_decay = a.weight_decay;
  t.beta1 = a.beta1;
  t.beta2 = a.beta2;
  t.eps = a.eps;
  t.grad_clip = a.grad_clip;
  t.adamw_impl = a.adamw_impl;
}

config::TrainerArgs trainer_args(const ConfigRequest& req) {
  config::TrainerArgs args;
  args.train = training_arguments(req.train);
  args.given = req.given;
  args.precision = req.precision_given ? req.precision : "";
  args.world_size = req.world_size;
  args.hidden = req.hidden;
  return args;
}

std::string default_backend_name() { return registered_backends().front().name; }

}  // namespace zb::backends
