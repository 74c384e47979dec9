#include "object_store/polling_policy.h"

#include <algorithm>

namespace drover::object_store {

void PollingPolicy::OnRequest(absl::Time now) {
  if (stay_awake_ <= absl::ZeroDuration()) return;
  if (!polling_pays_ && now >= resume_polling_) polling_pays_ = true;
  if (polling_pays_) awake_until_ = now + stay_awake_;
}

PollingPolicy::Step PollingPolicy::Next(absl::Time now, absl::Duration stall,
                                        uint64_t switches) {
  if (!awake()) return Step::kSleep;
  const bool starved = stall >= kStarved && switches > switches_;
  if (now >= awake_until_ || starved) {
    if (starved) {
      polling_pays_ = false;
      resume_polling_ = now + backoff_;
      backoff_ = std::min(backoff_ * 2, kMaxBackoff);
    } else {
      backoff_ = kMinBackoff;  // a whole window without starving
    }
    awake_until_ = absl::InfinitePast();
    return Step::kSleep;
  }
  if (stall > kContended) {
    if (now - last_move_ < kMoveInterval) return Step::kContended;
    last_move_ = now;
    return Step::kMove;
  }
  return Step::kPoll;
}

}  // namespace drover::object_store
