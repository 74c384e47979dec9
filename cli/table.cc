#include "cli/table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/human_format.h"

namespace drover::cli {

void Table::Print(std::ostream& out, size_t max_width) const {
  auto cut = [max_width](const std::string& s) {
    std::string one_line = s.substr(0, s.find('\n'));
    if (one_line.size() <= max_width) return one_line;
    return one_line.substr(0, max_width - 3) + "...";
  };
  std::vector<size_t> width(header_.size(), 0);
  for (size_t i = 0; i < header_.size(); ++i) width[i] = header_[i].size();
  for (const auto& r : rows_) {
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], cut(r[i]).size());
    }
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t i = 0; i < width.size(); ++i) {
      std::string cell = i < r.size() ? cut(r[i]) : "";
      if (i + 1 < width.size()) cell.resize(width[i] + 2, ' ');
      s += cell;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line(header_);
  for (const auto& r : rows_) line(r);
}

std::string HumanBytes(double b) { return drover::HumanBytes(b); }

std::string HumanDuration(int64_t ms) { return drover::HumanDuration(absl::Milliseconds(ms)); }

std::string GpuModels(const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, int>> counts;
  for (const std::string& n : names) {
    if (n == "declared") continue;
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == n; });
    if (it == counts.end()) {
      counts.emplace_back(n, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [name, count] : counts) {
    parts.push_back(count == 1 ? name : absl::StrCat(count, "x ", name));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace drover::cli
