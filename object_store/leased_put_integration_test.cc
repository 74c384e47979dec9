// Leased puts (Lease, SealLeased, ReturnLease; the overlapped seal and its
// acknowledgement) and the store that stays awake, with real processes:
// drover-object-store as a daemon, clients in this process and in store_tool
// processes, and raw-socket clients that forge requests.
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "object_store/arena.h"
#include "object_store/client.h"
#include "object_store/internal/connection.h"
#include "object_store/internal/leased_put.h"
#include "object_store/object_id.h"
#include "object_store/protocol.h"
#include "object_store/testing/raw_client.h"
#include "object_store/testing/store_process.h"
#include "object_store/store_server.h"
#include "object_store/testing/test_data.h"
#include "proto/object_store.pb.h"
#include "tests/util/test_util.h"

namespace drover::object_store {
namespace {

using ::drover::testing::Runfile;
using ::drover::testing::WaitFor;
// StoreProcess, Tool, RawClient, Pattern, MustStats and the other test helpers.
using namespace ::drover::object_store::testing;  // NOLINT(build/namespaces)

// --- Leased puts (Lease, SealLeased, ReturnLease) ----------------------------------

TEST(StoreIntegrationTest, LeasedPutIsVisibleToOtherProcessesWhenPutReturns) {
  StoreProcess store(256 * kMiB);  // leased puts up to 4 MiB
  auto c = Client::Connect(store.socket());
  auto other = Client::Connect(store.socket());
  ASSERT_TRUE(c.ok() && other.ok());
  const StoreStats before = MustStats(**c);
  // Sizes through the lease (over 64 KiB, up to 4 MiB with metadata), mixed, so that
  // leases are refilled, grown and returned on the way.
  const std::vector<uint64_t> sizes = {65537,    kMiB,     kMiB, 100000, 3 * kMiB,
                                       kMiB + 1, 4 * kMiB - 64 - 64, 200000, kMiB};
  std::vector<std::string> ids;
  uint64_t object_bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> data = Pattern(sizes[i], i);
    std::string id = absl::StrCat("leased-", i);
    const std::string meta = absl::StrCat("header-", i);
    ASSERT_TRUE((*c)->Put(id, absl::MakeConstSpan(data), meta).ok()) << sizes[i];
    object_bytes += (64 + sizes[i] + 63) / 64 * 64;
    ids.push_back(id);
    // Visible at once to another client, without waiting.
    auto ref = (*other)->Get(id, absl::ZeroDuration());
    ASSERT_TRUE(ref.ok()) << sizes[i] << ": " << ref.status();
    ASSERT_EQ(ref->data().size(), sizes[i]);
    EXPECT_EQ(memcmp(ref->data().data(), data.data(), sizes[i]), 0) << sizes[i];
    EXPECT_EQ(ref->metadata_view(), meta);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ref->data().data()) % 64, 0u);
    EXPECT_TRUE(*(*other)->Contains(id));
  }
  // And to another process.
  Tool reader(store, {"get", "leased-1", "0"});
  std::vector<std::string> got = reader.Wait();
  ASSERT_EQ(got.size(), 5u) << absl::StrJoin(got, " ");
  EXPECT_EQ(got[0], "ok");
  EXPECT_EQ(got[2], absl::StrCat(Checksum(Pattern(kMiB, 1))));
  // Sealed, unreferenced primaries: immutable to the store, with no creator reference.
  EXPECT_TRUE(WaitFor([&] { return MustStats(**c).referenced == 0; }));
  StoreStats s = MustStats(**c);
  EXPECT_EQ(s.objects, before.objects + sizes.size());
  EXPECT_EQ(s.sealed, before.sealed + sizes.size());
  // What is used beyond the objects is this client's lease for its next put: at most
  // the largest leased object.
  EXPECT_GE(s.used, before.used + object_bytes);
  EXPECT_LE(s.used, before.used + object_bytes + 4 * kMiB);
  // The stats count that lease and the 64-byte range of the client's ready word
  // (overlapped seals of puts >= 256 KiB): two ranges, the rest of what is used.
  EXPECT_EQ(before.leases, 0u);
  EXPECT_EQ(s.leases, 2u);
  EXPECT_EQ(s.used, before.used + object_bytes + s.leased_bytes);
  // Sealing again, or aborting, is refused as for any sealed object.
  EXPECT_EQ((*c)->Seal("leased-0").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*c)->Abort("leased-0").code(), absl::StatusCode::kFailedPrecondition);
  // A second put of the same id fails and leaks nothing.
  std::vector<uint8_t> again = Pattern(kMiB, 99);
  EXPECT_EQ((*c)->Put("leased-1", absl::MakeConstSpan(again), "x").code(),
            absl::StatusCode::kAlreadyExists);
  for (const auto& id : ids) ASSERT_TRUE((*c)->Delete(id).ok());
  c->reset();  // the connection goes, and its lease with it
  EXPECT_TRUE(WaitFor([&] {
    StoreStats now = MustStats(**other);
    return now.used == before.used && now.objects == before.objects &&
           now.leased_bytes == 0 && now.leases == 0;
  })) << Describe(MustStats(**other)) << " vs " << Describe(before);
}

