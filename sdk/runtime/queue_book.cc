#include "sdk/runtime/queue_book.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace drover::internal {
namespace {

constexpr int kOk = static_cast<int>(absl::StatusCode::kOk);
constexpr int kDeadline = static_cast<int>(absl::StatusCode::kDeadlineExceeded);
constexpr int kClosed = static_cast<int>(absl::StatusCode::kFailedPrecondition);
constexpr int kDrained = static_cast<int>(absl::StatusCode::kOutOfRange);

uint64_t StoredBytes(const proto::QueueItem& item) {
  uint64_t n = 0;
  for (const proto::StoredObject& o : item.owned()) n += o.size();
  return n;
}

std::string Timeout(absl::Time deadline, absl::Time now) {
  return deadline <= now ? "at once" : absl::StrCat("within ", absl::FormatDuration(deadline - now));
}

}  // namespace

absl::Time WaitDeadline(int64_t timeout_ms, absl::Time now) {
  return timeout_ms < 0 ? absl::InfiniteFuture() : now + absl::Milliseconds(timeout_ms);
}

QueueBook::QueueBook(std::string name, uint64_t capacity) : name_(std::move(name)), capacity_(capacity) {}

QueueBook::Answer QueueBook::Reply(uint64_t conn, uint64_t request_id) {
  Answer a;
  a.conn = conn;
  a.reply.set_request_id(request_id);
  a.reply.set_code(kOk);
  return a;
}

QueueBook::Answer QueueBook::Fail(uint64_t conn, uint64_t request_id, int code, std::string message) {
  Answer a = Reply(conn, request_id);
  a.reply.set_code(code);
  a.reply.set_message(std::move(message));
  return a;
}

std::string QueueBook::Describe() const {
  return absl::StrCat(name_, " (", items_.size(), " items",
                      capacity_ > 0 ? absl::StrCat(", capacity ", capacity_) : std::string(), ")");
}

void QueueBook::Push(proto::QueueItem item) {
  stored_bytes_ += StoredBytes(item);
  items_.push_back(std::move(item));
  ++put_count_;
}

void QueueBook::Take(uint32_t max, proto::QueueReply* reply) {
  for (uint32_t i = 0; i < std::max<uint32_t>(max, 1) && !items_.empty(); ++i) {
    stored_bytes_ -= StoredBytes(items_.front());
    *reply->add_items() = std::move(items_.front());
    items_.pop_front();
    ++get_count_;
  }
}

void QueueBook::Settle(std::vector<Answer>* out) {
  for (;;) {
    bool moved = false;
    while (!puts_.empty() && !Full()) {
      Push(std::move(puts_.front().item));
      out->push_back(Reply(puts_.front().conn, puts_.front().request_id));
      puts_.pop_front();
      moved = true;
    }
    while (!gets_.empty() && !items_.empty()) {
      Answer a = Reply(gets_.front().conn, gets_.front().request_id);
      Take(gets_.front().max_items, &a.reply);
      out->push_back(std::move(a));
      gets_.pop_front();
      moved = true;
    }
    if (!moved) return;
  }
}

std::vector<QueueBook::Answer> QueueBook::Put(uint64_t conn, uint64_t request_id, proto::QueuePut put,
                                              absl::Time now) {
  std::vector<Answer> out;
  if (closed_) {
    out.push_back(Fail(conn, request_id, kClosed,
                       absl::StrCat(name_, " is closed: no more items can be put")));
    return out;
  }
  const absl::Time deadline = WaitDeadline(put.timeout_ms(), now);
  if (!Full()) {
    Push(std::move(*put.mutable_item()));
    out.push_back(Reply(conn, request_id));
  } else if (deadline <= now) {
    out.push_back(Fail(conn, request_id, kDeadline,
                       absl::StrCat(Describe(), " is full: no room ", Timeout(deadline, now))));
    return out;
  } else {
    puts_.push_back(Wait{conn, request_id, deadline, 1, std::move(*put.mutable_item())});
  }
  Settle(&out);
  return out;
}

