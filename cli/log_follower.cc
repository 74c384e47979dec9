#include "cli/log_follower.h"

#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"

namespace drover::cli {
namespace {

// Turns chunks into whole prefixed lines; thread-safe.
class LinePrinter {
 public:
  explicit LinePrinter(bool prefix) : prefix_(prefix) {}
  ~LinePrinter() { Flush(); }

  void Write(const proto::LogChunk& c) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string& buf = partial_[{c.rank(), c.stream()}];
    buf += c.data();
    size_t start = 0;
    std::string out;
    for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      AppendLine(&out, c.rank(), buf.substr(start, nl + 1 - start));
    }
    buf.erase(0, start);
    Emit(c.stream(), out);
  }

  void Flush() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, buf] : partial_) {
      if (buf.empty()) continue;
      std::string out;
      AppendLine(&out, key.first, buf + "\n");
      Emit(key.second, out);
      buf.clear();
    }
  }

 private:
  void AppendLine(std::string* out, int rank, const std::string& line) {
    if (prefix_) absl::StrAppend(out, "[rank", rank, "]: ");
    out->append(line);
  }
  static void Emit(int stream, const std::string& s) {
    int fd = stream == 2 ? STDERR_FILENO : STDOUT_FILENO;
    size_t done = 0;
    while (done < s.size()) {
      ssize_t n = ::write(fd, s.data() + done, s.size() - done);
      if (n <= 0) return;
      done += n;
    }
  }

  const bool prefix_;
  std::mutex mu_;
  std::map<std::pair<int, int>, std::string> partial_;
};

}  // namespace

absl::StatusOr<proto::JobInfo> PrintJobLogs(Client& client, const std::string& job_id,
                                            bool follow, bool prefix,
                                            const std::atomic<bool>* stop) {
  LinePrinter printer(prefix);
  std::mutex mu;
  // (node, rank, stream) -> bytes already printed.
  std::map<std::tuple<std::string, int, int>, int64_t> offsets;
  std::map<std::string, std::string> agent_address;  // node id -> agent address
  auto job = client.GetJob(job_id);
  if (!job.ok()) return job.status();
  bool final_pass = false;
  for (;;) {
    std::set<std::string> nodes;
    for (const auto& p : job->placement()) nodes.insert(p.node_id());
    bool missing = false;
    for (const auto& n : nodes) missing |= !agent_address.count(n);
    if (missing) {
      auto status = client.Status();
      if (!status.ok()) return status.status();
      for (const auto& n : status->nodes()) agent_address[n.node_id()] = n.agent_address();
    }
    const bool stream_follow = follow && !final_pass && !IsTerminal(job->state());
    std::vector<std::thread> threads;
    std::vector<absl::Status> results(nodes.size());
    size_t i = 0;
    for (const auto& node : nodes) {
      auto it = agent_address.find(node);
      if (it == agent_address.end() || it->second.empty()) {
        results[i++] = absl::NotFoundError(absl::StrCat("node ", node, " is not known"));
        continue;
      }
      std::vector<proto::LogOffset> from;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& [key, off] : offsets) {
          if (std::get<0>(key) != node) continue;
          proto::LogOffset o;
          o.set_rank(std::get<1>(key));
          o.set_stream(std::get<2>(key));
          o.set_offset(off);
          from.push_back(o);
        }
      }
      threads.emplace_back([&, node, address = it->second, from, idx = i] {
        results[idx] = client.StreamLogs(
            address, job_id, stream_follow, from,
            [&](const proto::LogChunk& c) {
              {
                std::lock_guard<std::mutex> lock(mu);
                int64_t& off = offsets[{node, c.rank(), c.stream()}];
                if (c.offset() + static_cast<int64_t>(c.data().size()) <= off) return;
                off = c.offset() + c.data().size();
              }
              printer.Write(c);
            },
            stop, stream_follow ? absl::Hours(24 * 365) : absl::Seconds(30));
      });
      ++i;
    }
    for (auto& t : threads) t.join();
    if (!follow || final_pass || (stop != nullptr && stop->load())) break;
    if (IsTerminal(job->state()) && job->live_processes() == 0) {
      final_pass = true;  // one more pass picks up anything written at the very end
      continue;
    }
    // Wait for the job to move (restart, end) before streaming again.
    auto next = client.GetJob(job_id, job->version(), absl::Milliseconds(200));
    if (!next.ok()) return next.status();
    job = std::move(next);
  }
  printer.Flush();
  return client.GetJob(job_id);
}

}  // namespace drover::cli