// User plus system CPU time of process `pid`, in clock ticks (/proc/PID/stat).
int64_t CpuTicks(pid_t pid) {
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat")).value_or("");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::vector<std::string> f = absl::StrSplit(stat.substr(paren + 2), ' ');
  int64_t utime = 0, stime = 0;
  // Fields 14 and 15 of stat; f[0] is field 3.
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime)) {
    return -1;
  }
  return utime + stime;
}

TEST(StoreIntegrationTest, StoreStopsPollingOnceClientsStopPutting) {
  // After a leased put the store polls for a while (ServerOptions::stay_awake, 300 µs)
  // instead of sleeping; once no client puts, it must sleep again and cost no CPU.
  StoreProcess store(64 * kMiB);  // leased puts up to 1 MiB
  auto c = Client::Connect(store.socket());
  ASSERT_TRUE(c.ok());
  std::vector<uint8_t> data = Pattern(512 * 1024, 7);
  for (int i = 0; i < 200; ++i) {
    std::string id = absl::StrCat("put-", i);
    ASSERT_TRUE((*c)->Put(id, absl::MakeConstSpan(data), "m").ok());
    ASSERT_TRUE((*c)->Delete(id).ok());
  }
  ASSERT_GT(MustStats(**c).leases, 0u) << "the puts did not go through a lease";
  const int64_t before = CpuTicks(store.pid());
  ASSERT_GE(before, 0);
  // A measurement window, not a wait for a condition: how much CPU an idle store uses.
  absl::SleepFor(absl::Milliseconds(500));
  const int64_t after = CpuTicks(store.pid());
  // A store that kept polling would use the whole window (~50 ticks at 100 Hz).
  EXPECT_LE(after - before, 3) << "the idle store used " << (after - before)
                               << " clock ticks of CPU in 500 ms";
}

// A polling store that shares its CPU with a busy task gets that CPU back only at the
// next time slice (~4 ms on a 2-core VM): it must notice it starves and sleep instead,
// so that each request wakes it at once.
TEST(StoreIntegrationTest, StoreSharingItsCpuWithABusyTaskStillAnswersQuickly) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) cpus.push_back(c);
  }
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  auto pin = [](int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof(one), &one) == 0;
  };
  ScratchDir dir;
  ServerOptions o;
  o.capacity = 16 * kMiB;
  StoreServer server;
  ASSERT_TRUE(pin(cpus[0]));  // the store's thread inherits this CPU, and only it
  ASSERT_TRUE(server.Start(dir.path() + "/s.sock", o).ok());
  ASSERT_TRUE(pin(cpus[1]));
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    if (!pin(cpus[0])) return;
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  auto c = Client::Connect(dir.path() + "/s.sock");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->Put("x", std::string(1024, 'x')).ok());
  std::vector<double> us;
  for (int i = 0; i < 300; ++i) {
    absl::Time t0 = absl::Now();
    auto ref = (*c)->Get("x", absl::ZeroDuration());
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref->Reset();
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  stop = true;
  busy.join();
  sched_setaffinity(0, sizeof(all), &all);
  std::sort(us.begin(), us.end());
  // A store that kept polling behind the busy task answered in ~4 ms (median).
  EXPECT_LT(us[us.size() / 2], 1000) << "median get " << us[us.size() / 2] << " us";
}

TEST(StoreIntegrationTest, ClientKilledHoldingALeaseLeaksNothing) {
  StoreProcess store(64 * kMiB);
  auto client = Client::Connect(store.socket());
  ASSERT_TRUE(client.ok());
  const StoreStats before = Baseline(**client);
  const uint64_t size = 512 * 1024;
  const uint64_t block = (64 + size + 63) / 64 * 64;
  std::string ready = store.dir() + "/ready";
  Tool writer(store, {"put-and-hold", "held", absl::StrCat(size), "3", ready});
  ASSERT_TRUE(WaitFor([&] { return access(ready.c_str(), F_OK) == 0; })) << store.log();
  // Its three objects, plus the lease it holds for its next put.
  StoreStats during = MustStats(**client);
  EXPECT_EQ(during.objects, before.objects + 3);
  EXPECT_GT(during.used, before.used + 3 * block) << Describe(during);
  writer.Kill();
  writer.Wait();
  // The lease is freed with the connection; the sealed objects stay, intact.
  EXPECT_TRUE(WaitFor([&] {
    StoreStats s = MustStats(**client);
    return s.clients == before.clients && s.used == before.used + 3 * block;
  })) << Describe(MustStats(**client)) << " vs before " << Describe(before) << "\n"
      << store.log();
  for (int i = 0; i < 3; ++i) {
    auto ref = (*client)->Get(absl::StrCat("held-", i), absl::ZeroDuration());
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(Checksum(ref->data()), Checksum(Pattern(size, i)));
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*client)->Delete(absl::StrCat("held-", i)).ok());
  EXPECT_TRUE(WaitFor([&] {
    StoreStats s = MustStats(**client);
    return s.used == before.used && s.objects == before.objects;
  })) << Describe(MustStats(**client));
}

