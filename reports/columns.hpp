// columns.hpp — the column registry: every per-run column of `zerobench table` (Markdown, CSV,
// HTML) and the cell-level timing gates of `zerobench regress`, one entry each: key, header,
// unit, format, the formula over the typed report (reports/run_report.hpp), when it is shown and
// how regress gates it. Owns: the columns' formulas and their order. Must not: read a report's
// JSON (the record's code does), render a whole table (table.cpp), or decide a verdict
// (regress.cpp).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reports/run_report.hpp"

namespace zb::reports {

// One row's inputs: its report, the --baseline cell's report (nullptr: none), and the
// throughput of the projection that predicts it (a projection's own; nullopt: none).
struct RowContext {
  const RunReport& report;
  const RunReport* base = nullptr;
  std::optional<double> predicted_tps;
};

struct Column {
  enum class Show { Always, WithBaseline, WithProjection, HtmlOnly };
  enum class Gate { None, Timing };  // Timing: regress compares the medians, gated by the throughput U test
  std::string key;     // stable name (regress's metric for a gated column)
  std::string header;  // the table's column title
  std::string unit;    // of the value ("" for text and ratios)
  const char* format;  // printf format of a number; nullptr: a text column
  Show show = Show::Always;
  Gate gate = Gate::None;
  bool left = false;  // Markdown alignment
  // A number column's value for an ok run (nullopt or not finite: "-"; a run that is not ok: "-").
  std::function<std::optional<double>(const RowContext&)> value;
  // A text column's cell, for every run.
  std::function<std::string(const RowContext&)> text;
};

// Every column, in table order.
const std::vector<Column>& columns();
// The column named `key` (throws std::out_of_range for an unknown key).
const Column& column(const std::string& key);
// The columns a table shows: Always, plus the baseline / projection ones when asked, plus the
// HtmlOnly ones in HTML.
std::vector<const Column*> shown_columns(bool with_baseline, bool with_projection, bool html);
// The cell text of `c` in the row `ctx`.
std::string cell_text(const Column& c, const RowContext& ctx);
// A number column's value, nullopt when the cell would be "-".
std::optional<double> column_value(const Column& c, const RowContext& ctx);

// Formulas the HTML page's plots and pivot share with the columns.
extern const char* const kStateCategories[5];  // model_states_bytes' categories, column order
double category_mib(const RunReport& r, int category);  // max over ranks
// tokens/GPU/s's 95% interval from the median step time's order-statistic interval over the
// measured steps (reports/stats.hpp median_interval); nullopt without measured steps.
struct TpsInterval {
  double lo, hi, coverage;
  int n;
};
std::optional<TpsInterval> tps_interval(const RunReport& r);
// The blog's pairing: "compute <dtype>, optimizer updates <dtype> weights".
std::string precision_plan_key(const RunReport& r);
// Model dims, backend, precision, batch shape, W and nodes: a projection predicts a measured
// run when these agree ("" when the report lacks env or config.model).
std::string workload_key(const RunReport& r);

}  // namespace zb::reports
