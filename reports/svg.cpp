// svg.cpp — SVG chart rendering (see svg.hpp).
#include "reports/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace zb::reports::svg {

namespace {
// Tableau 10: distinguishable, colour-blind friendlier than defaults.
const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
const char* color(size_t i) { return kColors[i % 10]; }

constexpr double kWidth = 760, kHeight = 360, kLeft = 70, kRight = 20, kTop = 40, kBottom = 90;

std::string num(double v) {
  char buf[32];
  const double a = std::abs(v);
  if (a >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.3gG", v / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.3gM", v / 1e6);
  else if (a >= 1000)
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  else if (a != 0 && a < 1e-3)
    std::snprintf(buf, sizeof(buf), "%.2g", v);
  else
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// "Nice" tick step (1, 2, 5 x 10^k) covering [lo, hi] in about `target` steps.
double nice_step(double lo, double hi, int target) {
  const double span = hi > lo ? hi - lo : 1.0;
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

struct Axis {
  double lo, hi, step;
};
Axis make_axis(double lo, double hi, bool from_zero) {
  if (from_zero) lo = std::min(0.0, lo);
  if (hi <= lo) hi = lo + 1;
  const double step = nice_step(lo, hi, 5);
  return {std::floor(lo / step) * step, std::ceil(hi / step) * step, step};
}

double plot_w() { return kWidth - kLeft - kRight; }
double plot_h() { return kHeight - kTop - kBottom; }
double ypos(const Axis& a, double v) { return kTop + plot_h() * (1 - (v - a.lo) / (a.hi - a.lo)); }

void open_svg(std::ostringstream& o, const std::string& title) {
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<title>" << escape(title) << "</title>\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">"
    << escape(title) << "</text>\n";
}

void y_axis(std::ostringstream& o, const Axis& a, const std::string& label) {
  for (double v = a.lo; v <= a.hi + a.step * 1e-9; v += a.step) {
    const double y = ypos(a, v);
    o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_w() << "\" y1=\"" << y << "\" y2=\"" << y
      << "\" stroke=\"#e5e5e5\"/>\n"
      << "<text x=\"" << kLeft - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << num(v) << "</text>\n";
  }
  o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft << "\" y1=\"" << kTop << "\" y2=\"" << kTop + plot_h()
    << "\" stroke=\"#333\"/>\n"
    << "<text transform=\"translate(16," << kTop + plot_h() / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << escape(label) << "</text>\n";
}

void legend(std::ostringstream& o, const std::vector<std::string>& names, double y) {
  double x = kLeft;
  for (size_t i = 0; i < names.size(); ++i) {
    const double w = 24 + 7.0 * double(names[i].size());
    if (x + w > kWidth - kRight) {
      x = kLeft;
      y += 16;
    }
    o << "<rect x=\"" << x << "\" y=\"" << y - 9 << "\" width=\"12\" height=\"10\" fill=\"" << color(i) << "\"/>"
      << "<text x=\"" << x + 16 << "\" y=\"" << y << "\">" << escape(names[i]) << "</text>\n";
    x += w;
  }
}

void category_labels(std::ostringstream& o, const std::vector<std::string>& labels) {
  const double slot = plot_w() / double(std::max<size_t>(1, labels.size()));
  for (size_t i = 0; i < labels.size(); ++i) {
    const double x = kLeft + slot * (double(i) + 0.5);
    o << "<text transform=\"translate(" << x << "," << kTop + plot_h() + 12 << ") rotate(30)\" text-anchor=\"start\">"
      << escape(labels[i]) << "</text>\n";
  }
}
}  // namespace

std::string escape(const std::string& t) {
  std::string out;
  for (char c : t) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string bar_chart(const std::string& title, const std::vector<std::string>& labels,
                      const std::vector<double>& values, const std::string& y_label) {
  return stacked_bar_chart(title, labels, {{y_label, values}}, y_label);
}

std::string stacked_bar_chart(const std::string& title, const std::vector<std::string>& labels,
                              const std::vector<std::pair<std::string, std::vector<double>>>& stacks,
                              const std::string& y_label) {
  std::ostringstream o;
  open_svg(o, title);
  double top = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    double sum = 0;
    for (const auto& s : stacks) sum += s.second[i];
    top = std::max(top, sum);
  }
  const Axis a = make_axis(0, top, true);
  y_axis(o, a, y_label);
  const double slot = plot_w() / double(std::max<size_t>(1, labels.size()));
  const double bar = std::min(60.0, slot * 0.6);
  for (size_t i = 0; i < labels.size(); ++i) {
    const double x = kLeft + slot * (double(i) + 0.5) - bar / 2;
    double base = 0;
    for (size_t k = 0; k < stacks.size(); ++k) {
      const double v = stacks[k].second[i];
      const double y0 = ypos(a, base), y1 = ypos(a, base + v);
      o << "<rect x=\"" << x << "\" y=\"" << y1 << "\" width=\"" << bar << "\" height=\"" << std::max(0.0, y0 - y1)
        << "\" fill=\"" << color(k) << "\"><title>" << escape(labels[i] + " " + stacks[k].first + ": " + num(v))
        << "</title></rect>\n";
      base += v;
    }
    if (stacks.size() == 1)
      o << "<text x=\"" << x + bar / 2 << "\" y=\"" << ypos(a, base) - 4 << "\" text-anchor=\"middle\">" << num(base)
        << "</text>\n";
  }
  category_labels(o, labels);
  if (stacks.size() > 1) {
    std::vector<std::string> names;
    for (const auto& s : stacks) names.push_back(s.first);
    legend(o, names, kHeight - 8);
  }
  o << "</svg>\n";
  return o.str();
}

std::string line_chart(const std::string& title, const std::vector<Series>& series, const std::string& x_label,
                       const std::string& y_label, double reference_y, const std::string& reference_label) {
  std::ostringstream o;
  open_svg(o, title);
  double xlo = 1e300, xhi = -1e300, ylo = 1e300, yhi = -1e300;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      xlo = std::min(xlo, s.x[i]);
      xhi = std::max(xhi, s.x[i]);
      if (std::isfinite(s.y[i])) {
        ylo = std::min(ylo, s.y[i]);
        yhi = std::max(yhi, s.y[i]);
      }
    }
  // A reference far outside the data would flatten every curve: name it instead of drawing it.
  bool reference_on_scale = std::isfinite(reference_y);
  if (reference_on_scale && ylo <= yhi) {
    const double span = std::max(yhi - ylo, 1e-12);
    reference_on_scale = reference_y >= ylo - 0.5 * span && reference_y <= yhi + 0.5 * span;
  }
  if (reference_on_scale) {
    ylo = std::min(ylo, reference_y);
    yhi = std::max(yhi, reference_y);
  }
  if (xlo > xhi) xlo = 0, xhi = 1;
  if (ylo > yhi) ylo = 0, yhi = 1;
  const Axis ya = make_axis(ylo, yhi, false);
  const Axis xa = make_axis(xlo, xhi, false);
  y_axis(o, ya, y_label);
  auto xpos = [&](double v) { return kLeft + plot_w() * (v - xa.lo) / (xa.hi - xa.lo); };
  for (double v = xa.lo; v <= xa.hi + xa.step * 1e-9; v += xa.step)
    o << "<text x=\"" << xpos(v) << "\" y=\"" << kTop + plot_h() + 16 << "\" text-anchor=\"middle\">" << num(v)
      << "</text>\n";
  o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_w() << "\" y1=\"" << kTop + plot_h() << "\" y2=\""
    << kTop + plot_h() << "\" stroke=\"#333\"/>\n"
    << "<text x=\"" << kLeft + plot_w() / 2 << "\" y=\"" << kTop + plot_h() + 34 << "\" text-anchor=\"middle\">"
    << escape(x_label) << "</text>\n";
  if (std::isfinite(reference_y) && !reference_on_scale) {
    o << "<text x=\"" << kLeft + plot_w() - 4 << "\" y=\"" << kTop + 14 << "\" text-anchor=\"end\" fill=\"#555\">"
      << escape(reference_label) << " = " << num(reference_y) << " (off scale)</text>\n";
  }
  if (reference_on_scale) {
    const double y = ypos(ya, reference_y);
    o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_w() << "\" y1=\"" << y << "\" y2=\"" << y
      << "\" stroke=\"#555\" stroke-dasharray=\"6 4\"/>\n"
      << "<text x=\"" << kLeft + plot_w() - 4 << "\" y=\"" << y - 4 << "\" text-anchor=\"end\" fill=\"#555\">"
      << escape(reference_label) << "</text>\n";
  }
  std::vector<std::string> names;
  for (size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    names.push_back(s.label);
    o << "<polyline fill=\"none\" stroke=\"" << color(k) << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < s.x.size(); ++i)
      if (std::isfinite(s.y[i])) o << xpos(s.x[i]) << "," << ypos(ya, s.y[i]) << " ";
    o << "\"><title>" << escape(s.label) << "</title></polyline>\n";
  }
  legend(o, names, kHeight - 24);
  o << "</svg>\n";
  return o.str();
}

}  // namespace zb::reports::svg