TEST(StoreIntegrationTest, ForgedLeaseRequestsGetClearErrorsAndLeakNothing) {
  StoreProcess store(64 * kMiB);
  auto good = Client::Connect(store.socket());
  ASSERT_TRUE(good.ok());
  std::vector<uint8_t> kept = Pattern(kMiB / 2, 7);
  ASSERT_TRUE((*good)->Put("kept", absl::MakeConstSpan(kept), "m").ok());  // via a lease
  auto kept_ref = (*good)->Get("kept", absl::ZeroDuration());
  ASSERT_TRUE(kept_ref.ok());
  const uint64_t kept_offset = kept_ref->data().data() - (*good)->arena_base() - 64;
  kept_ref->Reset();
  const StoreStats baseline = Baseline(**good);
  auto expect_invalid = [](const proto::StoreReply& r, const std::string& what,
                           const std::string& words) {
    EXPECT_EQ(Code(r), absl::StatusCode::kInvalidArgument)
        << what << ": " << r.message();
    EXPECT_NE(r.message().find(words), std::string::npos) << what << ": " << r.message();
  };
  {
    RawClient raw(store.socket());
    RawClient other(store.socket());
    proto::StoreRequest req;
    // Sealing with no lease at all: in someone's object, at 0, anywhere.
    for (uint64_t off : std::vector<uint64_t>{kept_offset, 0, 64, ~uint64_t{0} - 63}) {
      req.Clear();
      auto* s = req.mutable_seal_leased();
      s->set_id("forged");
      s->set_offset(off);
      s->set_data_size(64);
      expect_invalid(raw.Call(req), absl::StrCat("seal at ", off), "not inside a lease");
    }
    // Bad lease sizes.
    req.Clear();
    req.mutable_lease()->set_bytes(0);
    expect_invalid(raw.Call(req), "lease of 0", "lease of 0 bytes");
    req.mutable_lease()->set_bytes(~0ull);
    expect_invalid(raw.Call(req), "lease of 2^64-1", "must be 1..");
    // Over the per-client limit (1/16 of the arena): refused, nothing reserved.
    req.mutable_lease()->set_bytes(8 * kMiB);
    proto::StoreReply r = raw.Call(req);
    EXPECT_EQ(Code(r), absl::StatusCode::kResourceExhausted)
        << r.message();
    // Real leases for both raw clients.
    req.mutable_lease()->set_bytes(64 * 1024);
    proto::StoreReply mine = raw.Call(req);
    proto::StoreReply theirs = other.Call(req);
    ASSERT_EQ(Code(mine), absl::StatusCode::kOk) << mine.message();
    ASSERT_EQ(Code(theirs), absl::StatusCode::kOk) << theirs.message();
    EXPECT_EQ(mine.lease().size(), 64u * 1024);
    const uint64_t m = mine.lease().offset();
    struct Case {
      std::string what;
      uint64_t offset, data, meta;
      std::string words;
    };
    const std::vector<Case> cases = {
        {"another client's lease", theirs.lease().offset(), 64, 0, "not inside a lease"},
        {"unaligned", m + 8, 64, 0, "64-byte aligned"},
        {"past the end", m, 64 * 1024, 1, "not inside a lease"},
        {"just after", m + 64 * 1024, 64, 0, "not inside a lease"},
        {"overflowing offset", ~0ull - 63, 64, 0, "not inside a lease"},
        {"huge data", m, ~0ull, 0, "does not fit"},
        {"huge metadata", m, 64, ~0ull - 1, "does not fit"},
        {"sum overflows", m, ~0ull - 100, 200, "does not fit"},
        {"empty", m, 0, 0, "is empty"},
    };
    for (const Case& c : cases) {
      req.Clear();
      auto* s = req.mutable_seal_leased();
      s->set_id("forged");
      s->set_offset(c.offset);
      s->set_data_size(c.data);
      s->set_metadata_size(c.meta);
      expect_invalid(raw.Call(req), c.what, c.words);
    }
    req.Clear();
    req.mutable_seal_leased()->set_id("");
    req.mutable_seal_leased()->set_offset(m);
    req.mutable_seal_leased()->set_data_size(64);
    expect_invalid(raw.Call(req), "empty id", "object id");
    // Returns of what is not leased to it.
    for (auto [off, size] : std::vector<std::pair<uint64_t, uint64_t>>{
             {theirs.lease().offset(), 64}, {kept_offset, 64}, {m, 0}, {m, 100},
             {m + 32, 64}, {m, 128 * 1024}}) {
      req.Clear();
      req.mutable_return_lease()->set_offset(off);
      req.mutable_return_lease()->set_size(size);
      expect_invalid(raw.Call(req), absl::StrCat("return ", off, "+", size),
                     "return of a lease");
    }
    // Overlapped seals: the ready word must be in a 64-byte range this client leased,
    // outside the object; a word that never gets its value is UNAVAILABLE after about a
    // millisecond, with nothing changed, and the plain seal then works.
    req.Clear();
    req.mutable_lease()->set_bytes(64);
    proto::StoreReply slot = raw.Call(req);
    ASSERT_EQ(Code(slot), absl::StatusCode::kOk) << slot.message();
    const uint64_t w = slot.lease().offset();
    const std::vector<std::pair<uint64_t, std::string>> words = {
        {theirs.lease().offset(), "not in a 64-aligned 64-byte range this client leased"},
        {w + 8, "not in a 64-aligned 64-byte range this client leased"},
        {~0ull - 63, "not in a 64-aligned 64-byte range this client leased"},
        {m + 2048, "lies inside the object"},
    };
    for (const auto& [word, expected] : words) {
      req.Clear();
      auto* s = req.mutable_seal_leased();
      s->set_id("overlapped");
      s->set_offset(m + 2048 - 64);
      s->set_data_size(256);
      s->set_ready_offset(word);
      s->set_ready_value(42);
      expect_invalid(raw.Call(req), absl::StrCat("ready word at ", word), expected);
    }
    req.Clear();
    req.mutable_seal_leased()->set_id("overlapped");
    req.mutable_seal_leased()->set_offset(m + 4096);
    req.mutable_seal_leased()->set_data_size(256);
    req.mutable_seal_leased()->set_ready_offset(w);
    req.mutable_seal_leased()->set_ready_value(0x5eed);  // never written
    const absl::Time sent = absl::Now();
    r = raw.Call(req);
    EXPECT_EQ(Code(r), absl::StatusCode::kUnavailable) << r.message();
    EXPECT_NE(r.message().find("seal it again"), std::string::npos) << r.message();
    EXPECT_LT(absl::Now() - sent, absl::Seconds(1));
    EXPECT_FALSE(*(*good)->Contains("overlapped"));
    req.mutable_seal_leased()->clear_ready_offset();
    req.mutable_seal_leased()->clear_ready_value();
    r = raw.Call(req);
    EXPECT_EQ(Code(r), absl::StatusCode::kOk) << r.message();
    EXPECT_TRUE(*(*good)->Contains("overlapped"));
    // An id that exists: refused, and the range is used up (not sealed again).
    req.Clear();
    req.mutable_seal_leased()->set_id("kept");
    req.mutable_seal_leased()->set_offset(m);
    req.mutable_seal_leased()->set_data_size(64);
    r = raw.Call(req);
    EXPECT_EQ(Code(r), absl::StatusCode::kAlreadyExists);
    // A proper one still works, and is visible to others.
    req.mutable_seal_leased()->set_id("raw-put");
    req.mutable_seal_leased()->set_offset(m + 64);
    r = raw.Call(req);
    EXPECT_EQ(Code(r), absl::StatusCode::kOk) << r.message();
    EXPECT_TRUE(*(*good)->Contains("raw-put"));
    // The operation after the lease ones (field 14) is an unknown operation, and so is
    // a Lease in field 100, where object_store/lease.proto used to put it before the
    // lease operations became part of StoreRequest: such a client falls back to
    // Create + Seal.
    raw.SendBytes(Le32(4) + std::string("\x08\x01\x72\x00", 4) /* id 1, field 14 */);
    r = raw.Read();
    EXPECT_EQ(Code(r), absl::StatusCode::kInvalidArgument) << r.message();
    EXPECT_EQ(r.result_case(), proto::StoreReply::RESULT_NOT_SET);
    raw.SendBytes(Le32(7) + std::string("\x08\x02\xa2\x06\x02\x08\x40", 7)
                  /* id 2, field 100 { bytes: 64 } */);
    r = raw.Read();
    EXPECT_EQ(Code(r), absl::StatusCode::kInvalidArgument) << r.message();
    EXPECT_NE(r.message().find("no operation this store knows"), std::string::npos)
        << r.message();
    EXPECT_EQ(r.result_case(), proto::StoreReply::RESULT_NOT_SET);
    // The store kept serving throughout.
    EXPECT_TRUE((*good)->Put("after", std::string(1000, 'a')).ok());
    auto k = (*good)->Get("kept", absl::ZeroDuration());
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(memcmp(k->data().data(), kept.data(), kept.size()), 0);
  }
  // The raw clients are gone: their leases are freed; only the objects remain.
  ASSERT_TRUE((*good)->Delete("after").ok());
  ASSERT_TRUE((*good)->Delete("raw-put").ok());
  ASSERT_TRUE((*good)->Delete("overlapped").ok());
  EXPECT_TRUE(WaitFor([&] {
    StoreStats s = MustStats(**good);
    return s.clients == baseline.clients && s.used == baseline.used &&
           s.objects == baseline.objects;
  })) << Describe(MustStats(**good)) << " vs " << Describe(baseline) << "\n" << store.log();
}

