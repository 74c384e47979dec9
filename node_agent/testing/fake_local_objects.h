// FakeLocalObjects: LocalObjects over heap memory, for tests. Thread-safe.
//
// Optionally bounded (`capacity` bytes of data + metadata): CreateSecondary beyond it
// fails with RESOURCE_EXHAUSTED, as the real store does when nothing can be evicted.
#ifndef DROVER_NODE_AGENT_TESTING_FAKE_LOCAL_OBJECTS_H_
#define DROVER_NODE_AGENT_TESTING_FAKE_LOCAL_OBJECTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "node_agent/local_objects.h"

namespace drover::testing {

class FakeLocalObjects final : public LocalObjects {
 public:
  // capacity < 0: unbounded.
  explicit FakeLocalObjects(int64_t capacity = -1) : capacity_(capacity) {}

  bool Contains(const std::string& id) override;
  absl::StatusOr<ReadView> Acquire(const std::string& id) override;
  void Release(const std::string& id) override;
  absl::StatusOr<WriteView> CreateSecondary(const std::string& id, int64_t size,
                                            const std::string& metadata) override;
  absl::Status Seal(const std::string& id) override;
  void Abort(const std::string& id) override;

  // Test helpers.
  // Adds a sealed primary copy of `data`. ALREADY_EXISTS if `id` exists.
  absl::Status Put(const std::string& id, const std::string& data,
                   const std::string& metadata = "");
  // Objects present, sealed or not.
  int Count();
  // Pins held on `id` (0 if absent).
  int Pins(const std::string& id);
  // True if `id` exists and is sealed.
  bool Sealed(const std::string& id);
  // Copies of the data and metadata of `id` ("" if absent).
  std::string Data(const std::string& id);
  std::string Metadata(const std::string& id);
  // Bytes allocated (data + metadata of every object).
  int64_t used();

 private:
  struct Object {
    std::unique_ptr<uint8_t[]> data;
    int64_t size = 0;
    std::string metadata;
    bool sealed = false;
    int pins = 0;
  };

  const int64_t capacity_;
  absl::Mutex mu_;
  std::map<std::string, Object> objects_ ABSL_GUARDED_BY(mu_);
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace drover::testing

#endif  // DROVER_NODE_AGENT_TESTING_FAKE_LOCAL_OBJECTS_H_
