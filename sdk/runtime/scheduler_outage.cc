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

void SchedulerOutage::Tell(uint64_t ticket, const std::string& line) {
  {
    absl::MutexLock l(&told_mu_);
    auto my_turn = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(told_mu_) {
      return told_ == ticket;
    };
    told_mu_.Await(absl::Condition(&my_turn));
  }
  // No lock is held while the sink writes (a stream that may block): the other tellers
  // wait for their turn, which comes only when this line is out.
  sink_(line);
  absl::MutexLock l(&told_mu_);
  ++told_;
}

void SchedulerOutage::Away(const absl::Status& why, absl::string_view waiting) {
  uint64_t ticket;
  {
    absl::MutexLock l(&mu_);
    if (away_) return;
    away_ = true;
    ticket = next_ticket_++;
  }
  Tell(ticket, absl::StrCat("the scheduler at ", address_, " does not answer (",
                     why.ok() ? absl::string_view("it stopped") : why.message(), "); ", waiting,
                     " waits for it to come back"));
}

void SchedulerOutage::Back() {
  uint64_t ticket;
  {
    absl::MutexLock l(&mu_);
    if (!away_) return;
    away_ = false;
    ticket = next_ticket_++;
  }
  Tell(ticket, absl::StrCat("the scheduler at ", address_, " is back"));
}

bool SchedulerOutage::away() {
  absl::MutexLock l(&mu_);
  return away_;
}

}  // namespace drover::internal
