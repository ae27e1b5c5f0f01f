// svg_interval.cpp — point-and-whisker chart (see svg_interval.hpp). Same look as svg.cpp's
// charts (size, fonts, Tableau colours).
#include "reports/svg_interval.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "reports/svg.hpp"

namespace zb::reports::svg {

namespace {
const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr double kWidth = 760, kHeight = 320, kLeft = 80, kRight = 20, kTop = 40, kBottom = 70;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), std::abs(v) >= 1000 ? "%.0f" : "%.4g", v);
  return buf;
}
}  // namespace

std::string interval_chart(const std::string& title, const std::vector<IntervalPoint>& points,
                           const std::string& y_label, double reference_y, const std::string& reference_label) {
  double lo = 1e300, hi = -1e300;
  for (const auto& p : points)
    for (double v : {p.value, p.lo, p.hi})
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (std::isfinite(reference_y)) lo = std::min(lo, reference_y), hi = std::max(hi, reference_y);
  if (lo > hi) lo = 0, hi = 1;
  const double pad = (hi - lo) > 0 ? (hi - lo) * 0.15 : std::max(std::abs(hi) * 0.05, 1e-9);
  lo -= pad, hi += pad;
  // Nice ticks: 1, 2, 5 x 10^k, about 5 of them.
  const double raw = (hi - lo) / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  lo = std::floor(lo / step) * step, hi = std::ceil(hi / step) * step;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto y = [&](double v) { return kTop + ph * (1 - (v - lo) / (hi - lo)); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<title>" << escape(title) << "</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">"
    << escape(title) << "</text>\n";
  for (double v = lo; v <= hi + step * 1e-9; v += step)
    o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << y(v) << "\" y2=\"" << y(v)
      << "\" stroke=\"#e5e5e5\"/><text x=\"" << kLeft - 6 << "\" y=\"" << y(v) + 4 << "\" text-anchor=\"end\">"
      << num(v) << "</text>\n";
  o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft << "\" y1=\"" << kTop << "\" y2=\"" << kTop + ph
    << "\" stroke=\"#333\"/>\n<text transform=\"translate(16," << kTop + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << escape(y_label) << "</text>\n";
  if (std::isfinite(reference_y))
    o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << y(reference_y) << "\" y2=\""
      << y(reference_y) << "\" stroke=\"#555\" stroke-dasharray=\"6 4\"/><text x=\"" << kLeft + pw - 4 << "\" y=\""
      << y(reference_y) - 4 << "\" text-anchor=\"end\" fill=\"#555\">" << escape(reference_label) << "</text>\n";
  const double slot = pw / double(std::max<size_t>(1, points.size()));
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    const double x = kLeft + slot * (double(i) + 0.5);
    const char* c = kColors[i % 10];
    o << "<text x=\"" << x << "\" y=\"" << kTop + ph + 18 << "\" text-anchor=\"middle\">" << escape(p.label)
      << "</text>\n";
    if (!std::isfinite(p.value)) {
      o << "<text x=\"" << x << "\" y=\"" << kTop + ph / 2
        << "\" text-anchor=\"middle\" fill=\"#999\">no data</text>\n";
      continue;
    }
    if (std::isfinite(p.lo) && std::isfinite(p.hi)) {
      o << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << y(p.lo) << "\" y2=\"" << y(p.hi) << "\" stroke=\""
        << c << "\" stroke-width=\"2\"/>\n";
      for (double v : {p.lo, p.hi})
        o << "<line x1=\"" << x - 10 << "\" x2=\"" << x + 10 << "\" y1=\"" << y(v) << "\" y2=\"" << y(v)
          << "\" stroke=\"" << c << "\" stroke-width=\"2\"/>\n";
    }
    o << "<circle cx=\"" << x << "\" cy=\"" << y(p.value) << "\" r=\"5\" fill=\"" << c << "\"><title>"
      << escape(p.label + ": " + num(p.value) + " [" + num(p.lo) + ", " + num(p.hi) + "]") << "</title></circle>\n"
      << "<text x=\"" << x + 14 << "\" y=\"" << y(p.value) + 4 << "\">" << num(p.value) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace zb::reports::svg
