// JobKv: the key-value scopes of running job generations, for rendezvous.
//
// Not thread-safe: Rendezvous (rendezvous.h) guards it with its lock, checks the scopes
// and runs the waits.
#ifndef DROVER_SCHEDULER_JOB_KV_H_
#define DROVER_SCHEDULER_JOB_KV_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace drover {

inline constexpr size_t kKvMaxKeyBytes = 1024;
inline constexpr size_t kKvMaxValueBytes = 1 << 20;
inline constexpr size_t kKvMaxBytesPerScope = 64 << 20;

class JobKv {
 public:
  using Scope = std::pair<std::string, int>;  // (job id, generation)

  // INVALID_ARGUMENT for an empty or oversized key or value; RESOURCE_EXHAUSTED when
  // the scope would exceed kKvMaxBytesPerScope.
  absl::Status Set(const Scope& scope, const std::string& key, const std::string& value);
  // nullopt if absent.
  std::optional<std::string> Get(const Scope& scope, const std::string& key) const;
  // Returns whether it swapped; `current` gets the value afterwards (nullopt if absent).
  absl::StatusOr<bool> CompareAndSet(const Scope& scope, const std::string& key,
                                     const std::optional<std::string>& expected,
                                     const std::string& desired,
                                     std::optional<std::string>* current);
  // INVALID_ARGUMENT if the key holds something that is not a decimal int64, or on
  // overflow. A repeated non-empty request_id returns the first result.
  absl::StatusOr<int64_t> Add(const Scope& scope, const std::string& key, int64_t delta,
                              const std::string& request_id);
  // Drops every scope of `job_id` (all generations).
  void DropJob(const std::string& job_id);
  // Drops the scopes of `job_id` with generation < `generation`.
  void DropOlderThan(const std::string& job_id, int generation);
  size_t scopes() const { return data_.size(); }

 private:
  struct Data {
    std::map<std::string, std::string> values;
    size_t bytes = 0;
    std::map<std::string, int64_t> add_results;  // request_id -> result
    std::deque<std::string> add_order;           // oldest first, bounded
  };
  absl::Status Check(const std::string& key, const std::string& value) const;

  std::map<Scope, Data> data_;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_JOB_KV_H_