// The client's own retry of an overlapped seal: a store that refuses every overlapped
// seal (ServerOptions::ready_wait zero: UNAVAILABLE, as when the writer was descheduled
// past the wait) makes each medium Put seal again plainly; every put still succeeds, is
// visible to another client when Put returns, byte for byte, and nothing leaks.
TEST(StoreIntegrationTest, RefusedOverlappedSealsAreSealedAgainByTheClient) {
  ScratchDir dir;
  ServerOptions o;
  o.capacity = 64 * kMiB;  // leased puts up to 1 MiB
  o.ready_wait = absl::ZeroDuration();
  StoreServer server;
  ASSERT_TRUE(server.Start(dir.path() + "/s.sock", o).ok());
  auto writer = Client::Connect(dir.path() + "/s.sock");
  auto reader = Client::Connect(dir.path() + "/s.sock");
  ASSERT_TRUE(writer.ok() && reader.ok());
  const StoreStats before = MustStats(**reader);
  for (int i = 0; i < 20; ++i) {
    std::vector<uint8_t> data = Pattern(512 * 1024 + 64 * i, i);  // overlapped: >= 256 KiB
    std::string id = absl::StrCat("refused-", i);
    ASSERT_TRUE((*writer)->Put(id, absl::MakeConstSpan(data), "meta").ok()) << id;
    auto ref = (*reader)->Get(id, absl::ZeroDuration());
    ASSERT_TRUE(ref.ok()) << id << ": " << ref.status();
    EXPECT_EQ(ref->metadata_view(), "meta");
    ASSERT_EQ(ref->data().size(), data.size());
    EXPECT_EQ(std::memcmp(ref->data().data(), data.data(), data.size()), 0) << id;
    ref->Reset();
    ASSERT_TRUE((*writer)->Delete(id).ok());
  }
  StoreStats after = MustStats(**reader);
  EXPECT_GT(after.leases, 0u) << "the puts did not go through a lease";
  EXPECT_EQ(after.objects, before.objects);
  EXPECT_EQ(after.referenced, 0u);
  // What is used is the writer's lease (its next put's block and its ready range).
  EXPECT_EQ(after.used, after.leased_bytes);
  writer->reset();
  EXPECT_TRUE(WaitFor([&] { return MustStats(**reader).leased_bytes == 0; }))
      << "the writer's leases outlived it";
  EXPECT_EQ(MustStats(**reader).used, 0u);
}

