#include "collective/gloo_abort.h"

#include <exception>
#include <mutex>
#include <vector>

#include "gloo/common/memory.h"
#include "gloo/transport/tcp/pair.h"
#include "gloo/transport/tcp/unbound_buffer.h"

namespace drover::collective::internal {
namespace {

using gloo::NonOwningPtr;
using gloo::transport::tcp::Op;
using gloo::transport::tcp::Pair;
using gloo::transport::tcp::UnboundBuffer;

// The members used here are protected. They are reached through member pointers formed
// in derived classes (legal C++: the access check applies to naming the member, which a
// derived class may do). The layout they rely on is libgloo's own header's
// (third_party/gloo_compat supplies the one header Debian omits, verbatim).
struct PairAccess : Pair {
  static std::exception_ptr Signal(Pair* p, const std::string& why) {
    return (p->*&PairAccess::signalExceptionExternal)(why);
  }
  static std::mutex& Mutex(Pair* p) { return p->*&PairAccess::m_; }
  static Op& Rx(Pair* p) { return p->*&PairAccess::rx_; }
  static std::deque<Op>& Tx(Pair* p) { return p->*&PairAccess::tx_; }
};

struct BufferAccess : UnboundBuffer {
  static void Signal(const NonOwningPtr<UnboundBuffer>& b, std::exception_ptr ex) {
    (b.operator->()->*&BufferAccess::signalException)(std::move(ex));
  }
};

}  // namespace

void AbortGlooPair(gloo::transport::Pair* pair, const std::string& why) {
  auto* tcp = dynamic_cast<Pair*>(pair);
  if (tcp == nullptr) return;
  // Fails what is on the pending lists, closes the socket, and returns the pair's error
  // (ours, or the one it already had: then it did nothing).
  std::exception_ptr ex = PairAccess::Signal(tcp, why);
  if (ex == nullptr) return;
  // The payload in flight each way: rx_ (a receive whose data was arriving) and the
  // queued writes (a send whose data was leaving). Signalled under the pair's lock, in
  // Gloo's own order (pair, then buffer); a NonOwningPtr keeps the buffer from being
  // destroyed meanwhile, and is empty if it already was.
  std::lock_guard<std::mutex> lock(PairAccess::Mutex(tcp));
  std::vector<NonOwningPtr<UnboundBuffer>> cut_off;
  if (NonOwningPtr<UnboundBuffer> b(PairAccess::Rx(tcp).ubuf); b) cut_off.push_back(std::move(b));
  for (const Op& op : PairAccess::Tx(tcp)) {
    if (NonOwningPtr<UnboundBuffer> b(op.ubuf); b) cut_off.push_back(std::move(b));
  }
  for (const auto& b : cut_off) BufferAccess::Signal(b, ex);
}

}  // namespace drover::collective::internal
