#include "bench/bench_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace drover::bench {
namespace {
std::string& BenchName() {
  static std::string* name = new std::string("bench");
  return *name;
}
}  // namespace

void SetBenchName(const std::string& name) { BenchName() = name; }

void Die(const std::string& msg) {
  std::cerr << "bench/" << BenchName() << ": " << msg << "\n";
  std::exit(1);
}

void Line(const std::string& line) { std::cout << line << "\n" << std::flush; }

std::string SetUpClusterRun(const char* argv0) {
  const std::string root = FindRunfilesRoot(argv0, "scheduler");
  if (root.empty()) Die("cannot find the runfiles; run it with `bazel run -c opt //bench:" + BenchName() + "`");
  ::setenv("TEST_SRCDIR", root.c_str(), 1);
  ::setenv("TEST_WORKSPACE", "drover", 1);
  std::string tmpl = "/tmp/drover-bench-" + BenchName() + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp");
  ::setenv("TEST_TMPDIR", tmpl.c_str(), 1);
  return tmpl;
}

void FinishClusterRun(const std::string& tmp, bool keep) {
  if (keep) return;
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
}

std::string MachineLine() {
  return "machine: " + std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)) + " CPUs, " + CpuModel() + ", " +
         std::to_string(static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) >> 20) + " MiB RAM";
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string FindRunfilesRoot(const char* argv0, const std::string& probe) {
  std::vector<std::string> candidates;
  if (const char* d = std::getenv("RUNFILES_DIR")) candidates.push_back(d);
  if (const char* d = std::getenv("TEST_SRCDIR")) candidates.push_back(d);
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) candidates.push_back(std::string(exe, n) + ".runfiles");
  candidates.push_back(std::string(argv0) + ".runfiles");
  for (const auto& c : candidates) {
    std::error_code ec;
    if (std::filesystem::is_directory(c + "/drover/" + probe, ec)) return c;
  }
  return "";
}

}  // namespace drover::bench
