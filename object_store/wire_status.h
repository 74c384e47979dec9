// Status codes on the object store's wire: StoreReply.code/message and
// GetResult.code/message carry an absl::StatusCode by its number (0 is OK; see
// proto/object_store.proto). These helpers are the one place that converts between the
// two, so that code elsewhere names codes (absl::StatusCode::kUnavailable), never
// numbers.
//
// Header-only; works on any generated message with `code` and `message` fields.
// Reentrant.
#ifndef DROVER_OBJECT_STORE_WIRE_STATUS_H_
#define DROVER_OBJECT_STORE_WIRE_STATUS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace drover::object_store {

// The code a reply or result carries (no allocation: for the hot path's checks).
template <typename Reply>
absl::StatusCode ReplyCode(const Reply& r) {
  return static_cast<absl::StatusCode>(r.code());
}

// The status a reply or result carries: OK for code 0, else its code and message.
inline absl::Status StatusFromWire(int32_t code, absl::string_view message) {
  if (code == static_cast<int32_t>(absl::StatusCode::kOk)) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}
template <typename Reply>
absl::Status ReplyStatus(const Reply& r) {
  return StatusFromWire(r.code(), r.message());
}

// Writes `s` into a reply or result (the message only if not OK).
template <typename Reply>
void SetReplyStatus(const absl::Status& s, Reply* r) {
  r->set_code(static_cast<int32_t>(s.code()));
  if (!s.ok()) r->set_message(std::string(s.message()));
}

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_WIRE_STATUS_H_
