// The object store's shared vocabulary: the id types and the limits that the client,
// the server and the wire protocol (proto/object_store.proto) must agree on. One
// definition of each, so the client links no server code for them.
//
// Header-only, no dependencies beyond the standard library; constants only.
#ifndef DROVER_OBJECT_STORE_OBJECT_ID_H_
#define DROVER_OBJECT_STORE_OBJECT_ID_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace drover::object_store {

// 20 random bytes as 40 hex chars (Client::RandomId), or any client-chosen string of
// 1..kMaxIdBytes bytes.
using ObjectId = std::string;
// A connected client, assigned by the server (StoreHello.client_id).
using ClientId = uint64_t;

// Longest object id the store accepts.
inline constexpr size_t kMaxIdBytes = 64;

// Every object, lease and ready slot in the arena starts on this boundary.
inline constexpr uint64_t kAlignment = 64;
// The smallest multiple of kAlignment >= n. REQUIRES: n <= UINT64_MAX - 63.
inline constexpr uint64_t AlignUp(uint64_t n) {
  return (n + kAlignment - 1) / kAlignment * kAlignment;
}

// Objects up to this size may be put with their bytes inside the CreateRequest
// (inline_put): one round trip, the store copies them in. Copying 64 KiB through the
// socket costs less than a second round trip. The store refuses larger inline puts.
inline constexpr uint64_t kMaxInlinePut = 64u << 10;

// Most ids one GetRequest may name.
inline constexpr int kMaxIdsPerGet = 4096;

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_OBJECT_ID_H_
