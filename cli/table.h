// Plain-text tables for the CLI: columns sized to their content, left-aligned.
#ifndef DROVER_CLI_TABLE_H_
#define DROVER_CLI_TABLE_H_

#include <ostream>
#include <string>
#include <vector>

namespace drover::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Cells longer than `max_width` are cut with "...".
  void Print(std::ostream& out, size_t max_width = 60) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// "3.2 GiB", "512.0 MiB" (common/human_format.h).
std::string HumanBytes(double bytes);
// "42s", "3m12s", "2h05m".
std::string HumanDuration(int64_t ms);
// The GPU models of a node in a few words: "2x NVIDIA A100-SXM4-80GB",
// "NVIDIA T4, 2x NVIDIA L4" (in order of first appearance); "" for none, or when the
// GPUs were only declared (--num-gpus: named "declared").
std::string GpuModels(const std::vector<std::string>& names);

}  // namespace drover::cli

#endif  // DROVER_CLI_TABLE_H_
