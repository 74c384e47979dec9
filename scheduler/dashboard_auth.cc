#include "scheduler/dashboard_auth.h"

#include <algorithm>

#include "common/auth.h"

namespace drover {

DashboardAuth::DashboardAuth(Clock* clock, DashboardAuthOptions options)
    : clock_(clock), options_(options) {}

void DashboardAuth::Trim(std::map<std::string, absl::Time>* m, absl::Time now, size_t max) {
  for (auto it = m->begin(); it != m->end();) {
    it = it->second <= now ? m->erase(it) : std::next(it);
  }
  while (!m->empty() && m->size() >= max) {
    m->erase(std::min_element(m->begin(), m->end(), [](const auto& a, const auto& b) {
      return a.second < b.second;
    }));
  }
}

std::string DashboardAuth::NewCode(absl::Time* expires) {
  std::string code = GenerateToken().substr(0, 32);
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  Trim(&codes_, now, options_.max_codes);
  *expires = now + options_.code_ttl;
  codes_[code] = *expires;
  return code;
}

std::optional<std::string> DashboardAuth::Redeem(const std::string& code) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  // Compared in constant time against every live code: a lookup would tell by its
  // timing how much of a guess was right.
  auto found = codes_.end();
  for (auto it = codes_.begin(); it != codes_.end(); ++it) {
    if (SecretsEqual(code, it->first)) found = it;
  }
  if (found == codes_.end()) return std::nullopt;
  const bool live = found->second > now;
  codes_.erase(found);  // one use, even a late one
  if (!live) return std::nullopt;
  Trim(&sessions_, now, options_.max_sessions);
  std::string session = GenerateToken();
  sessions_[session] = now + options_.session_ttl;
  return session;
}

bool DashboardAuth::ValidSession(const std::string& session) {
  if (session.empty()) return false;
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  bool valid = false;
  for (const auto& [id, expires] : sessions_) {
    if (SecretsEqual(session, id) && expires > now) valid = true;
  }
  return valid;
}

}  // namespace drover
