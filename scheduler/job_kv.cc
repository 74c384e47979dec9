#include "scheduler/job_kv.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace drover {

absl::Status JobKv::Check(const std::string& key, const std::string& value) const {
  if (key.empty() || key.size() > kKvMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV key must be 1..", kKvMaxKeyBytes, " bytes (got ", key.size(), ")"));
  }
  if (value.size() > kKvMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("KV value for '", key, "' is ", value.size(),
                                                   " bytes; the limit is ", kKvMaxValueBytes));
  }
  return absl::OkStatus();
}

absl::Status JobKv::Set(const Scope& scope, const std::string& key, const std::string& value) {
  if (absl::Status s = Check(key, value); !s.ok()) return s;
  Data& d = data_[scope];
  auto it = d.values.find(key);
  size_t old = it == d.values.end() ? 0 : key.size() + it->second.size();
  size_t next = d.bytes - old + key.size() + value.size();
  if (next > kKvMaxBytesPerScope) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV of job ", scope.first, " would hold ", next, " bytes; the limit is ",
        kKvMaxBytesPerScope, " (store large data in the object store instead)"));
  }
  d.bytes = next;
  d.values[key] = value;
  return absl::OkStatus();
}

std::optional<std::string> JobKv::Get(const Scope& scope, const std::string& key) const {
  auto s = data_.find(scope);
  if (s == data_.end()) return std::nullopt;
  auto it = s->second.values.find(key);
  if (it == s->second.values.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<bool> JobKv::CompareAndSet(const Scope& scope, const std::string& key,
                                          const std::optional<std::string>& expected,
                                          const std::string& desired,
                                          std::optional<std::string>* current) {
  if (absl::Status s = Check(key, desired); !s.ok()) return s;
  std::optional<std::string> now = Get(scope, key);
  if (now != expected) {
    *current = now;
    return false;
  }
  if (absl::Status s = Set(scope, key, desired); !s.ok()) return s;
  *current = desired;
  return true;
}

absl::StatusOr<int64_t> JobKv::Add(const Scope& scope, const std::string& key, int64_t delta,
                                   const std::string& request_id) {
  if (absl::Status s = Check(key, ""); !s.ok()) return s;
  Data& d = data_[scope];
  if (!request_id.empty()) {
    auto done = d.add_results.find(request_id);
    if (done != d.add_results.end()) return done->second;
  }
  int64_t value = 0;
  auto it = d.values.find(key);
  if (it != d.values.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV key '", key, "' holds a value that is not an integer"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    return absl::InvalidArgumentError(absl::StrCat("KV add on '", key, "' overflows int64"));
  }
  if (absl::Status s = Set(scope, key, absl::StrCat(sum)); !s.ok()) return s;
  if (!request_id.empty()) {
    d.add_results[request_id] = sum;
    d.add_order.push_back(request_id);
    if (d.add_order.size() > 4096) {
      d.add_results.erase(d.add_order.front());
      d.add_order.pop_front();
    }
  }
  return sum;
}

void JobKv::DropJob(const std::string& job_id) {
  auto it = data_.lower_bound({job_id, INT32_MIN});
  while (it != data_.end() && it->first.first == job_id) it = data_.erase(it);
}

void JobKv::DropOlderThan(const std::string& job_id, int generation) {
  auto it = data_.lower_bound({job_id, INT32_MIN});
  while (it != data_.end() && it->first.first == job_id && it->first.second < generation) {
    it = data_.erase(it);
  }
}

}  // namespace drover
