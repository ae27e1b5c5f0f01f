// report_commands.cpp — registers the commands that read reports and run nothing: `table`
// (Markdown, CSV, HTML with SVG plots) and `regress` (reports or Google Benchmark JSON against
// baselines; exit 1 on a regression). Their logic is in reports/.
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "bench/commands/command.hpp"
#include "bench/flag_checks.hpp"
#include "reports/regress.hpp"
#include "reports/report.hpp"
#include "reports/table.hpp"
#include "runtime/errors.hpp"

namespace zb::bench {
namespace {

struct TableArgs {
  std::vector<std::string> inputs;
  reports::TableOptions options;
  std::string out;
};

int table_command(const TableArgs& a) {
  const auto loaded = reports::load_reports(a.inputs);
  const auto text = reports::render_table(loaded, a.options);
  if (a.out.empty()) {
    std::cout << text;
    return kExitOk;
  }
  reports::write_text_atomic(a.out, text);
  std::cerr << "table: " << a.out << "\n";
  return kExitOk;
}

const CommandRegistrar kTable({"table", "tables (Markdown, CSV, HTML with SVG plots) from reports", 40, [](CLI::App& cmd) {
                                 auto a = std::make_shared<TableArgs>();
                                 cmd.add_option("inputs", a->inputs, "report files or matrix directories")->required();
                                 cmd.add_option("--format", a->options.format, "md|csv|html")
                                     ->check(CLI::IsMember({"md", "csv", "html"}));
                                 cmd.add_option("--out", a->out, "write to this file instead of stdout");
                                 cmd.add_option("--baseline", a->options.baseline, "cell to compare every row against");
                                 return CommandAction([a](const std::vector<std::string>&) { return table_command(*a); });
                               }});

// A file whose JSON has a top-level "benchmarks" array (Google Benchmark output), or nullptr.
std::unique_ptr<nlohmann::json> google_benchmark_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return nullptr;  // the report loader says why
  std::ifstream in(path);
  auto j = std::make_unique<nlohmann::json>(nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false));
  return reports::is_google_benchmark_json(*j) ? std::move(j) : nullptr;
}

struct RegressArgs {
  std::string baseline, current, timing = "gate";
  reports::RegressOptions options;
  bool json = false;
};

// `zerobench regress`: 0 pass, 1 regression, 2 bad input.
int regress_command(RegressArgs a) {
  a.options.gate_timing = a.timing == "gate";
  const auto gb_base = google_benchmark_file(a.baseline), gb_cur = google_benchmark_file(a.current);
  if (bool(gb_base) != bool(gb_cur))
    throw UsageError("regress: " + std::string(gb_base ? a.baseline : a.current) +
                     " is Google Benchmark JSON and the other is not (compare like with like)");
  const auto result = gb_base ? reports::compare_benchmarks(*gb_base, *gb_cur, a.options)
                              : reports::compare_reports(reports::load_reports({a.baseline}),
                                                         reports::load_reports({a.current}), a.options);
  std::cout << (a.json ? result.to_json().dump(2) + "\n" : result.to_text());
  return result.regression() ? kExitFailed : kExitOk;
}

const CommandRegistrar kRegress(
    {"regress", "compare reports (or Google Benchmark JSON from `micro`) with baselines; exit 1 on a regression", 50,
     [](CLI::App& cmd) {
       auto a = std::make_shared<RegressArgs>();
       auto& o = a->options;
       cmd.add_option("--baseline", a->baseline, "baseline report file or directory")->required();
       cmd.add_option("--current", a->current, "current report file or directory")->required();
       cmd.add_option("--threshold", o.threshold, "timing: relative median change that counts (0.05)")
           ->check(FiniteRange(0, 1));
       cmd.add_option("--alpha", o.alpha, "timing: Mann-Whitney significance level (0.05)")->check(FiniteRange(0, 1));
       cmd.add_option("--memory-threshold", o.memory_threshold,
                      "observed allocator peaks where a report has no peak_program_bytes: allowed growth (0.05)")
           ->check(FiniteRange(0, 10));
       cmd.add_option("--numerics-rtol", o.numerics_rtol,
                      "per-step loss, grad norm, lr: allowed relative difference on the same machine kind (0 = bitwise)")
           ->check(FiniteRange(0, 1));
       cmd.add_option("--numerics-rtol-other-machine", o.numerics_rtol_other_machine,
                      "... between different machine kinds (env.device, cpu_capability, torch, threads) (0.02)")
           ->check(FiniteRange(0, 1));
       cmd.add_option("--timing", a->timing, "gate|report: whether slower timings fail the check")
           ->check(CLI::IsMember({"gate", "report"}));
       cmd.add_flag("--json", a->json, "print the verdict as JSON");
       return CommandAction([a](const std::vector<std::string>&) { return regress_command(*a); });
     }});

}  // namespace
}  // namespace zb::bench
