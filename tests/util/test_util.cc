#include "tests/util/test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"

namespace drover::testing {

std::string TestTmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string Runfile(const std::string& path) {
  const char* ws = std::getenv("TEST_WORKSPACE");
  const std::string workspace = ws ? ws : "drover";
  std::vector<std::string> roots;
  if (const char* d = std::getenv("TEST_SRCDIR")) roots.push_back(d);
  if (const char* d = std::getenv("RUNFILES_DIR")) roots.push_back(d);
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) roots.push_back(std::string(exe, n) + ".runfiles");
  for (const auto& root : roots) {
    std::string p = absl::StrCat(root, "/", workspace, "/", path);
    if (::access(p.c_str(), F_OK) == 0) return p;
  }
  return path;
}

bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> env;
  auto text = ReadFile(path);
  if (!text.ok()) return env;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    auto eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return env;
}

}  // namespace drover::testing
