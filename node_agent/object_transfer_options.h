// What object transfer (object_transfer.h) is configured with, what it counts and
// whose node it is, shared by its serving (object_transfer_serve.h) and pulling
// (object_transfer_pull.h) halves. Header-only.
#ifndef DROVER_NODE_AGENT_OBJECT_TRANSFER_OPTIONS_H_
#define DROVER_NODE_AGENT_OBJECT_TRANSFER_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace drover {

// One pull that moved bytes (or tried to), told to ObjectTransferOptions::on_pull.
struct PullRecord {
  std::string object_id;  // as received (may hold any bytes)
  // The job it was fetched for (FetchObjectRequest.job_id, else the "<job>." prefix
  // of the id); empty if none is known.
  std::string job_id;
  std::string source_node;  // the holder of the last attempt
  int64_t bytes = 0;        // received by the last attempt
  absl::Time start;         // the first attempt
  absl::Time end;
  absl::Status status;
};

struct ObjectTransferOptions {
  // The cluster token, sent on every outbound call.
  std::string token;
  // host:port of the scheduler (the object directory).
  std::string scheduler_address;
  // Largest ObjectChunk.data served.
  int64_t chunk_bytes = 4 << 20;
  // Keepalive on peer channels: ping after this much silence on a connection with an
  // active call, and drop the connection if the ping is not answered in time.
  absl::Duration keepalive_time = absl::Seconds(2);
  absl::Duration keepalive_timeout = absl::Seconds(3);
  // Upper bound for directory calls (also capped by the Fetch deadline).
  absl::Duration directory_timeout = absl::Seconds(5);
  // How peer channels and raw connections are secured (TLS or plain text); null: the
  // process's transport (ProcessTransport()) when the ObjectTransfer is made.
  std::shared_ptr<const TransportSecurity> transport;
  // Move object data over a one-time TCP connection negotiated on the ReadObject
  // stream (object_transfer.h). Pulling: ask holders for it; serving: offer it when
  // asked. Either side can turn it off; the data then travels in ObjectChunks.
  bool raw_tcp = true;
  // How long a holder waits for the reader's raw connection (and its token), and how
  // long a reader tries to connect.
  absl::Duration raw_connect_timeout = absl::Seconds(5);
  // Told of each pull when it ends (on the pulling thread; must be quick): the agent
  // reports it to the job's timeline. Not for fetches of objects already here.
  std::function<void(const PullRecord&)> on_pull;
};

// `o` with `transport` filled in (the process's if it is null).
inline ObjectTransferOptions WithTransport(ObjectTransferOptions o) {
  if (o.transport == nullptr) o.transport = ProcessTransport();
  return o;
}

// Counters since construction, for tests, logs and a future /metrics.
struct ObjectTransferStats {
  int64_t reads_started = 0;    // ReadObject streams that found their object
  int64_t reads_completed = 0;  // ... and sent it to the end
  int64_t bytes_served = 0;
  int64_t pulls_started = 0;    // Fetches that had to pull (one per shared transfer)
  int64_t pulls_succeeded = 0;
  int64_t bytes_pulled = 0;     // bytes written into the store by pulls, incl. aborted
  int64_t fetches_joined = 0;   // Fetches that waited on another caller's pull
  int64_t raw_reads = 0;        // ReadObject streams whose data went over raw TCP
  int64_t raw_pulls = 0;        // pulls whose data came over raw TCP (incl. failed)
};

// This node's id in the scheduler, set once the agent has registered; shared by the
// serving and the pulling half. Thread-safe.
class NodeIdentity {
 public:
  void Set(const std::string& id) {
    absl::MutexLock lock(&mu_);
    id_ = id;
  }
  // Empty until Set.
  std::string Get() const {
    absl::MutexLock lock(&mu_);
    return id_;
  }
  // For messages: "(unregistered)" until Set.
  std::string ForMessages() const {
    std::string id = Get();
    return id.empty() ? "(unregistered)" : id;
  }

 private:
  mutable absl::Mutex mu_;
  std::string id_ ABSL_GUARDED_BY(mu_);
};

// An object id for messages: printable ids as they are, others C-escaped.
inline std::string PrintableObjectId(const std::string& id) { return absl::CHexEscape(id); }

}  // namespace drover

#endif  // DROVER_NODE_AGENT_OBJECT_TRANSFER_OPTIONS_H_
