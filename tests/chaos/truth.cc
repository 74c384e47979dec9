#include "tests/chaos/truth.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/files.h"

namespace drover::chaos {
namespace {

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// "ID REST" -> {ID, REST}.
std::pair<std::string, std::string> IdAndRest(absl::string_view s) {
  size_t sp = s.find(' ');
  if (sp == absl::string_view::npos) return {std::string(s), ""};
  return {std::string(s.substr(0, sp)), std::string(s.substr(sp + 1))};
}

}  // namespace

TruthLog::TruthLog(const std::string& dir, const std::string& job, const std::string& name) {
  const std::string job_dir = absl::StrCat(dir, "/", job);
  absl::Status made = MakeDirs(job_dir, 0755);
  if (made.ok()) {
    const std::string path = absl::StrCat(job_dir, "/", name, ".truth");
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) made = absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (!made.ok()) {
    std::cerr << "chaos: cannot record the truth: " << made << std::endl;
    std::_Exit(3);
  }
  Record(absl::StrCat("start ", ::getpid()));
}

TruthLog::~TruthLog() {
  if (fd_ >= 0) ::close(fd_);
}

void TruthLog::Say(const std::string& text) {
  WriteAll(STDOUT_FILENO, text + "\n");
  Record(absl::StrCat("out ", absl::ToUnixMillis(absl::Now()), " ", text));
}

void TruthLog::Record(const std::string& record) { WriteAll(fd_, record + "\n"); }

void TruthLog::Exit(int code, const std::string& why) {
  Record(absl::StrCat("exit ", code, " ", why));
  std::_Exit(code);
}

std::string ObjectContent(const std::string& id, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (char c : id) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  std::string out(size, '\0');
  for (size_t i = 0; i < size; i += 8) {
    h ^= h << 13;
    h ^= h >> 7;
    h ^= h << 17;
    std::memcpy(&out[i], &h, std::min<size_t>(8, size - i));
  }
  return out;
}

bool ClearError(const absl::Status& s) {
  return !s.ok() && s.code() != absl::StatusCode::kUnknown && !s.message().empty();
}

std::string Flat(const absl::Status& s) {
  return absl::StrReplaceAll(
      absl::StrCat(absl::StatusCodeToString(s.code()), " ", s.message()), {{"\n", " | "}});
}

ProcessTruth ParseTruth(const std::string& job, const std::string& name, absl::string_view text) {
  ProcessTruth t;
  t.job = job;
  t.name = name;
  if (absl::string_view n = name; absl::ConsumePrefix(&n, "g")) {
    std::vector<std::string> parts = absl::StrSplit(n, "-r");
    if (parts.size() == 2) {
      (void)absl::SimpleAtoi(parts[0], &t.generation);
      (void)absl::SimpleAtoi(parts[1], &t.rank);
    }
  }
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "start ")) {
      ++t.starts;
    } else if (absl::ConsumePrefix(&line, "out ")) {
      auto [ms, text] = IdAndRest(line);
      int64_t at = 0;
      (void)absl::SimpleAtoi(ms, &at);
      t.out_ms.push_back(at);
      t.out.push_back(text);
    } else if (absl::ConsumePrefix(&line, "exit ")) {
      auto [code, why] = IdAndRest(line);
      int c = 0;
      if (absl::SimpleAtoi(code, &c)) t.exit_code = c;
      t.exit_why = why;
    } else if (absl::ConsumePrefix(&line, "put ")) {
      t.puts.push_back(IdAndRest(line));
    } else if (absl::ConsumePrefix(&line, "put-failed ")) {
      auto [id, rest] = IdAndRest(line);
      t.puts.emplace_back(id, "failed " + rest);
    } else if (absl::ConsumePrefix(&line, "deleted ")) {
      t.deleted.emplace_back(line);
    } else if (absl::ConsumePrefix(&line, "got ")) {
      t.gets.push_back(IdAndRest(line));
    } else if (absl::ConsumePrefix(&line, "check ")) {
      t.checks.emplace_back(line);
    }
  }
  return t;
}

std::vector<ProcessTruth> ReadJobTruth(const std::string& dir, const std::string& job) {
  std::vector<ProcessTruth> out;
  const std::string job_dir = absl::StrCat(dir, "/", job);
  DIR* d = ::opendir(job_dir.c_str());
  if (d == nullptr) return out;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    absl::string_view n(e->d_name);
    if (absl::ConsumeSuffix(&n, ".truth")) names.emplace_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    auto text = ReadFile(absl::StrCat(job_dir, "/", n, ".truth"));
    if (text.ok()) out.push_back(ParseTruth(job, n, *text));
  }
  return out;
}

}  // namespace drover::chaos
