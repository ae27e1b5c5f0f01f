// compare_command.cpp — compare's flags, plan, running and output files (see compare_command.hpp).
#include "bench/compare/compare_command.hpp"

#include <algorithm>
#include <iostream>

#include "bench/compare/analysis.hpp"
#include "bench/compare/render.hpp"
#include "bench/compare/sides.hpp"
#include "bench/compare/verdict.hpp"
#include "bench/flag_checks.hpp"
#include "bench/matrix/matrix.hpp"
#include "config/bounded_readers.hpp"
#include "models/token_data.hpp"
#include "reports/report.hpp"
#include "reports/run_report.hpp"
#include "runtime/errors.hpp"

namespace zb::bench::compare {

namespace {
using json = nlohmann::json;

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '-';
  return out;
}

std::string side_prefix(size_t i) {  // a, b, …, z, s27, …
  return i < 26 ? std::string(1, char('a' + i)) : "s" + std::to_string(i + 1);
}

// The flags every run gets: compare's defaults always, the rest only when given.
RunArgs workload_args(const CompareOptions& o, const CLI::App& app) {
  RunArgs w;
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  w.emplace_back("nproc", std::to_string(o.nproc));
  if (!o.model_dir.empty())
    w.emplace_back("model-dir", o.model_dir);
  else
    w.emplace_back("model", o.model);
  if (given("--layers")) w.emplace_back("layers", std::to_string(o.layers));
  w.emplace_back("seq-len", std::to_string(o.seq_len));
  if (given("--micro-batch")) w.emplace_back("micro-batch", std::to_string(o.micro_batch));
  if (given("--grad-accum")) w.emplace_back("grad-accum", std::to_string(o.grad_accum));
  w.emplace_back("steps", std::to_string(o.steps));
  w.emplace_back("warmup", std::to_string(o.warmup));
  if (given("--threads")) w.emplace_back("threads", std::to_string(o.threads));
  w.emplace_back("device", o.device);
  if (given("--data")) w.emplace_back("data", o.data);
  if (given("--batching")) w.emplace_back("batching", o.batching);
  if (given("--seed")) w.emplace_back("seed", std::to_string(o.seed));
  if (o.activation_checkpointing) w.emplace_back("activation-checkpointing", "true");
  if (given("--lr-warmup-steps")) w.emplace_back("lr-warmup-steps", std::to_string(o.lr_warmup_steps));
  if (given("--lr-warmup-ratio")) w.emplace_back("lr-warmup-ratio", o.lr_warmup_ratio);
  if (!o.no_profile) {
    w.emplace_back("profile", "true");
    w.emplace_back("profile-steps", "2");
  }
  return w;
}

json plan_from_options(const CompareOptions& o, const CLI::App& app) {
  if (o.repeat < 1) throw UsageError("--repeat " + std::to_string(o.repeat) + " must be at least 1");
  if (o.warmup >= o.steps)  // checked here so the line names compare's flags, not the first side
    throw UsageError("--warmup " + std::to_string(o.warmup) + " must be below --steps " + std::to_string(o.steps));
  const auto sides = parse_sides(o.sides);
  RunArgs workload = workload_args(o, app);
  // A warm-up compare gives every side may not also be a spec's own (the run would get it twice).
  for (const auto& s : sides)
    for (const auto& [k, v] : s.options)
      for (const char* flag : {"lr-warmup-steps", "lr-warmup-ratio"})
        if (app.count(std::string("--") + flag) > 0 && (k == "lr-warmup-steps" || k == "lr-warmup-ratio"))
          throw UsageError("side '" + s.spec + "': " + k + "=" + v + " beside compare's --" + flag +
                           ", which every side gets: give the warm-up once");
  json plan = {{"schema", {{"name", "zerobench.compare-plan"}, {"version", 1}}},
               {"repeat", o.repeat},
               {"timeout_s", o.timeout_s},
               {"workload", json::object()},
               {"sides", json::array()},
               {"cells", json::array()}};
  // Validate up front exactly as `zerobench run` would (one cell per side: rounds are identical).
  auto resolve_side = [&](size_t i, const RunArgs& w) {
    MatrixCell cell{"side", w};
    for (const auto& kv : sides[i].options) cell.options.push_back(kv);
    return validate_cell(cell);
  };
  std::vector<ResolvedCell> resolved;
  for (size_t i = 0; i < sides.size(); ++i) {
    try {
      resolved.push_back(resolve_side(i, workload));
    } catch (const UsageError& e) {
      std::string msg = e.what();
      if (msg.rfind("cell side: ", 0) == 0) msg = msg.substr(11);
      throw UsageError("side '" + sides[i].spec + "': " + msg);
    }
  }
  // One workload: when the command line leaves the batch to the sides and their files disagree
  // (a DeepSpeed JSON fixes train_micro_batch_size_per_gpu, an accelerate YAML does not), the one
  // value every side accepts is given to all of them; when none is, each side keeps its own and
  // the verdict says the sides train different batches.
  json aligned = json::array();
  auto align = [&](const char* flag, int64_t ResolvedCell::*field) {
    if (app.count(std::string("--") + flag) > 0) return;
    std::vector<int64_t> values;
    for (const auto& r : resolved)
      if (std::find(values.begin(), values.end(), r.*field) == values.end()) values.push_back(r.*field);
    if (values.size() < 2) return;
    std::vector<int64_t> accepted;
    for (int64_t v : values) {
      RunArgs w = workload;
      w.emplace_back(flag, std::to_string(v));
      bool all = true;
      for (size_t i = 0; i < sides.size() && all; ++i) {
        try {
          resolve_side(i, w);
        } catch (const UsageError&) {
          all = false;
        }
      }
      if (all) accepted.push_back(v);
    }
    if (accepted.size() != 1) return;
    workload.emplace_back(flag, std::to_string(accepted[0]));
    std::string from;
    for (size_t i = 0; i < sides.size(); ++i)
      if (resolved[i].*field == accepted[0]) from += (from.empty() ? "" : ", ") + sides[i].label;
    aligned.push_back({{"flag", flag},
                       {"value", accepted[0]},
                       {"reason", std::string("--") + flag + " not given; " + from +
                                      " fixes it and every side accepts it, so every run gets it"}});
  };
  align("micro-batch", &ResolvedCell::micro_batch);
  align("grad-accum", &ResolvedCell::grad_accum);
  plan["aligned"] = aligned;
  for (const auto& [k, v] : workload) plan["workload"][k] = v;
  for (size_t i = 0; i < sides.size(); ++i) {
    json options = json::array();
    for (const auto& [k, v] : sides[i].options) options.push_back({k, v});
    plan["sides"].push_back({{"label", sides[i].label}, {"spec", sides[i].spec}, {"options", options}});
  }
  // Interleaved: round 1 of every side, then round 2, … (run_matrix runs cells in this order).
  for (int r = 1; r <= o.repeat; ++r)
    for (size_t i = 0; i < sides.size(); ++i)
      plan["cells"].push_back({{"id", side_prefix(i) + "_" + sanitize(sides[i].label) + "_r" + std::to_string(r)},
                               {"side", int(i)},
                               {"round", r}});
  return plan;
}

MatrixSpec matrix_of(const json& plan) {
  MatrixSpec spec;
  spec.name = "compare";
  spec.timeout_s = plan["timeout_s"].get<double>();
  for (const auto& c : plan["cells"]) {
    MatrixCell cell;
    cell.id = c["id"];
    for (const auto& [k, v] : plan["workload"].items()) cell.options.emplace_back(k, v.get<std::string>());
    for (const auto& kv : plan["sides"][c["side"].get<size_t>()]["options"])
      cell.options.emplace_back(kv[0].get<std::string>(), kv[1].get<std::string>());
    spec.cells.push_back(cell);
  }
  return spec;
}

json read_plan(const std::string& dir) {
  const std::string path = dir + "/plan.json";
  const std::string where = "--from-dir " + dir + ": ";
  json plan;
  try {
    plan = json::parse(config::read_file_bounded(path, where, config::kMaxConfigFileBytes));
  } catch (const json::exception& e) {
    throw UsageError(where + "plan.json is not JSON (" + std::string(e.what()) + ")");
  }
  if (!plan.is_object() || plan.value(json::json_pointer("/schema/name"), "") != "zerobench.compare-plan" ||
      !plan.contains("sides") || !plan.contains("cells") || !plan.contains("workload"))
    throw UsageError(where + "plan.json is not a zerobench compare plan (written by `zerobench compare --out DIR`)");
  return plan;
}

// Reads the reports, computes, writes. Returns whether every run is ok.
bool write_outputs(const json& plan, const std::string& dir) {
  std::vector<SideRuns> sides;
  for (const auto& s : plan["sides"]) sides.push_back({s["label"], s["spec"], {}, {}});
  bool all_ok = true;
  for (const auto& c : plan["cells"]) {
    auto& side = sides.at(c["side"].get<size_t>());
    const std::string file = c["id"].get<std::string>() + ".json";
    json report;
    try {
      report = reports::read_report(dir + "/runs/" + file);
    } catch (const UsageError&) {
      report = nullptr;  // not run (interrupted) or unreadable: shown as missing
    }
    if (!report.is_object() || !reports::run_report_from_json(report).ok()) all_ok = false;
    side.runs.push_back(report);
    side.report_files.push_back("runs/" + file);
  }
  json cmp = analyse(sides, plan["workload"], plan["repeat"].get<int>());
  cmp["aligned"] = plan.value("aligned", json::array());
  cmp["verdict"] = verdict(cmp);
  reports::write_json_atomic(dir + "/compare.json", cmp);
  reports::write_text_atomic(dir + "/compare.md", render_markdown(cmp));
  reports::write_text_atomic(dir + "/compare.html", render_html(cmp));
  reports::write_text_atomic(dir + "/loss.svg", curve_svg(cmp, "loss"));
  reports::write_text_atomic(dir + "/grad_norm.svg", curve_svg(cmp, "grad_norm"));
  std::cout << cmp["verdict"].get<std::string>() << "\n";
  std::cerr << "compare: " << dir << "/compare.{json,md,html}\n";
  return all_ok;
}
}  // namespace