TEST(StoreIntegrationTest, OverlappedSealIsAcknowledgedInTheWordAfterTheReadyWord) {
  StoreProcess store(64 * kMiB);
  testing::RawClient raw(store.socket(), /*map_arena=*/true);
  testing::RawClient other(store.socket(), /*map_arena=*/true);
  auto lease = [](testing::RawClient& c, uint64_t bytes) {
    proto::StoreRequest req;
    req.mutable_lease()->set_bytes(bytes);
    proto::StoreReply r = c.Call(req);
    EXPECT_EQ(Code(r), absl::StatusCode::kOk) << r.message();
    return r.lease().offset();
  };
  const uint64_t m = lease(raw, 64 * 1024);
  const uint64_t w = lease(raw, 64);       // raw's ready slot: ready word, ack word
  const uint64_t theirs = lease(other, 64);
  other.Word(theirs + 8).store(0xfeed);
  auto seal = [&](const std::string& id, uint64_t offset, uint64_t slot, uint64_t value) {
    proto::StoreRequest req;
    auto* s = req.mutable_seal_leased();
    s->set_id(id);
    s->set_offset(offset);
    s->set_data_size(256);
    s->set_ready_offset(slot);
    s->set_ready_value(value);
    return raw.Call(req);
  };
  // Sealed: the ack word holds the ready value by the time the reply comes.
  raw.Word(w).store(7);
  proto::StoreReply r = seal("a", m, w, 7);
  EXPECT_EQ(Code(r), absl::StatusCode::kOk) << r.message();
  EXPECT_EQ(raw.Word(w + 8).load(), 7u);
  // Not sealed (the id exists, the ready word never written, the id empty): the ready
  // value with the failure bit, and the reply says why.
  raw.Word(w).store(8);
  r = seal("a", m + 4096, w, 8);
  EXPECT_EQ(Code(r), absl::StatusCode::kAlreadyExists) << r.message();
  EXPECT_EQ(raw.Word(w + 8).load(), 8u | kSealAckFailed);
  r = seal("b", m + 8192, w, 9);  // the ready word still says 8
  EXPECT_EQ(Code(r), absl::StatusCode::kUnavailable) << r.message();
  EXPECT_EQ(raw.Word(w + 8).load(), 9u | kSealAckFailed);
  raw.Word(w).store(10);
  r = seal("", m + 8192, w, 10);
  EXPECT_EQ(Code(r), absl::StatusCode::kInvalidArgument) << r.message();
  EXPECT_EQ(raw.Word(w + 8).load(), 10u | kSealAckFailed);
  // A slot that is not the caller's is never written.
  other.Word(theirs).store(11);
  r = seal("c", m + 8192, theirs, 11);
  EXPECT_EQ(Code(r), absl::StatusCode::kInvalidArgument) << r.message();
  EXPECT_EQ(other.Word(theirs + 8).load(), 0xfeedu);
  EXPECT_EQ(raw.Word(w + 8).load(), 10u | kSealAckFailed);
}