std::vector<QueueBook::Answer> QueueBook::Get(uint64_t conn, uint64_t request_id,
                                              const proto::QueueGet& get, absl::Time now) {
  std::vector<Answer> out;
  if (!items_.empty()) {
    Answer a = Reply(conn, request_id);
    Take(get.max_items(), &a.reply);
    out.push_back(std::move(a));
    Settle(&out);
    return out;
  }
  const absl::Time deadline = WaitDeadline(get.timeout_ms(), now);
  if (closed_) {
    ++ends_seen_;
    out.push_back(Fail(conn, request_id, kDrained, absl::StrCat(name_, " is closed and empty")));
  } else if (deadline <= now) {
    out.push_back(Fail(conn, request_id, kDeadline, absl::StrCat(name_, " is empty: no item ", Timeout(deadline, now))));
  } else {
    gets_.push_back(Wait{conn, request_id, deadline, get.max_items(), {}});
  }
  return out;
}

std::vector<QueueBook::Answer> QueueBook::Close(uint64_t conn, uint64_t request_id) {
  std::vector<Answer> out;
  closed_ = true;
  for (Wait& w : puts_) {
    out.push_back(Fail(w.conn, w.request_id, kClosed,
                       absl::StrCat(name_, " was closed while this put waited for room; the item "
                                           "was not queued")));
  }
  puts_.clear();
  // Waiting gets exist only while the queue is empty.
  for (Wait& w : gets_) {
    ++ends_seen_;
    out.push_back(Fail(w.conn, w.request_id, kDrained, absl::StrCat(name_, " was closed while this get waited: it is closed and empty")));
  }
  gets_.clear();
  out.push_back(Reply(conn, request_id));
  return out;
}

std::vector<QueueBook::Answer> QueueBook::Expire(absl::Time now) {
  std::vector<Answer> out;
  auto expire = [&](std::deque<Wait>* waits, const char* what) {
    for (auto it = waits->begin(); it != waits->end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      out.push_back(Fail(it->conn, it->request_id, kDeadline, absl::StrCat(Describe(), what)));
      it = waits->erase(it);
    }
  };
  expire(&puts_, " stayed full: no room before the put's timeout");
  expire(&gets_, " stayed empty: no item before the get's timeout");
  return out;
}

std::vector<proto::StoredObject> QueueBook::Disconnected(uint64_t conn) {
  std::vector<proto::StoredObject> dropped;
  for (const Wait& w : puts_) {
    if (w.conn != conn) continue;
    for (const proto::StoredObject& o : w.item.owned()) dropped.push_back(o);
  }
  auto drop = [conn](std::deque<Wait>* waits) {
    waits->erase(std::remove_if(waits->begin(), waits->end(), [conn](const Wait& w) { return w.conn == conn; }),
                 waits->end());
  };
  drop(&puts_);
  drop(&gets_);
  return dropped;
}

proto::QueueStats QueueBook::Stats() const {
  proto::QueueStats s;
  s.set_size(items_.size());
  s.set_capacity(capacity_);
  s.set_closed(closed_);
  s.set_puts(put_count_);
  s.set_gets(get_count_);
  s.set_waiting_puts(puts_.size());
  s.set_waiting_gets(gets_.size());
  s.set_stored_bytes(stored_bytes_);
  s.set_ends_seen(ends_seen_);
  return s;
}

absl::Time QueueBook::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const Wait& w : puts_) next = std::min(next, w.deadline);
  for (const Wait& w : gets_) next = std::min(next, w.deadline);
  return next;
}

std::vector<proto::StoredObject> QueueBook::Owned() const {
  std::vector<proto::StoredObject> out;
  for (const proto::QueueItem& item : items_) {
    for (const proto::StoredObject& o : item.owned()) out.push_back(o);
  }
  for (const Wait& w : puts_) {
    for (const proto::StoredObject& o : w.item.owned()) out.push_back(o);
  }
  return out;
}

}  // namespace drover::internal
