#include "object_store/pending_gets.h"

#include <algorithm>

namespace drover::object_store {

void PendingGets::Park(ClientId client, proto::StoreReply* reply, std::vector<char> waiting,
                       absl::Time deadline) {
  const Seq seq = next_seq_++;
  Get& g = gets_[seq];
  g.client = client;
  g.reply.Swap(reply);
  g.waiting = std::move(waiting);
  g.remaining = static_cast<size_t>(std::count_if(g.waiting.begin(), g.waiting.end(),
                                                  [](char w) { return w != 0; }));
  g.deadline_it = deadline == absl::InfiniteFuture() ? deadlines_.end()
                                                     : deadlines_.emplace(deadline, seq);
  const auto& results = g.reply.get().results();
  for (size_t i = 0; i < g.waiting.size(); ++i) {
    if (g.waiting[i]) waiters_[results.Get(static_cast<int>(i)).id()].push_back(seq);
  }
  by_client_[client].push_back(seq);
}

size_t PendingGets::CountFor(ClientId client) const {
  if (by_client_.empty()) return 0;  // the usual case: no lookup
  auto it = by_client_.find(client);
  return it == by_client_.end() ? 0 : it->second.size();
}

void PendingGets::DropClient(ClientId client) {
  auto c = by_client_.find(client);
  if (c == by_client_.end()) return;
  const std::vector<Seq> seqs = std::move(c->second);
  by_client_.erase(c);
  for (Seq seq : seqs) {
    auto it = gets_.find(seq);
    if (it == gets_.end()) continue;
    Unindex(seq, it->second);
    gets_.erase(it);
  }
}

void PendingGets::Unindex(Seq seq, Get& g) {
  auto drop = [seq](auto& index, const auto& key) {
    auto w = index.find(key);
    if (w == index.end()) return;
    auto& v = w->second;
    v.erase(std::remove(v.begin(), v.end(), seq), v.end());
    if (v.empty()) index.erase(w);
  };
  const auto& results = g.reply.get().results();
  for (int i = 0; i < results.size(); ++i) {
    if (g.waiting[i]) drop(waiters_, results.Get(i).id());
  }
  drop(by_client_, g.client);
  if (g.deadline_it != deadlines_.end()) deadlines_.erase(g.deadline_it);
  g.deadline_it = deadlines_.end();
}

}  // namespace drover::object_store
