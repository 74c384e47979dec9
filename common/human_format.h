// Numbers as people read them in a terminal: sizes, durations and counts. Used by the
// CLI's tables and by progress lines (common/progress_line.h). Pure functions.
#ifndef DROVER_COMMON_HUMAN_FORMAT_H_
#define DROVER_COMMON_HUMAN_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace drover {

// "3.2 GiB", "512.0 MiB", "700 B" (binary units; below 1 MiB in bytes).
std::string HumanBytes(double bytes);
// "42s", "3m12s", "2h05m" (rounded down to whole seconds; negative is "0s").
std::string HumanDuration(absl::Duration d);
// "999", "12.3k", "4.5M", "1.2G" (decimal units; below 1000 as a whole number).
std::string HumanCount(double n);

}  // namespace drover

#endif  // DROVER_COMMON_HUMAN_FORMAT_H_
