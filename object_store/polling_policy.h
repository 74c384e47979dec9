// PollingPolicy: when the store's loop polls its sockets instead of sleeping, when it
// moves off a contended CPU, and when it backs off because polling starves.
//
// Why poll at all: a client's next request then finds the store running. A sleeping
// store costs each request a wake-up (~5 µs for the sender on a VM, more for the
// answer) and lets the kernel move the woken store onto the client's CPU, where it
// waits for that client (ServerOptions::stay_awake, docs/object_store.md "A store that
// stays awake").
//
// The rules, all from observations the loop hands in (no clock, no syscalls here):
// - After each request the loop stays awake for `stay_awake` (OnRequest).
// - A stall between two polls longer than kContended (a timer tick, a task passing
//   through, a client spinning on this CPU) means the CPU is contended: move to
//   another CPU (kMove), at most once per kMoveInterval, and poll on.
// - A stall of kStarved or more during which the thread was involuntarily switched out
//   (another task of this machine ran instead) means a task that wants this CPU for
//   whole time slices: a runnable poller gets the CPU back only when the scheduler
//   next picks it (~4 ms), while a sleeper woken by a request preempts at once. So the
//   loop sleeps, and requests open no window for a back-off of kMinBackoff, doubling
//   up to kMaxBackoff while polling keeps starving, back to kMinBackoff after a window
//   that does not. (Up to 1 s was tried: a client's own burst of work, such as a large
//   put copying on every CPU, then left the store asleep through the next second of
//   small requests.)
// - A long stall without such a switch is the hypervisor's (steal) and is not
//   starvation: taking it for contention stopped polling on a noisy host and made
//   every figure 2-6x slower.
//
// Thread safety: none; the store's loop thread owns it.
#ifndef DROVER_OBJECT_STORE_POLLING_POLICY_H_
#define DROVER_OBJECT_STORE_POLLING_POLICY_H_

#include <cstdint>

#include "absl/time/time.h"

namespace drover::object_store {

class PollingPolicy {
 public:
  static constexpr absl::Duration kContended = absl::Microseconds(20);
  static constexpr absl::Duration kStarved = absl::Milliseconds(1);
  static constexpr absl::Duration kMoveInterval = absl::Milliseconds(1);
  static constexpr absl::Duration kMinBackoff = absl::Milliseconds(10);
  static constexpr absl::Duration kMaxBackoff = absl::Milliseconds(50);

  // What the loop does next, after a poll found nothing.
  enum class Step {
    kPoll,       // poll again (yielding the CPU in between)
    kMove,       // the CPU is contended: move off it, then Rebaseline and poll again
    kContended,  // contended, but moved less than kMoveInterval ago: Rebaseline, poll
    kSleep,      // the window closed or polling starved: block until an event
  };

  // `stay_awake` zero or less: never poll.
  explicit PollingPolicy(absl::Duration stay_awake) : stay_awake_(stay_awake) {}

  // A request came at `now`: stay awake until now + stay_awake, unless backing off.
  void OnRequest(absl::Time now);
  // Whether the loop is in a stay-awake window (polls rather than sleeps).
  bool awake() const { return awake_until_ != absl::InfinitePast(); }

  // A wait begins, awake; `switches` is the thread's involuntary switch count now.
  void BeginWait(uint64_t switches) { switches_ = switches; }
  // Whether Next needs the switch count for a stall this long (getrusage is not free:
  // the loop reads it only then, else passes 0).
  static bool WantsSwitches(absl::Duration stall) { return stall >= kStarved; }
  // Decides the next step of an awake wait at `now`: `stall` is the time since the
  // previous poll began, `switches` the thread's involuntary switches so far (see
  // WantsSwitches). kSleep ends the window.
  Step Next(absl::Time now, absl::Duration stall, uint64_t switches);
  // After kMove or kContended: the switch count after moving, so that a later long
  // stall is judged on its own.
  void Rebaseline(uint64_t switches) { switches_ = switches; }

  // Back-off state, for tests and logs: whether requests open windows now, and the
  // next back-off's length.
  bool backing_off(absl::Time now) const { return !polling_pays_ && now < resume_polling_; }
  absl::Duration next_backoff() const { return backoff_; }

 private:
  const absl::Duration stay_awake_;
  absl::Time awake_until_ = absl::InfinitePast();  // InfinitePast: sleeps when idle
  absl::Time last_move_ = absl::InfinitePast();
  bool polling_pays_ = true;  // false for a while after polling starved
  absl::Time resume_polling_ = absl::InfinitePast();
  absl::Duration backoff_ = kMinBackoff;
  uint64_t switches_ = 0;  // when the wait began, or at its last stall
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_POLLING_POLICY_H_