TEST(StoreIntegrationTest, RandomLeaseOperationsNeverHurtTheStore) {
  StoreProcess store(64 * kMiB);
  auto good = Client::Connect(store.socket());
  ASSERT_TRUE(good.ok());
  const StoreStats baseline = Baseline(**good);
  std::mt19937_64 rng(11);
  std::vector<std::string> ids;
  {
    RawClient raw(store.socket());
    std::vector<std::pair<uint64_t, uint64_t>> leases;
    for (int i = 0; i < 3000; ++i) {
      proto::StoreRequest req;
      // Offsets near the leases granted so far (aligned or not), or anywhere.
      uint64_t near = leases.empty() ? 0 : leases[rng() % leases.size()].first;
      uint64_t off = rng() % 4 == 0 ? rng() : near + (rng() % 4096) * (rng() % 2 ? 64 : 1);
      switch (rng() % 3) {
        case 0: {
          req.mutable_lease()->set_bytes(rng() % 3 == 0 ? rng() : rng() % (256 * 1024));
          proto::StoreReply r = raw.Call(req);
          if (Code(r) == absl::StatusCode::kOk) leases.emplace_back(r.lease().offset(), r.lease().size());
          break;
        }
        case 1: {
          std::string id = absl::StrCat("fuzz-", i);
          auto* sl = req.mutable_seal_leased();
          sl->set_id(id);
          sl->set_offset(off);
          sl->set_data_size(rng() % 3 == 0 ? rng() : rng() % 8192);
          sl->set_metadata_size(rng() % 2 ? 0 : rng() % 300);
          if (Code(raw.Call(req)) == absl::StatusCode::kOk) ids.push_back(id);
          break;
        }
        default:
          req.mutable_return_lease()->set_offset(off);
          req.mutable_return_lease()->set_size(rng() % 2 ? (rng() % 64) * 64 : rng() % 9000);
          raw.Call(req);
          break;
      }
    }
    EXPECT_GT(ids.size(), 10u);
    // Every object the fuzzer managed to seal is an ordinary object.
    for (const auto& id : ids) {
      auto ref = (*good)->Get(id, absl::ZeroDuration());
      EXPECT_TRUE(ref.ok()) << id << ": " << ref.status();
    }
  }
  for (const auto& id : ids) ASSERT_TRUE((*good)->Delete(id).ok()) << id;
  EXPECT_TRUE(WaitFor([&] {
    StoreStats s = MustStats(**good);
    return s.clients == baseline.clients && s.used == baseline.used &&
           s.objects == baseline.objects && s.referenced == 0;
  })) << Describe(MustStats(**good)) << " vs " << Describe(baseline) << "\n" << store.log();
  // And the store still puts and gets.
  std::vector<uint8_t> data = Pattern(kMiB / 2, 5);
  ASSERT_TRUE((*good)->Put("after-fuzz", absl::MakeConstSpan(data), "m").ok());
  auto ref = (*good)->Get("after-fuzz", absl::ZeroDuration());
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(memcmp(ref->data().data(), data.data(), data.size()), 0);
}

