// PendingGets: the Gets that wait for objects to be sealed, indexed by the ids they
// wait for, by deadline and by client. It decides who is answered when: on a seal,
// the Gets waiting for that id whose every result is then filled; at a time, the Gets
// whose deadline passed; on a disconnect, nobody (the client's Gets are dropped).
//
// Pure bookkeeping: no table, no sockets, no clock (times are handed in). What "fill"
// means is the caller's (OnSealed's `try_fill` takes the reference in the table), and
// so is answering (`answer` sends the reply).
//
// A parked Get is its StoreReply (results in request order, those found filled in)
// plus, per result, whether it still waits. Each waiting result is listed under its
// id; a result filled by a seal leaves the lists; one the seal did not fill (the object
// was deleted again before this Get took it) stays listed.
//
// Thread safety: none; the store's loop thread owns it.
#ifndef DROVER_OBJECT_STORE_PENDING_GETS_H_
#define DROVER_OBJECT_STORE_PENDING_GETS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "object_store/object_id.h"
#include "proto/object_store.pb.h"

namespace drover::object_store {

class PendingGets {
 public:
  // Parks the Get of `client` whose results are in `*reply` (taken: swapped out) and
  // of which `waiting[i]` (non-zero) still wait for a seal, until `deadline`
  // (InfiniteFuture: no deadline). REQUIRES: waiting.size() == the number of results,
  // at least one waits.
  void Park(ClientId client, proto::StoreReply* reply, std::vector<char> waiting,
            absl::Time deadline);

  // Parked Gets, in all and of one client.
  size_t size() const { return gets_.size(); }
  size_t CountFor(ClientId client) const;
  // The earliest deadline of a parked Get; InfiniteFuture if none has one.
  absl::Time NextDeadline() const {
    return deadlines_.empty() ? absl::InfiniteFuture() : deadlines_.begin()->first;
  }

  // `id` was sealed. For every result of a parked Get that waits for it, calls
  // try_fill(client, GetResult*) -> bool (true: the result is filled now); then
  // answers each Get with no result left waiting, forgetting it:
  // answer(client, proto::StoreReply* reply, const std::vector<char>& waiting,
  //        bool timed_out = false); the reply is the caller's to change and send.
  template <typename TryFill, typename Answer>
  void OnSealed(const ObjectId& id, TryFill&& try_fill, Answer&& answer);

  // Answers (as OnSealed, timed_out = true, `waiting` naming the results that did not
  // come) and forgets every Get whose deadline is at or before `now`.
  template <typename Answer>
  void Expire(absl::Time now, Answer&& answer);

  // Forgets the Gets of `client` without answering them (it disconnected).
  void DropClient(ClientId client);

 private:
  using Seq = uint64_t;
  struct Get {
    ClientId client = 0;
    proto::StoreReply reply;    // results filled as objects arrive
    std::vector<char> waiting;  // per result: still waiting for a seal
    size_t remaining = 0;       // how many wait
    std::multimap<absl::Time, Seq>::iterator deadline_it;  // deadlines_.end(): none
  };

  // Takes `seq` out of the id, deadline and client indexes.
  void Unindex(Seq seq, Get& g);
  template <typename Answer>
  void Finish(std::unordered_map<Seq, Get>::iterator it, bool timed_out, Answer& answer);

  Seq next_seq_ = 1;
  std::unordered_map<Seq, Get> gets_;
  std::multimap<absl::Time, Seq> deadlines_;
  absl::flat_hash_map<ObjectId, std::vector<Seq>> waiters_;
  absl::flat_hash_map<ClientId, std::vector<Seq>> by_client_;
};

template <typename TryFill, typename Answer>
void PendingGets::OnSealed(const ObjectId& id, TryFill&& try_fill, Answer&& answer) {
  auto w = waiters_.find(id);
  if (w == waiters_.end()) return;
  std::vector<Seq> seqs = std::move(w->second);
  waiters_.erase(w);
  for (Seq seq : seqs) {
    auto it = gets_.find(seq);
    if (it == gets_.end()) continue;  // answered already (it waited for `id` twice)
    Get& g = it->second;
    auto* results = g.reply.mutable_get()->mutable_results();
    bool still_waits = false;
    for (int i = 0; i < results->size(); ++i) {
      if (!g.waiting[i] || results->Get(i).id() != id) continue;
      if (try_fill(g.client, results->Mutable(i))) {
        g.waiting[i] = 0;
        --g.remaining;
      } else {
        still_waits = true;
      }
    }
    if (g.remaining == 0) {
      Finish(it, /*timed_out=*/false, answer);
    } else if (still_waits) {
      waiters_[id].push_back(seq);
    }
  }
}

template <typename Answer>
void PendingGets::Expire(absl::Time now, Answer&& answer) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto it = gets_.find(deadlines_.begin()->second);
    if (it == gets_.end()) {  // not reached: a Get leaves deadlines_ with gets_
      deadlines_.erase(deadlines_.begin());
      continue;
    }
    Finish(it, /*timed_out=*/true, answer);
  }
}

template <typename Answer>
void PendingGets::Finish(std::unordered_map<Seq, Get>::iterator it, bool timed_out,
                         Answer& answer) {
  Get& g = it->second;
  Unindex(it->first, g);
  answer(g.client, &g.reply, static_cast<const std::vector<char>&>(g.waiting), timed_out);
  gets_.erase(it);
}

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_PENDING_GETS_H_
