// svg.hpp — small, dependency-free SVG charts for the HTML report: bars, stacked bars, lines.
// Owns: layout (axes, nice ticks, legend, colours). Must not: know what the numbers mean.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace zb::reports::svg {

struct Series {
  std::string label;
  std::vector<double> x, y;
};

std::string bar_chart(const std::string& title, const std::vector<std::string>& labels,
                      const std::vector<double>& values, const std::string& y_label);

// stacks: (category, value per label); bars are the sum of categories.
std::string stacked_bar_chart(const std::string& title, const std::vector<std::string>& labels,
                              const std::vector<std::pair<std::string, std::vector<double>>>& stacks,
                              const std::string& y_label);

// reference_y: a dashed horizontal line (e.g. the data's entropy floor), NaN for none.
std::string line_chart(const std::string& title, const std::vector<Series>& series, const std::string& x_label,
                       const std::string& y_label, double reference_y, const std::string& reference_label);

std::string escape(const std::string& text);  // XML escaping

}  // namespace zb::reports::svg