// A put whose deadline leaves it no time to send (internal::kMinReplyWait) fails
// without touching the connection; the refill it was about to send must not forget the
// lease's rest (left leased, unused, for the connection's life), and the ready word it
// was about to ask for is asked by the next put.
TEST(StoreIntegrationTest, APutWithNoTimeToSendKeepsTheLeaseAndTheReadyWordToAsk) {
  StoreProcess store(64 * kMiB);
  auto conn = internal::Connection::Open(store.socket(), absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(conn.ok()) << conn.status();
  internal::LeasedPuts puts(conn->get());
  auto observer = Client::Connect(store.socket());
  ASSERT_TRUE(observer.ok()) << observer.status();
  auto soon = [] { return absl::Now() + absl::Milliseconds(200); };  // < kMinReplyWait
  auto later = [] { return absl::Now() + absl::Seconds(30); };
  auto put = [&](const std::string& id, size_t data, size_t meta, absl::Time deadline) {
    const std::vector<uint8_t> bytes = Pattern(data, 1);
    std::optional<absl::Status> s =
        puts.TryPut(id, bytes, std::string(meta, 'm'), deadline);
    return s.has_value() ? *s : absl::InternalError("not put from the lease");
  };
  auto stats = [&] {
    absl::StatusOr<StoreStats> st = (*observer)->Stats();
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? *st : StoreStats{};
  };
  // A block of 300 KB with under 256 KiB of data (no overlapped seal, so no ready word
  // asked): the refill sent with its seal leases 300 KB more.
  ASSERT_TRUE(put("a", 100000, 200000, absl::Now() + absl::Seconds(30)).ok());
  StoreStats st = stats();
  EXPECT_EQ(st.leases, 1u);
  EXPECT_EQ(st.leased_bytes, 300032u);  // a's block, 300,000 rounded up to 64
  // 280 KB of data (overlapped: the ready word is asked first) in that lease, with no
  // time to send: neither the ready word's request nor the seal (with the refill that
  // returns the lease's last 20 KB) goes out.
  absl::Status b = put("b", 280000, 0, soon());
  ASSERT_EQ(b.code(), absl::StatusCode::kDeadlineExceeded) << b;
  st = stats();
  EXPECT_EQ(st.leases, 1u);  // the same lease, b's block in it
  // Does not fit in the 20 KB kept: a refill returns them and leases anew.
  ASSERT_TRUE(put("c", 280000, 0, later()).ok());
  st = stats();
  // Leased now: b's block (its seal never went out; 280,000 is a multiple of 64), the
  // lease c's seal refilled (sized as a's block) and the ready word (64 B). A forgotten
  // rest stays leased with b's block (20,032 bytes more); no ready word: 2 ranges.
  EXPECT_EQ(st.leased_bytes, 280000u + 300032u + 64u) << "the rest of a lease forgotten?";
  EXPECT_EQ(st.leases, 3u) << "no ready word asked after b's request never went out?";
}

TEST(StoreIntegrationTest, FullStoreStillSaysResourceExhaustedForMediumPuts) {
  StoreProcess store(64 * kMiB);  // no spill directory
  auto c = Client::Connect(store.socket());
  ASSERT_TRUE(c.ok());
  std::vector<uint8_t> data = Pattern(768 * 1024, 3);
  std::vector<ObjectRef> pins;
  absl::Status last;
  for (int i = 0; i < 200 && last.ok(); ++i) {
    std::string id = absl::StrCat("fill-", i);
    last = (*c)->Put(id, absl::MakeConstSpan(data), "m");
    if (last.ok()) {
      auto ref = (*c)->Get(id, absl::ZeroDuration());
      ASSERT_TRUE(ref.ok());
      pins.push_back(std::move(*ref));
    }
  }
  ASSERT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  // The message is the store's account of the space, as for any put.
  EXPECT_NE(last.message().find("cannot allocate"), std::string::npos) << last;
  EXPECT_NE(last.message().find("referenced objects"), std::string::npos) << last;
  EXPECT_GE(pins.size(), 70u);
  // Released, the space serves again (the client asks for leases anew).
  (*c)->Release(&pins);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE((*c)->Delete(absl::StrCat("fill-", i)).ok());
  }
  absl::Status again;
  EXPECT_TRUE(WaitFor([&] {
    again = (*c)->Put(absl::StrCat("again-", absl::ToUnixNanos(absl::Now())),
                      absl::MakeConstSpan(data), "m");
    return again.ok();
  })) << again;
}

TEST(StoreIntegrationTest, ThreadsPutThroughOneLeaseConcurrently) {
  StoreProcess store(256 * kMiB);
  auto c = Client::Connect(store.socket());
  auto reader = Client::Connect(store.socket());
  ASSERT_TRUE(c.ok() && reader.ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const uint64_t size = 70000 + 37000 * ((t * 40 + i) % 17);
        std::vector<uint8_t> data = Pattern(size, t * 1000 + i);
        std::string id = absl::StrCat("t", t, "-", i);
        if (!(*c)->Put(id, absl::MakeConstSpan(data), "m").ok()) {
          ++failures;
          continue;
        }
        auto ref = (*reader)->Get(id, absl::ZeroDuration());
        if (!ref.ok() || ref->data().size() != size ||
            memcmp(ref->data().data(), data.data(), size) != 0) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  StoreStats s = MustStats(**c);
  EXPECT_EQ(s.objects, 160u);
  // Beyond the objects, only the client's one lease for its next put and the 64 bytes
  // of its ready word (overlapped seals) are held (no lease granted to it was lost
  // track of on the way).
  uint64_t object_bytes = 0;
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 40; ++i) {
      object_bytes += (64 + 70000 + 37000 * ((t * 40 + i) % 17) + 63) / 64 * 64;
    }
  }
  EXPECT_GE(s.used, object_bytes);
  EXPECT_LE(s.used, object_bytes + 70000 + 37000 * 16 + 128 + 64) << Describe(s);
  EXPECT_LE(s.leases, 2u) << Describe(s);
}

