// AbortGlooPair on two ranks of real Gloo (TCP on loopback, in one process) whose
// transfer is cut off mid-payload. Gloo takes an unbound buffer off its pair's pending
// lists once its payload starts to flow, and its own signalException never reaches it:
// a rank receiving from a peer SIGKILLed mid-payload slept in the ring allreduce until
// its timeout although the cluster's notice had arrived (the abort_test flake).
#include "collective/gloo_abort.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gloo/common/error.h"
#include "gloo/common/memory.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/tcp/pair.h"
#include "gloo/transport/unbound_buffer.h"
#include "gtest/gtest.h"

namespace drover::collective::internal {
namespace {

using gloo::transport::tcp::Op;

// The pair's state the test needs to see (protected in Gloo; see gloo_abort.cc).
struct PairPeek : gloo::transport::tcp::Pair {
  static std::mutex& Mutex(gloo::transport::Pair* p) {
    return static_cast<Pair*>(p)->*&PairPeek::m_;
  }
  // REQUIRES: Mutex(p) held.
  static bool MidPayload(gloo::transport::Pair* p) {
    const Op& rx = static_cast<Pair*>(p)->*&PairPeek::rx_;
    return rx.preamble.opcode == Op::SEND_UNBOUND_BUFFER && rx.nread > sizeof(rx.preamble) &&
           rx.nread < rx.preamble.nbytes;
  }
  // REQUIRES: Mutex(p) held.
  static bool Failed(gloo::transport::Pair* p) {
    return (static_cast<Pair*>(p)->*&PairPeek::ex_) != nullptr;
  }
};

constexpr size_t kBytes = size_t{256} << 20;  // long enough on loopback to catch mid-way
constexpr std::chrono::milliseconds kGlooTimeout(60000);
// Far below kGlooTimeout: a wait that ends only by timing out fails the test.
constexpr absl::Duration kWakeBound = absl::Seconds(20);

// One wait (waitRecv or waitSend) on its own thread, and how it ended.
class Wait {
 public:
  Wait(gloo::transport::UnboundBuffer* buf, bool recv)
      : thread_([this, buf, recv] {
          try {
            if (recv) buf->waitRecv(kGlooTimeout); else buf->waitSend(kGlooTimeout);
            outcome_ = "completed";
          } catch (const std::exception& e) {
            outcome_ = std::string("threw: ") + e.what();
          }
          done_.Notify();
        }) {}
  ~Wait() { thread_.join(); }
  bool Ended(absl::Duration within) { return done_.WaitForNotificationWithTimeout(within); }
  bool HasEnded() const { return done_.HasBeenNotified(); }
  // REQUIRES: ended.
  const std::string& outcome() const { return outcome_; }

 private:
  absl::Notification done_;
  std::string outcome_;
  std::thread thread_;
};

// Two ranks connected by Gloo's TCP transport, and rank 1 sending kBytes to rank 0.
struct Transfer {
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> ctx;
  std::vector<char> in = std::vector<char>(kBytes), out = std::vector<char>(kBytes, 'x');
  std::unique_ptr<gloo::transport::UnboundBuffer> recv_buf, send_buf;
  std::optional<Wait> recv_wait, send_wait;

  Transfer() {
    // Gloo writes with plain writev: a write to the aborted side would kill the test
    // with SIGPIPE (NewGroup ignores it in programs for the same reason).
    signal(SIGPIPE, SIG_IGN);
    gloo::rendezvous::HashStore store;
    ctx.resize(2);
    std::vector<std::thread> joiners;
    for (int r = 0; r < 2; ++r) {
      joiners.emplace_back([&, r] {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto c = std::make_shared<gloo::rendezvous::Context>(r, 2);
        c->setTimeout(kGlooTimeout);
        auto device = gloo::transport::tcp::CreateDevice(attr);
        c->connectFullMesh(store, device);
        ctx[r] = c;
      });
    }
    for (auto& t : joiners) t.join();
    recv_buf = ctx[0]->createUnboundBuffer(in.data(), in.size());
    send_buf = ctx[1]->createUnboundBuffer(out.data(), out.size());
    recv_buf->recv(1, /*slot=*/7);
    send_buf->send(0, /*slot=*/7);
    recv_wait.emplace(recv_buf.get(), true);
    send_wait.emplace(send_buf.get(), false);
  }
  ~Transfer() {
    // Whatever happened, end both waits before the buffers go.
    AbortGlooPair(receiver(), "test over");
    AbortGlooPair(sender(), "test over");
    recv_wait.reset();
    send_wait.reset();
  }

