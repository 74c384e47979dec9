// StoreServer: one node's object store, serving the clients of that node over a Unix
// domain socket (proto/object_store.proto, framed as in protocol.h).
//
// It owns the shared-memory arena (arena.h) and the ObjectTable (object_table.h). On
// accepting a connection it assigns the client an id and sends the arena's descriptor
// (SCM_RIGHTS) with a StoreHello; clients then map the arena once and read objects in
// place. Requests are answered in order, except that a Get waiting for objects that
// are absent or unsealed is answered when they are all sealed or its timeout passes
// (later requests of the same client are answered meanwhile; match by request_id).
//
// Leased puts (docs/object_store.md, "Leased puts"): a client may reserve
// free arena space (Lease), write objects into it itself and seal each with one
// SealLeased; the store checks every such range against the caller's own leases and
// frees them when the client goes. A SealLeased's reply is sent before the frames
// queued behind it are handled.
//
// Events: a connection that sent Subscribe receives a StoreEvent for every seal, every
// Delete and every eviction of a secondary copy from then on (optionally preceded by a
// snapshot of the sealed objects), in the order they happened in the loop
// (subscriber.h is the client side). Aborts are not announced (nothing was visible).
//
// Robustness: a client may send anything. A frame that does not parse, an unknown
// operation, a bad id or size gets an error reply; a frame length beyond the maximum,
// a client that stops reading its replies (more than 64 MiB queued), or a socket error
// closes that connection. A closed connection (EOF, reset, hang-up, or a killed
// process) aborts the client's unsealed objects and drops its references. Nothing a
// client sends crashes the server or stops it from serving the others.
//
// Security: the socket file is created mode 0600; its directory, if the server creates
// it, 0700. A stale socket file (no one listening) is removed first; a live one is an
// error (another store runs there).
//
// Threading: one event-loop thread (epoll over the listening socket, the clients, and
// an eventfd for Stop; Get deadlines through the epoll timeout) owns all state; the
// ObjectTable is only touched from it. Start and Stop must be called from one thread
// (the owner), not concurrently; the destructor calls Stop.
#ifndef DROVER_OBJECT_STORE_STORE_SERVER_H_
#define DROVER_OBJECT_STORE_STORE_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace drover::object_store {

struct ServerOptions {
  // Bytes of shared memory for objects; 0 means DefaultArenaCapacity().
  uint64_t capacity = 0;
  // Directory for spilled objects ("" disables spilling). Created 0700 if missing.
  std::string spill_dir;
  // Upper bound on bytes in the spill directory.
  uint64_t spill_capacity = 0;
  // Touch every page of the arena at start (takes ~4 µs per 4 KiB page once, so that
  // every later put writes at memcpy speed; commits the memory).
  bool prefault = false;
  // Ask for transparent huge pages on the arena.
  bool huge_pages = false;
  // After each request the store stays awake this long, polling its sockets (and
  // yielding the CPU between polls) instead of sleeping: a client's next request then
  // finds it running. A sleeping store costs each request a wake-up (~5 µs for the
  // sender on a VM, more for the answer) and lets the kernel move the woken store onto
  // the client's CPU, where it waits for that client. The default covers the copy of
  // the largest leased put (4 MiB, ~300 µs). A short stall (another thread took the CPU
  // for a moment) moves the store to another CPU; a task that keeps it off its CPU for
  // a millisecond or more stops polling for 10-50 ms (docs/object_store.md, "A store
  // that stays awake"). Zero: always sleep.
  absl::Duration stay_awake = absl::Microseconds(300);
  // How long an overlapped seal (SealLeasedRequest.ready_value) may wait for the
  // client's ready word before it is answered UNAVAILABLE (the client then seals again
  // plainly). It bounds how long one descheduled writer can hold the store. Zero:
  // overlapped seals are refused at once, so every leased put seals after its copy.
  absl::Duration ready_wait = absl::Milliseconds(1);
};

class StoreServer {
 public:
  StoreServer();
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Creates the arena, binds `socket_path` (at most 107 bytes) and starts the event
  // loop. INVALID_ARGUMENT for a bad path or options, FAILED_PRECONDITION if a store
  // already listens there or the path is not a socket, RESOURCE_EXHAUSTED if the
  // memory cannot be had. REQUIRES: not started.
  absl::Status Start(const std::string& socket_path, ServerOptions options);

  // Stops the loop, joins its thread, closes every connection and unlinks the socket
  // file. The arena is unmapped; clients' own mappings stay valid until they unmap.
  // Idempotent.
  void Stop();

  const std::string& socket_path() const;
  // The arena's size in bytes (after rounding to pages). REQUIRES: started.
  uint64_t capacity() const;

 private:
  class Loop;
  std::unique_ptr<Loop> loop_;
  std::string socket_path_;
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_STORE_SERVER_H_