void add_compare_options(CLI::App& app, CompareOptions& o) {
  app.add_option("sides", o.sides,
                 "two or more sides: a config file (accelerate YAML/JSON, DeepSpeed JSON) or "
                 "backend:precision[:key=value,...] (keys: `zerobench run` flags without --)");
  app.add_option("--model", o.model, "model preset")->capture_default_str();
  app.add_option("--model-dir", o.model_dir, "a Hugging Face Llama/Granite folder (instead of --model)");
  app.add_option("--layers", o.layers, "decoder blocks of the model (default: the model's own)")->check(AtLeastOne());
  app.add_option("--nproc", o.nproc, "ranks per run")->check(FiniteRange(1, 1024))->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "tokens per sample")->check(AtLeastOne())->capture_default_str();
  app.add_option("--micro-batch", o.micro_batch, "samples per rank (default: each side's own)")->check(AtLeastOne());
  app.add_option("--grad-accum", o.grad_accum, "micro-batches per step (default: each side's own)")
      ->check(AtLeastOne());
  app.add_option("--steps", o.steps, "optimizer steps per run (warm-up included)")
      ->check(AtLeastOne())
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "steps left out of each run's timing")
      ->check(NonNegative())
      ->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads per rank")->check(NonNegative());
  app.add_option("--device", o.device, "cpu|cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_flag("--activation-checkpointing", o.activation_checkpointing,
               "every side recomputes each block in backward (a trainer setting, not in either config file)");
  app.add_option("--lr-warmup-steps", o.lr_warmup_steps,
                 "LR warm-up steps for every side (HF's warmup_steps: fills a DeepSpeed warmup_num_steps \"auto\")")
      ->check(NonNegative());
  app.add_option("--lr-warmup-ratio", o.lr_warmup_ratio, "LR warm-up for every side as a fraction of --steps, in [0, 1)")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes("--lr-warmup-steps");
  app.add_option("--data", o.data, "random|markov|megatron:PREFIX|tokens:PATH:uint16|uint32:eos=ID|lengths:FILE.json|csv (docs/data.md)")
      ->check(CLI::Validator(models::data_spec_problem, "DATA", "DATA"));
  app.add_option("--batching", o.batching, "pad|pack|pack-naive: how every side's documents form rows (docs/data.md)")
      ->check(CLI::IsMember({"pad", "pad-longest", "pack", "pack-naive"}));
  app.add_option("--seed", o.seed, "seed for weights and data");
  app.add_option("--timeout", o.timeout_s, "per-run wall limit in seconds")->check(Positive())->capture_default_str();
  app.add_option("--repeat", o.repeat, "repetitions per side, interleaved A B A B ...")
      ->check(FiniteRange(1, 1000))
      ->capture_default_str();
  app.add_flag("--no-profile", o.no_profile, "skip the 2 traced steps per run (no exposed comm / overlap)");
  app.add_option("--out", o.out, "output directory (default out/compare-<labels>)");
  app.add_option("--from-dir", o.from_dir, "re-render from DIR/plan.json and DIR/runs/ without running");
  app.add_flag("--dry-run", o.dry_run, "print the runs in order, run nothing");
}

