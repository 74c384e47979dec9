// The owner's side of objects: what this process knows of every object it made (task
// results, Puts) or was handed, and the waits on them.
//
// An object is owned by the process that made it: it learns first when the object is
// ready or failed, keeps its value (small values inline, large ones as the id of a store
// object) and the task that made it (lineage, to make it again if its node is lost).
// RefState is shared by every ObjectRef copy; when the last one goes, the object is
// released (its store copy deleted).
//
// The process's table is made by runtime.cc (which wires the runtime) and handed to
// the cores; unit tests make their own.
//
// Threading: one mutex (ObjectTable::mu_) guards every RefState's mutable fields. Done
// callbacks run without it, on the thread that completed the object: so whoever calls
// Complete, Fail or WhenDone must hold no lock that a callback may take (a dependent
// task's callback submits or fails it, taking the submitter's and actors' locks).
#ifndef DROVER_SDK_RUNTIME_OBJECT_TABLE_H_
#define DROVER_SDK_RUNTIME_OBJECT_TABLE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "drover/internal/codec.h"

namespace drover::internal {

struct TaskRecord;
class ObjectTable;

class RefState {
 public:
  enum class State { kPending, kReady, kFailed };

  RefState(ObjectTable* table, std::string id) : id(std::move(id)), table_(table) {}
  ~RefState();
  RefState(const RefState&) = delete;
  RefState& operator=(const RefState&) = delete;

  const std::string id;

  // Guarded by the table's mutex.
  State state = State::kPending;
  std::shared_ptr<const std::string> inline_bytes;  // the value, when small
  std::optional<StoredRef> stored;    // or the store object holding it
  std::vector<StoredRef> contained;   // store objects the value refers to (tensors)
  absl::Status error;                 // when failed
  uint64_t done_seq = 0;              // completion order
  // When it became ready here (after its store objects were put: a store restart seen
  // later lost them if they are gone). InfiniteFuture while not ready.
  absl::Time made = absl::InfiniteFuture();
  std::string pending_reason;         // why its task waits (for timeouts' messages)
  // While its task waits for arguments: the task's name and its reference arguments
  // (1-based index), so a timeout can name the one it waits for and why that one waits.
  std::string waiting_task;
  std::vector<std::pair<size_t, std::weak_ptr<RefState>>> waits_on;
  std::vector<std::function<void()>> on_done;
  // The threads waiting for it (WaitDone, WaitAny), each on a condition of its own:
  // its completion wakes them and no other waiter.
  std::vector<absl::CondVar*> waiters;
  // The task that made it: kept for stored results, to make them again if lost.
  std::shared_ptr<TaskRecord> lineage;
  // The pinned bytes once read from a store (so later Gets need no round trip).
  std::optional<ValueView> cache;
  // Sent to another process inside a value: the store copy must then outlive this ref.
  bool escaped = false;
  // Set (release) once state is no longer kPending, for waiters that spin before they
  // sleep; read without the lock.
  std::atomic<bool> done{false};
  // How long a waiter spins before it sleeps (µs): set by whoever sends the task that
  // makes it, from how long such tasks take (spinning for a long task only takes the
  // CPU from the worker and the store).
  std::atomic<int32_t> spin_us{50};

 private:
  ObjectTable* const table_;
};

// What a completed task or Put gives an object.
struct ObjectValue {
  std::shared_ptr<const std::string> inline_bytes;
  std::optional<StoredRef> stored;
  std::vector<StoredRef> contained;
};

class ObjectTable {
 public:
  // Called (without the lock) for the store objects of a released object, to delete them.
  using ReleaseFn = std::function<void(const std::vector<StoredRef>& objects)>;

  ObjectTable() = default;
  void set_release(ReleaseFn fn);

  // A new object, pending until Complete or Fail.
  std::shared_ptr<RefState> NewPending(std::string id);
  // A new object, ready (Put).
  std::shared_ptr<RefState> NewReady(std::string id, ObjectValue value);
  std::shared_ptr<RefState> NewFailed(std::string id, absl::Status error);

