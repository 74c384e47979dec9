#include "common/exit_text.h"

#include "absl/strings/str_cat.h"
#include "common/spawn.h"

namespace drover {

std::string DescribeExit(const proto::ExitInfo& e, bool with_stderr) {
  std::string out;
  if (!e.error().empty()) {
    out = e.error();
  } else if (e.signal() != 0) {
    out = absl::StrCat("was killed by ", SignalName(e.signal()));
  } else {
    out = absl::StrCat("exited with code ", e.exit_code());
  }
  if (with_stderr && !e.stderr_tail().empty()) {
    absl::StrAppend(&out, "; last lines of its stderr:\n", e.stderr_tail());
    if (out.back() != '\n') out.push_back('\n');
  }
  return out;
}

const char* ExitCause(const proto::ExitInfo& e) {
  if (!e.error().empty()) return "error";
  if (e.signal() != 0) return "signal";
  return e.exit_code() == 0 ? "success" : "exit_code";
}

}  // namespace drover
