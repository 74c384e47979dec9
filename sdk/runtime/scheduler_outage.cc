#include "sdk/runtime/scheduler_outage.h"

#include <iostream>

#include "absl/strings/str_cat.h"

namespace drover::internal {

SchedulerOutage::SchedulerOutage(std::string address, Sink sink)
    : address_(std::move(address)),
      sink_(sink != nullptr ? std::move(sink) : Sink([](const std::string& line) {
        std::cerr << "drover: " << line << std::endl;
      })) {}

bool SchedulerOutage::IsAway(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

void SchedulerOutage::Away(const absl::Status& why, absl::string_view waiting) {
  {
    absl::MutexLock l(&mu_);
    if (away_) return;
    away_ = true;
  }
  // Told outside the lock: the sink writes to a stream that may block.
  sink_(absl::StrCat("the scheduler at ", address_, " does not answer (",
                     why.ok() ? absl::string_view("it stopped") : why.message(), "); ", waiting,
                     " waits for it to come back"));
}

void SchedulerOutage::Back() {
  {
    absl::MutexLock l(&mu_);
    if (!away_) return;
    away_ = false;
  }
  sink_(absl::StrCat("the scheduler at ", address_, " is back"));
}

bool SchedulerOutage::away() {
  absl::MutexLock l(&mu_);
  return away_;
}

}  // namespace drover::internal