  // Sets the outcome (the first one wins; later calls are ignored) and runs the done
  // callbacks on this thread.
  // REQUIRES: the caller holds no lock a done callback may take (see the top).
  void Complete(const std::shared_ptr<RefState>& ref, ObjectValue value) ABSL_LOCKS_EXCLUDED(mu_);
  void Fail(const std::shared_ptr<RefState>& ref, absl::Status error) ABSL_LOCKS_EXCLUDED(mu_);
  // Sets why the object's task waits (shown when a Get times out).
  void SetPendingReason(const std::shared_ptr<RefState>& ref, const std::string& reason);
  // Records that the object's task (`task`, as errors name it) waits for these
  // reference arguments (1-based index, ref).
  void SetWaitsOn(const std::shared_ptr<RefState>& ref, std::string task,
                  std::vector<std::pair<size_t, std::weak_ptr<RefState>>> args);
  // Why a pending object is not ready: its task's reason, or the argument its task
  // waits for and why that one is not ready, down the chain. "" if nothing is known.
  std::string PendingReason(const std::shared_ptr<RefState>& ref) ABSL_LOCKS_EXCLUDED(mu_);

  // Runs `fn` once the object is done (now, on this thread, if it already is).
  // REQUIRES: as Complete, when the object may be done already.
  void WhenDone(const std::shared_ptr<RefState>& ref, std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until the object is done or `deadline`. Returns false on timeout.
  bool WaitDone(const std::shared_ptr<RefState>& ref, absl::Time deadline);
  // Indices of done objects, in completion order, once `num` are done or `deadline`.
  std::vector<size_t> WaitAny(const std::vector<std::shared_ptr<RefState>>& refs, int num,
                              absl::Time deadline);

  // A snapshot of the outcome, read under the lock.
  struct Outcome {
    RefState::State state;
    ObjectValue value;
    absl::Status error;
    std::optional<ValueView> cache;
    std::string pending_reason;
    absl::Time made = absl::InfiniteFuture();  // RefState::made
  };
  Outcome Read(const std::shared_ptr<RefState>& ref);
  void SetCache(const std::shared_ptr<RefState>& ref, ValueView view);
  // Lineage: the task that made a stored value. TakeLineage makes the object pending
  // again and returns the task to run again (null if it has none: a Put, an actor call).
  void SetLineage(const std::shared_ptr<RefState>& ref, std::shared_ptr<TaskRecord> task);
  std::shared_ptr<TaskRecord> TakeLineage(const std::shared_ptr<RefState>& ref);
  void MarkEscaped(const std::shared_ptr<RefState>& ref);

  // Called by ~RefState.
  void Released(RefState* ref);

  // While one lives on a thread, the store deletes of objects released there are
  // collected instead of made (a delete may block for seconds: a store restarting);
  // the owner hands them to a thread that may block (ReleaseNow). For an event loop's
  // thread, which must never block.
  class DeferReleases {
   public:
    DeferReleases();
    ~DeferReleases();  // what is still collected is released here
    DeferReleases(const DeferReleases&) = delete;
    DeferReleases& operator=(const DeferReleases&) = delete;
    // Each entry carries the release function its table had when the object was
    // released, not the table: a delete made late (after ConnectionLoop::Stop left it
    // to finish on its own) never touches a table that may be gone by then.
    using Batch = std::vector<std::pair<ReleaseFn, std::vector<StoredRef>>>;
    Batch Take() { return std::exchange(batch_, {}); }

   private:
    friend class ObjectTable;
    DeferReleases* outer_;
    Batch batch_;
  };
  // Deletes store objects collected by a DeferReleases (with the release functions
  // they carry: it reads no table).
  static void ReleaseNow(DeferReleases::Batch batch);

  absl::Mutex* mu() { return &mu_; }

 private:
  void Finish(const std::shared_ptr<RefState>& ref) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  uint64_t next_done_seq_ ABSL_GUARDED_BY(mu_) = 1;
  ReleaseFn release_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_OBJECT_TABLE_H_
