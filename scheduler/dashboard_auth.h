// DashboardAuth: how a browser gets into the scheduler's dashboard without the cluster
// token ever appearing in a URL. `drover dashboard` (holding the token) asks for a
// login code (Scheduler.CreateDashboardLogin); the code is random (128 bits), valid
// for `code_ttl` and for one use; the dashboard's /login exchanges it for a session id
// (256 bits) that lives only in an HttpOnly, SameSite=Strict cookie and expires after
// `session_ttl`. Codes and sessions are kept in memory: a restarted scheduler forgets
// them (run `drover dashboard` again).
//
// Bounded: at most `max_codes` unused codes and `max_sessions` sessions (the oldest go
// first). Thread-safe.
#ifndef DROVER_SCHEDULER_DASHBOARD_AUTH_H_
#define DROVER_SCHEDULER_DASHBOARD_AUTH_H_

#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace drover {

struct DashboardAuthOptions {
  absl::Duration code_ttl = absl::Minutes(2);
  absl::Duration session_ttl = absl::Hours(12);
  size_t max_codes = 64;
  size_t max_sessions = 256;
};

class DashboardAuth {
 public:
  // `clock` (not owned) must outlive this.
  explicit DashboardAuth(Clock* clock, DashboardAuthOptions options = {});

  // A fresh one-time code; `*expires` says until when it works.
  std::string NewCode(absl::Time* expires);
  // Exchanges `code` for a new session id, once; nullopt for a code that is unknown,
  // used or expired.
  std::optional<std::string> Redeem(const std::string& code);
  // True for a session id Redeem gave that has not expired.
  bool ValidSession(const std::string& session);

  const DashboardAuthOptions& options() const { return options_; }

 private:
  // Drops what expired, then the oldest until there is room for one more.
  static void Trim(std::map<std::string, absl::Time>* m, absl::Time now, size_t max);

  Clock* const clock_;
  const DashboardAuthOptions options_;
  absl::Mutex mu_;
  std::map<std::string, absl::Time> codes_ ABSL_GUARDED_BY(mu_);     // code -> expiry
  std::map<std::string, absl::Time> sessions_ ABSL_GUARDED_BY(mu_);  // id -> expiry
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_DASHBOARD_AUTH_H_
