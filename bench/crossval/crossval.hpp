// crossval.hpp — `zerobench crossval`: zerobench's engine and the real framework it names
// (fsdp <-> PyTorch FSDP1, fsdp2 <-> PyTorch FSDP2, zero3 <-> DeepSpeed ZeRO-3) trained from the
// same weights on the same batches with the same hyper-parameters, compared step by step.
// Owns: the work directory (weights as an HF Llama safetensors checkpoint, the token batches,
// spec.json, the DeepSpeed JSON both sides read), running both sides as child processes
// (`zerobench run` through the built-in launcher; scripts/crossval/run_<framework>.py --device
// cpu|cuda (Gloo or NCCL, crossval_device.hpp) on W ranks that zerobench's launcher starts with
// torchrun's worker environment and agent store, or under `python -m torch.distributed.run` with
// --reference-launcher torchrun), and
// the crossval document (JSON + Markdown + HTML). Every mode is resolved before anything runs, as
// `zerobench run <the same flags> --precision MODE` resolves it, and checked against what the real
// framework can run on this machine (BackendInfo::crossval.reference_setup: refused with one
// line, exit 2, or run with documented substitutions); a DeepSpeed JSON written for both sides
// must resolve to the same run as the user's configuration.
// Must not: compare (crossval_compare.hpp) or train in-process.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "bench/run/run_options.hpp"

namespace zb::bench {

struct CrossvalOptions {
  RunOptions run;                       // every `zerobench run` flag (model, backend, train, configs)
  std::vector<std::string> precisions;  // one crossval per mode; default: fp32
  std::string python;                   // default: the setup venv's python
  std::string work_dir;                 // default: <out without .json>.work
  std::string reference_launcher = "zerobench";  // --reference-launcher zerobench|torchrun
  bool logits = false;                  // hidden: the logits parity check of the two models
  std::string table;                    // --table DIR: print the summary table of DIR/*.json, run nothing
};

// Registers the `run` flags plus crossval's own on `cmd`.
void add_crossval_options(CLI::App& cmd, CrossvalOptions& o);

// 0: every mode agrees; 1: a disagreement or a side failed; throws UsageError (exit 2).
// `cmd` is the parsed subcommand (which flags were given are forwarded to `zerobench run`).
int crossval_command(CrossvalOptions o, const CLI::App& cmd);

// The interpreter crossval uses by default: $ZEROBENCH_PYTHON, else $ZEROBENCH_VENV/bin/python,
// else $HOME/.cache/zerobench/venv/bin/python (scripts/setup.sh's venv).
std::string default_python();
// scripts/crossval/ of the source tree this binary was built from ($ZEROBENCH_CROSSVAL_DIR overrides).
std::string crossval_scripts_dir();

}  // namespace zb::bench