// A store from before leases, as far as a client can tell: it knows Create, Seal and
// Release, and answers every other operation with `refusal` (an older store sees a lease frame as a
// StoreRequest without an operation it knows: INVALID_ARGUMENT). Serves one client.
class StoreWithoutLeases {
 public:
  explicit StoreWithoutLeases(absl::StatusCode refusal) : refusal_(refusal) {
    char tmpl[] = "/tmp/drover-oldstore-XXXXXX";
    dir_ = mkdtemp(tmpl);
    socket_ = dir_ + "/store.sock";
    auto arena = Arena::Create(64 * kMiB);  // leased puts up to 1 MiB
    EXPECT_TRUE(arena.ok()) << arena.status();
    arena_ = std::move(*arena);
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, socket_.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 1), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~StoreWithoutLeases() {
    Join();
    close(listen_fd_);
    unlink(socket_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& socket() const { return socket_; }
  // Waits for the client to disconnect.
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  // Requests seen, by operation (after Join).
  int count(proto::StoreRequest::OpCase op) const { return counts_[op]; }

 private:
  void Serve() {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(fd, 0);
    proto::StoreHello hello;
    hello.set_arena_capacity(arena_->capacity());
    hello.set_client_id(1);
    std::string frame;
    ASSERT_TRUE(AppendFrame(hello, &frame).ok());
    ASSERT_TRUE(SendFd(fd, arena_->fd(), frame).ok());
    uint64_t next = 0;
    std::string scratch;
    proto::StoreRequest req;
    while (ReadFrame(fd, &req, &scratch).ok()) {
      ++counts_[req.op_case()];
      proto::StoreReply reply;
      reply.set_request_id(req.request_id());
      if (req.has_create()) {
        const proto::CreateRequest& c = req.create();
        const uint64_t data_offset = c.metadata().empty() ? 0 : AlignUp(c.metadata().size());
        memcpy(arena_->base() + next, c.metadata().data(), c.metadata().size());
        proto::ObjectLocation* loc = reply.mutable_create()->mutable_location();
        loc->set_offset(next);
        loc->set_data_offset(data_offset);
        loc->set_data_size(c.data_size());
        loc->set_metadata_size(c.metadata().size());
        next += AlignUp(data_offset + c.data_size());
      } else if (!req.has_seal() && !req.has_release()) {
        reply.set_code(static_cast<int>(refusal_));
        reply.set_message("no operation this store knows");
      }
      ASSERT_TRUE(WriteFrame(fd, reply, &scratch).ok());
    }
    close(fd);
  }

  const absl::StatusCode refusal_;
  std::string dir_, socket_;
  std::unique_ptr<Arena> arena_;
  int listen_fd_ = -1;
  int counts_[32] = {};
  std::thread thread_;
};

TEST(StoreIntegrationTest, StoreWithoutLeasesGetsCreateAndSealAfterOneLeaseAsked) {
  for (absl::StatusCode refusal :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnimplemented}) {
    StoreWithoutLeases store(refusal);
    {
      auto c = Client::Connect(store.socket());
      ASSERT_TRUE(c.ok()) << c.status();
      for (int i = 0; i < 4; ++i) {
        // Past the client's retry delay after a refused lease (for RESOURCE_EXHAUSTED):
        // a store without leases is not asked again.
        if (i == 3) absl::SleepFor(absl::Milliseconds(150));
        std::vector<uint8_t> data = Pattern(256 * 1024, i);  // a size put through a lease
        ASSERT_TRUE((*c)->Put(absl::StrCat("medium-", i), absl::MakeConstSpan(data), "m").ok())
            << absl::StatusCodeToString(refusal) << " put " << i;
      }
    }  // disconnects: the store's thread ends
    store.Join();
    const std::string what = absl::StatusCodeToString(refusal);
    EXPECT_EQ(store.count(proto::StoreRequest::kLease), 1) << what;
    EXPECT_EQ(store.count(proto::StoreRequest::kSealLeased), 0) << what;
    EXPECT_EQ(store.count(proto::StoreRequest::kReturnLease), 0) << what;
    EXPECT_EQ(store.count(proto::StoreRequest::kCreate), 4) << what;
    EXPECT_EQ(store.count(proto::StoreRequest::kSeal), 4) << what;
  }
}

}  // namespace
}  // namespace drover::object_store
