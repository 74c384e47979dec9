// Fuzzes the object store's request handling without sockets: bytes reach the store's
// frame decoder (object_store/protocol.h FrameDecoder) in random pieces, and each frame
// goes to the RequestSwitch (request_switch.h) as the store's loop hands it over, for
// three clients that may disconnect at any point. Half of the steps send well-formed
// StoreRequests built from the input (so the fuzzer reaches deep into create, seal,
// get, leases and overlapped seals), the others raw bytes. Checks: no crash or
// sanitizer report, every reply is a frame holding a StoreReply, and the store
// survives every client's disconnect.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "object_store/arena.h"
#include "object_store/object_id.h"
#include "object_store/protocol.h"
#include "object_store/request_switch.h"
#include "object_store/store_reactor.h"
#include "proto/object_store.pb.h"

namespace drover::object_store {
namespace {

constexpr uint64_t kArenaBytes = 1 << 20;
constexpr int kClients = 3;

std::string PickId(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0: return "a";
    case 1: return "b";
    case 2: return std::string(kMaxIdBytes, 'x');
    case 3: return "";
    default: return in.ConsumeRandomLengthString(kMaxIdBytes + 2);
  }
}

uint64_t PickSize(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: return in.ConsumeIntegralInRange<uint64_t>(0, 256);
    case 1: return in.ConsumeIntegralInRange<uint64_t>(0, kArenaBytes + 4096);
    case 2: return in.ConsumeIntegral<uint64_t>();
    default: return uint64_t{64} * in.ConsumeIntegralInRange<uint64_t>(0, kArenaBytes / 64);
  }
}

// A well-formed request of a kind chosen by the input.
proto::StoreRequest MakeRequest(FuzzedDataProvider& in) {
  proto::StoreRequest r;
  r.set_request_id(in.ConsumeIntegral<uint32_t>());
  switch (in.ConsumeIntegralInRange(0, 12)) {
    case 0: {
      auto* c = r.mutable_create();
      c->set_id(PickId(in));
      c->set_data_size(PickSize(in));
      c->set_metadata(in.ConsumeRandomLengthString(128));
      c->set_secondary(in.ConsumeBool());
      if (in.ConsumeBool()) {
        c->set_inline_put(true);
        c->set_data(in.ConsumeBool() ? std::string(c->data_size() % 4096, 'd')
                                     : in.ConsumeRandomLengthString(256));
      }
      break;
    }
    case 1: r.mutable_seal()->set_id(PickId(in)); break;
    case 2: {
      auto* g = r.mutable_get();
      const int n = in.ConsumeIntegralInRange(0, 4);
      for (int i = 0; i < n; ++i) g->add_ids(PickId(in));
      g->set_timeout_ms(in.ConsumeIntegralInRange<int64_t>(-1, 50));
      break;
    }
    case 3: r.mutable_release()->set_id(PickId(in)); break;
    case 4: r.mutable_delete_()->set_id(PickId(in)); break;
    case 5: r.mutable_contains()->set_id(PickId(in)); break;
    case 6: r.mutable_stats(); break;
    case 7: r.mutable_abort()->set_id(PickId(in)); break;
    case 8: r.mutable_subscribe()->set_snapshot(in.ConsumeBool()); break;
    case 9: r.mutable_lease()->set_bytes(PickSize(in)); break;
    case 10: {
      auto* s = r.mutable_seal_leased();
      s->set_id(PickId(in));
      s->set_offset(PickSize(in));
      s->set_data_size(PickSize(in));
      s->set_metadata_size(in.ConsumeIntegralInRange<uint64_t>(0, 256));
      if (in.ConsumeBool()) {
        s->set_ready_offset(PickSize(in));
        s->set_ready_value(in.ConsumeIntegral<uint64_t>());
      }
      break;
    }
    case 11: {
      auto* l = r.mutable_return_lease();
      l->set_offset(PickSize(in));
      l->set_size(PickSize(in));
      break;
    }
    default: break;  // no operation
  }
  return r;
}

// Every reply queued on `c` must be a whole frame holding a StoreReply.
void CheckReplies(StoreConn& c) {
  FrameDecoder replies;
  replies.Append(c.out.data() + c.out_start, c.out.size() - c.out_start);
  absl::string_view body;
  while (true) {
    absl::StatusOr<bool> got = replies.Next(&body);
    if (!got.ok()) std::abort();
    if (!*got) break;
    proto::StoreReply reply;
    if (!reply.ParseFromArray(body.data(), static_cast<int>(body.size()))) std::abort();
  }
  if (replies.buffered() != 0) std::abort();
  c.out.clear();
  c.out_start = 0;
}

}  // namespace
}  // namespace drover::object_store

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace drover::object_store;
  FuzzedDataProvider in(data, size);
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(kArenaBytes);
  if (!arena.ok()) std::abort();
  ServerOptions options;
  options.capacity = kArenaBytes;
  options.ready_wait = absl::ZeroDuration();
  StoreReactor reactor((*arena)->fd(), (*arena)->capacity(), absl::ZeroDuration());
  RequestSwitch requests(arena->get(), &reactor, options);

  // Connections the reactor does not know: replies stay queued (a batch never flushed),
  // and the switch reaches them only through the connection it is handed.
  ClientId next_id = 1;
  StoreConn conns[kClients];
  for (StoreConn& c : conns) {
    c.id = next_id++;
    c.batching = true;
  }
  auto disconnect = [&](StoreConn& c, const std::string& why) {
    requests.OnDisconnected(c.id, why);
    c = StoreConn();
    c.id = next_id++;
    c.batching = true;
  };

  absl::Time now = absl::Now();
  while (in.remaining_bytes() > 0) {
    StoreConn& c = conns[in.ConsumeIntegralInRange(0, kClients - 1)];
    std::string bytes;
    switch (in.ConsumeIntegralInRange(0, 7)) {
      case 0:
        bytes = in.ConsumeRandomLengthString(64);
        break;
      case 1:
        disconnect(c, "the fuzzer closed it");
        continue;
      case 2:
        now += absl::Milliseconds(in.ConsumeIntegralInRange(0, 100));
        requests.ExpireGets(now);
        continue;
      default:
        if (!AppendFrame(MakeRequest(in), &bytes).ok()) std::abort();
        break;
    }
    // In pieces, as reads return them.
    size_t pos = 0;
    while (pos < bytes.size()) {
      const size_t n = in.ConsumeIntegralInRange<size_t>(1, bytes.size() - pos);
      c.in.Append(bytes.data() + pos, n);
      pos += n;
      absl::string_view body;
      while (true) {
        absl::StatusOr<bool> got = c.in.Next(&body);
        if (!got.ok()) {  // an oversize frame: the store drops the connection
          disconnect(c, std::string(got.status().message()));
          pos = bytes.size();
          break;
        }
        if (!*got) break;
        requests.HandleFrame(c, body);
        requests.ProcessSealed();
        (void)requests.TakeFlushNow();
      }
    }
    CheckReplies(c);
  }
  for (StoreConn& c : conns) requests.OnDisconnected(c.id, "end of input");
  requests.ProcessSealed();
  return 0;
}
