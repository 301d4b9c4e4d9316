// Tensor printing in PyTorch's style:
//   tensor([[1.0000, 2.0000], [3.0000, 4.0000]], dtype=bf16)
// Floats print with 4 decimals, or in scientific notation when the magnitudes span too much
// (PyTorch's rule); every element is padded to one width so columns line up.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "mixprec/core/capture.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/convert.h"

namespace mixprec {

namespace {

constexpr int64_t kSummariseAbove = 1000;  // elements
constexpr int64_t kEdgeItems = 3;          // shown at each end of a summarised dim
constexpr std::size_t kLineWidth = 80;

// Indices shown along a dim of `size`; -1 marks the "..." gap.
std::vector<int64_t> shown_indices(int64_t size, bool summarise) {
  std::vector<int64_t> out;
  if (summarise && size > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) out.push_back(i);
    out.push_back(-1);
    for (int64_t i = size - kEdgeItems; i < size; ++i) out.push_back(i);
  } else {
    for (int64_t i = 0; i < size; ++i) out.push_back(i);
  }
  return out;
}

class Printer {
 public:
  Printer(const Tensor& t, bool summarise) : t_(t), summarise_(summarise) {
    collect(0, 0);
    format_all();
  }

  // The nested-bracket body. `multiline` puts each sub-array on its own line, indented to
  // line up under the opening bracket that starts at column `indent`.
  std::string body(bool multiline, std::size_t indent) const {
    std::size_t next = 0;
    return render(0, multiline, indent, next);
  }

 private:
  // Visits the shown elements in order, recording each one's offset from data_ptr().
  void collect(int64_t d, int64_t offset) {
    if (d == t_.dim()) {
      offsets_.push_back(offset);
      return;
    }
    for (int64_t i : shown_indices(t_.size(d), summarise_))
      if (i >= 0) collect(d + 1, offset + i * t_.stride(d));
  }

  void format_all() {
    const DType dtype = t_.dtype();
    const auto* base = static_cast<const char*>(t_.data_ptr());
    const auto size = static_cast<int64_t>(t_.element_size());
    if (is_floating(dtype)) {
      std::vector<double> values;
      for (int64_t off : offsets_) {
        double v = 0;
        kernels::convert(base + off * size, dtype, &v, DType::F64, 1);
        values.push_back(v);
      }
      const bool sci = use_scientific(values);
      for (double v : values) texts_.push_back(format_float(v, sci));
    } else if (dtype == DType::Bool) {
      for (int64_t off : offsets_) texts_.push_back(base[off * size] ? "True" : "False");
    } else {
      for (int64_t off : offsets_) {
        int64_t v = 0;
        kernels::convert(base + off * size, dtype, &v, DType::I64, 1);
        texts_.push_back(std::to_string(v));
      }
    }
    for (const auto& s : texts_) width_ = std::max(width_, s.size());
  }

  // PyTorch's switch to scientific: nonzero finite magnitudes above 1e8, below 1e-4, or
  // spanning more than 1000x.
  static bool use_scientific(const std::vector<double>& values) {
    double lo = INFINITY, hi = 0;
    for (double v : values) {
      if (!std::isfinite(v) || v == 0) continue;
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
    }
    if (hi == 0) return false;
    return hi / lo > 1000.0 || hi > 1.0e8 || lo < 1.0e-4;
  }

  static std::string format_float(double v, bool sci) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    std::snprintf(buf, sizeof buf, sci ? "%.4e" : "%.4f", v);
    return buf;
  }

  std::string padded(std::size_t i) const {
    return std::string(width_ - texts_[i].size(), ' ') + texts_[i];
  }

  std::string render(int64_t d, bool multiline, std::size_t indent, std::size_t& next) const {
    if (d == t_.dim()) return padded(next++);
    const std::vector<int64_t> shown = shown_indices(t_.size(d), summarise_);
    const std::size_t child_indent = indent + 1;
    std::string out = "[";
    if (d == t_.dim() - 1) {
      // A row of elements: in multiline mode it wraps greedily so no line passes the width
      // (counting the ',' or ']' that follows each element).
      std::size_t column = child_indent;
      for (std::size_t k = 0; k < shown.size(); ++k) {
        // PyTorch's gap marker among elements is " ...".
        const std::string item = shown[k] < 0 ? " ..." : padded(next++);
        if (k > 0) {
          if (multiline && column + 2 + item.size() + 1 > kLineWidth) {
            out += ",\n";
            out.append(child_indent, ' ');
            column = child_indent;
          } else {
            out += ", ";
            column += 2;
          }
        }
        out += item;
        column += item.size();
      }
      return out + "]";
    }
    // Sub-arrays: one per line, with one blank line per extra level of nesting (as PyTorch
    // prints), or ", " on a single line; "..." stands in for the skipped ones.
    std::string sep = ",";
    if (multiline) {
      sep.append(static_cast<std::size_t>(t_.dim() - d - 1), '\n');
      sep.append(child_indent, ' ');
    } else {
      sep += ' ';
    }
    for (std::size_t k = 0; k < shown.size(); ++k) {
      if (k > 0) out += sep;
      out += shown[k] < 0 ? "..." : render(d + 1, multiline, child_indent, next);
    }
    return out + "]";
  }

  const Tensor& t_;
  bool summarise_;
  std::vector<int64_t> offsets_;  // (shown elements) offsets from data_ptr()
  std::vector<std::string> texts_;
  std::size_t width_ = 0;
};

}  // namespace

std::string Tensor::to_string() const {
  if (defined()) capture::note_host_access(this, "to_string");
  if (!defined()) return "tensor(undefined)";
  const int64_t n = numel();
  const bool summarise = n > kSummariseAbove;
  std::string suffix;
  if (summarise || (n == 0 && dim() != 1)) suffix += ", shape=" + shape_to_string(shape_);
  suffix += ", dtype=" + std::string(dtype_name(dtype_)) + ")";
  const std::string prefix = "tensor(";
  if (n == 0) return prefix + "[]" + suffix;

  Printer printer(*this, summarise);
  std::string line = prefix + printer.body(false, prefix.size()) + suffix;
  if (line.size() <= kLineWidth) return line;
  return prefix + printer.body(true, prefix.size()) + suffix;
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  return out << tensor.to_string();
}

}  // namespace mixprec
