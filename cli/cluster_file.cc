#include "cli/cluster_file.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace drover::cli {
namespace {

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat(path, ": ", what, "; remove the file if no cluster of yours runs"));
}

// A value as it appears in the file, cut short for a message.
std::string Shown(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

absl::StatusOr<pid_t> Pid(const nlohmann::json& v, const std::string& path,
                          const std::string& key) {
  // Integers only: a float would be cast, and a huge one is undefined behaviour.
  if (v.is_number_unsigned() || v.is_number_integer()) {
    const int64_t p = v.is_number_unsigned()
                          ? static_cast<int64_t>(std::min<uint64_t>(
                                v.get<uint64_t>(), std::numeric_limits<int64_t>::max()))
                          : v.get<int64_t>();
    if (p > 0 && p <= std::numeric_limits<pid_t>::max()) return static_cast<pid_t>(p);
  }
  return Bad(path, absl::StrCat(key, " is ", Shown(v), ", not a process id"));
}

absl::Status String(const nlohmann::json& j, const std::string& path, const char* key,
                    std::string* out) {
  auto it = j.find(key);
  if (it == j.end()) return absl::OkStatus();
  if (!it->is_string()) return Bad(path, absl::StrCat(key, " is ", Shown(*it), ", not a string"));
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status StringList(const nlohmann::json& v, const std::string& path, const std::string& key,
                        std::vector<std::string>* out) {
  if (!v.is_array()) return Bad(path, absl::StrCat(key, " is ", Shown(v), ", not a list"));
  out->clear();
  for (const nlohmann::json& e : v) {
    if (!e.is_string()) {
      return Bad(path, absl::StrCat("an entry of ", key, " is ", Shown(e), ", not a string"));
    }
    out->push_back(e.get<std::string>());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterRecord> ParseClusterRecord(const std::string& text,
                                                 const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(path, "not valid JSON");
  if (!j.is_object()) return Bad(path, "not a JSON object");
  ClusterRecord r;
  DROVER_RETURN_IF_ERROR(String(j, path, "address", &r.address));
  DROVER_RETURN_IF_ERROR(String(j, path, "token_file", &r.token_file));
  DROVER_RETURN_IF_ERROR(String(j, path, "tls_ca", &r.tls_ca));
  DROVER_RETURN_IF_ERROR(String(j, path, "dir", &r.dir));
  DROVER_RETURN_IF_ERROR(String(j, path, "redis", &r.redis));
  DROVER_RETURN_IF_ERROR(String(j, path, "redis_password_file", &r.redis_password_file));
  for (auto [key, out] : {std::pair{"scheduler_argv", &r.scheduler_argv},
                          std::pair{"redis_argv", &r.redis_argv}}) {
    if (auto it = j.find(key); it != j.end()) {
      DROVER_RETURN_IF_ERROR(StringList(*it, path, key, out));
    }
  }
  if (auto it = j.find("agent_argvs"); it != j.end()) {
    if (!it->is_array()) return Bad(path, absl::StrCat("agent_argvs is ", Shown(*it), ", not a list"));
    for (const nlohmann::json& a : *it) {
      r.agent_argvs.emplace_back();
      DROVER_RETURN_IF_ERROR(StringList(a, path, "agent_argvs", &r.agent_argvs.back()));
    }
  }
  for (auto [key, out] : {std::pair{"scheduler_pid", &r.scheduler_pid},
                          std::pair{"redis_pid", &r.redis_pid}, std::pair{"pid", &r.head_pid}}) {
    if (auto it = j.find(key); it != j.end()) {
      DROVER_ASSIGN_OR_RETURN(*out, Pid(*it, path, key));
    }
  }
  if (auto it = j.find("agent_pids"); it != j.end()) {
    if (!it->is_array()) return Bad(path, absl::StrCat("agent_pids is ", Shown(*it), ", not a list"));
    for (const nlohmann::json& p : *it) {
      DROVER_ASSIGN_OR_RETURN(pid_t pid, Pid(p, path, "an entry of agent_pids"));
      r.agent_pids.push_back(pid);
    }
  }
  return r;
}

}  // namespace drover::cli
