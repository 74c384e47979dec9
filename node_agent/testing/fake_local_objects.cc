#include "node_agent/testing/fake_local_objects.h"

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace drover::testing {

bool FakeLocalObjects::Contains(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  return it != objects_.end() && it->second.sealed;
}

absl::StatusOr<ReadView> FakeLocalObjects::Acquire(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second.sealed) {
    return absl::NotFoundError(absl::StrCat("object ", absl::CHexEscape(id), " is not in the store"));
  }
  ++it->second.pins;
  ReadView v;
  v.data = it->second.data.get();
  v.size = it->second.size;
  v.metadata = it->second.metadata;
  return v;
}

void FakeLocalObjects::Release(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it != objects_.end() && it->second.pins > 0) --it->second.pins;
}

absl::StatusOr<WriteView> FakeLocalObjects::CreateSecondary(const std::string& id, int64_t size,
                                                            const std::string& metadata) {
  if (size < 0) return absl::InvalidArgumentError("negative size");
  absl::MutexLock lock(&mu_);
  if (objects_.count(id)) {
    return absl::AlreadyExistsError(absl::StrCat("object ", absl::CHexEscape(id), " exists"));
  }
  int64_t need = size + static_cast<int64_t>(metadata.size());
  if (capacity_ >= 0 && used_ + need > capacity_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("store full: asked ", need, " bytes, ", capacity_ - used_, " of ",
                     capacity_, " free"));
  }
  Object& o = objects_[id];
  // Uninitialized, like fresh arena space: the writer fills every byte.
  o.data.reset(new uint8_t[size > 0 ? size : 1]);
  o.size = size;
  o.metadata = metadata;
  used_ += need;
  return WriteView{o.data.get(), size};
}

absl::Status FakeLocalObjects::Seal(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    return absl::NotFoundError(absl::StrCat("seal: no object ", absl::CHexEscape(id)));
  }
  if (it->second.sealed) {
    return absl::FailedPreconditionError(absl::StrCat("object ", absl::CHexEscape(id), " is already sealed"));
  }
  it->second.sealed = true;
  return absl::OkStatus();
}

void FakeLocalObjects::Abort(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.sealed) return;
  used_ -= it->second.size + static_cast<int64_t>(it->second.metadata.size());
  objects_.erase(it);
}

absl::Status FakeLocalObjects::Put(const std::string& id, const std::string& data,
                                   const std::string& metadata) {
  auto v = CreateSecondary(id, static_cast<int64_t>(data.size()), metadata);
  if (!v.ok()) return v.status();
  if (!data.empty()) std::memcpy(v->data, data.data(), data.size());
  return Seal(id);
}

int FakeLocalObjects::Count() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(objects_.size());
}

int FakeLocalObjects::Pins(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  return it == objects_.end() ? 0 : it->second.pins;
}

bool FakeLocalObjects::Sealed(const std::string& id) { return Contains(id); }

std::string FakeLocalObjects::Data(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return "";
  return std::string(reinterpret_cast<const char*>(it->second.data.get()), it->second.size);
}

std::string FakeLocalObjects::Metadata(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  return it == objects_.end() ? "" : it->second.metadata;
}

int64_t FakeLocalObjects::used() {
  absl::MutexLock lock(&mu_);
  return used_;
}

}  // namespace drover::testing