int compare_command(const CompareOptions& o, const CLI::App& app) {
  if (!o.from_dir.empty()) {
    if (!o.sides.empty()) throw UsageError("--from-dir re-renders a finished compare: give no sides with it");
    const json plan = read_plan(o.from_dir);
    return write_outputs(plan, o.from_dir) ? kExitOk : kExitFailed;
  }
  const json plan = plan_from_options(o, app);
  std::string dir = o.out;
  if (dir.empty()) {
    dir = "out/compare";
    for (const auto& s : plan["sides"]) dir += "-" + sanitize(s["label"].get<std::string>());
  }
  const MatrixSpec spec = matrix_of(plan);
  MatrixOptions mo;
  mo.out_dir = dir + "/runs";
  mo.file = "compare " + dir;
  mo.dry_run = o.dry_run;
  if (o.dry_run) return run_matrix(spec, mo);
  // Resume only the same compare (same sides and workload; --repeat may grow, --timeout change):
  // runs in DIR/runs/ of another plan would otherwise be silently reused.
  json old;
  try {
    old = read_plan(dir);
  } catch (const UsageError&) {
    old = nullptr;  // no plan there yet
  }
  if (old.is_object() && (old["sides"] != plan["sides"] || old["workload"] != plan["workload"]))
    throw UsageError("--out " + dir +
                     " holds a different compare (its plan.json has other sides or another workload); "
                     "choose another --out or remove it");
  reports::make_directories(dir);
  reports::write_json_atomic(dir + "/plan.json", plan);
  const int rc = run_matrix(spec, mo);  // resumes: runs with a report are kept
  if (rc == 130) return rc;
  return write_outputs(plan, dir) ? kExitOk : kExitFailed;
}

}  // namespace zb::bench::compare