  gloo::transport::Pair* receiver() { return ctx[0]->getPair(1).get(); }
  gloo::transport::Pair* sender() { return ctx[1]->getPair(0).get(); }

  // Returns the receiver's pair lock, taken while part of the payload has been read and
  // part has not; an empty lock if the transfer ended first (try again).
  std::unique_lock<std::mutex> CatchMidPayload() {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up && !recv_wait->HasEnded()) {
      std::unique_lock<std::mutex> lock(PairPeek::Mutex(receiver()));
      if (PairPeek::MidPayload(receiver())) return lock;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return {};
  }
};

bool WaitUntilFailed(gloo::transport::Pair* pair) {
  const absl::Time give_up = absl::Now() + kWakeBound;
  while (absl::Now() < give_up) {
    {
      std::lock_guard<std::mutex> lock(PairPeek::Mutex(pair));
      if (PairPeek::Failed(pair)) return true;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

// The flake's order: the peer dies mid-payload (its socket closes), the receiver's pair
// fails by itself, and then the cluster's notice aborts the receiver's pairs.
TEST(GlooAbortTest, WakesAReceiveCutOffMidPayloadAfterThePeerDied) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    Transfer t;
    std::unique_lock<std::mutex> held = t.CatchMidPayload();
    if (!held.owns_lock()) continue;  // the transfer finished before it was caught
    // The sender's side goes (as when its process is killed) while the receiver cannot
    // read on, so its payload stays cut off.
    AbortGlooPair(t.sender(), "rank 1 died");
    held.unlock();
    ASSERT_TRUE(WaitUntilFailed(t.receiver())) << "the receiver never saw the connection close";
    // A send cut off mid-payload is woken too (or had already handed all its bytes over).
    ASSERT_TRUE(t.send_wait->Ended(kWakeBound)) << "waitSend still asleep after its pair's abort";

    AbortGlooPair(t.receiver(), "the cluster's notice");
    ASSERT_TRUE(t.recv_wait->Ended(kWakeBound))
        << "waitRecv still asleep after the abort: it would sleep until Gloo's timeout";
    EXPECT_NE(t.recv_wait->outcome().find("threw"), std::string::npos) << t.recv_wait->outcome();
    return;
  }
  GTEST_SKIP() << "every transfer finished before it could be caught mid-payload";
}

// The other order: the notice arrives while the peer is alive but stalled mid-payload.
TEST(GlooAbortTest, WakesAReceiveCutOffMidPayloadByTheNotice) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    Transfer t;
    std::unique_lock<std::mutex> held = t.CatchMidPayload();
    if (!held.owns_lock()) continue;
    {
      // The sender stalls (its device thread cannot take the pair) while the receiver
      // is aborted.
      std::lock_guard<std::mutex> stall(PairPeek::Mutex(t.sender()));
      held.unlock();
      AbortGlooPair(t.receiver(), "the cluster's notice");
    }
    ASSERT_TRUE(t.recv_wait->Ended(kWakeBound))
        << "waitRecv still asleep after the abort: it would sleep until Gloo's timeout";
    if (t.recv_wait->outcome() == "completed") continue;  // the rest was already buffered
    EXPECT_NE(t.recv_wait->outcome().find("the cluster's notice"), std::string::npos)
        << t.recv_wait->outcome();
    return;
  }
  GTEST_SKIP() << "every transfer finished before it could be caught mid-payload";
}

}  // namespace
}  // namespace drover::collective::internal
