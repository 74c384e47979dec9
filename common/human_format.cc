#include "common/human_format.h"

#include "absl/strings/str_format.h"

namespace drover {

std::string HumanBytes(double b) {
  if (b >= (1LL << 40)) return absl::StrFormat("%.1f TiB", b / (1LL << 40));
  if (b >= (1LL << 30)) return absl::StrFormat("%.1f GiB", b / (1LL << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  return absl::StrFormat("%.0f B", b);
}

std::string HumanDuration(absl::Duration d) {
  int64_t s = absl::ToInt64Seconds(d);
  if (s < 0) s = 0;
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string HumanCount(double n) {
  if (n >= 1e9) return absl::StrFormat("%.1fG", n / 1e9);
  if (n >= 1e6) return absl::StrFormat("%.1fM", n / 1e6);
  if (n >= 1e3) return absl::StrFormat("%.1fk", n / 1e3);
  return absl::StrFormat("%.0f", n);
}

}  // namespace drover
