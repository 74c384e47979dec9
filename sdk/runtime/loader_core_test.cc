// LoaderCore's dispatch, ordering, retries and error policy, on fake workers: no
// runtime, no processes; each case runs in milliseconds.
#include "sdk/runtime/loader_core.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace drover::internal {
namespace {

// What one call does when it finishes: its outcomes, or an error (its worker died, and
// with it every other call that worker held).
using Behavior = std::function<absl::StatusOr<std::vector<LoaderOutcome>>(
    size_t worker, const std::vector<LoaderCall>& calls)>;

LoaderOutcome Made(const LoaderCall& c, int64_t run_us = 10000) {
  LoaderOutcome o;
  o.position = c.position;
  o.value = absl::StrCat("v", c.position);
  o.node = "node-1";
  o.run_us = run_us;
  return o;
}

absl::StatusOr<std::vector<LoaderOutcome>> AllMade(size_t, const std::vector<LoaderCall>& calls) {
  std::vector<LoaderOutcome> out;
  for (const LoaderCall& c : calls) out.push_back(Made(c));
  return out;
}

class FakeWorkers final : public LoaderWorkers {
 public:
  struct Sent {
    size_t worker = 0;
    std::vector<int64_t> positions;
    int64_t outstanding_before = 0;  // calls the worker held when this one was sent
  };
  // Shared with the test: the core owns the fake.
  struct Record {
    std::vector<Sent> sent;
    std::vector<int64_t> finished;  // positions, in the order their calls finished
    std::map<size_t, int> deaths;
    int64_t most_positions_held = 0;  // by any one worker at once
    int max_restarts = -1;
    std::vector<StoredRef> released;
  };

  FakeWorkers(Behavior behavior, bool newest_first, std::shared_ptr<Record> record)
      : behavior_(std::move(behavior)), newest_first_(newest_first), r_(std::move(record)) {}

  absl::Status Start(int64_t n, int max_restarts, absl::Time) override {
    workers_ = static_cast<size_t>(n);
    r_->max_restarts = max_restarts;
    return absl::OkStatus();
  }
  uint64_t Send(size_t worker, std::vector<LoaderCall> calls) override {
    EXPECT_LT(worker, workers_);
    EXPECT_FALSE(DeadForGood(worker)) << "a call sent to worker " << worker << ", dead for good";
    Sent s{worker, {}, 0};
    for (const auto& [id, c] : out_) s.outstanding_before += c.worker == worker ? 1 : 0;
    for (const LoaderCall& c : calls) s.positions.push_back(c.position);
    r_->sent.push_back(s);
    const uint64_t id = next_id_++;
    out_.emplace(id, Outstanding{worker, std::move(calls)});
    int64_t held = 0;
    for (const auto& [i, c] : out_) held += c.worker == worker ? static_cast<int64_t>(c.calls.size()) : 0;
    r_->most_positions_held = std::max(r_->most_positions_held, held);
    return id;
  }
  std::vector<Finished> Wait() override {
    EXPECT_FALSE(out_.empty());
    auto it = newest_first_ ? std::prev(out_.end()) : out_.begin();
    const uint64_t id = it->first;
    Outstanding c = std::move(it->second);
    out_.erase(it);
    std::vector<Finished> done;
    absl::StatusOr<std::vector<LoaderOutcome>> outcomes = behavior_(c.worker, c.calls);
    if (!outcomes.ok()) {
      ++r_->deaths[c.worker];
      // The worker's other calls die with it.
      for (auto o = out_.begin(); o != out_.end();) {
        if (o->second.worker != c.worker) {
          ++o;
          continue;
        }
        done.push_back(Finished{o->first, outcomes.status()});
        o = out_.erase(o);
      }
    } else {
      for (const LoaderOutcome& o : *outcomes) r_->finished.push_back(o.position);
    }
    done.insert(done.begin(), Finished{id, std::move(outcomes)});
    return done;
  }
  bool DeadForGood(size_t worker) override { return r_->deaths[worker] > r_->max_restarts; }
  absl::Status PinHostMemory() override { return absl::OkStatus(); }
  void Release(const std::vector<StoredRef>& refs) override {
    r_->released.insert(r_->released.end(), refs.begin(), refs.end());
  }

 private:
  struct Outstanding {
    size_t worker;
    std::vector<LoaderCall> calls;
  };
  const Behavior behavior_;
  const bool newest_first_;
  const std::shared_ptr<Record> r_;
  size_t workers_ = 0;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Outstanding> out_;
};

LoaderInputs Items(int64_t n, std::function<bool(int64_t)> encodes = nullptr) {
  LoaderInputs in;
  in.count = n;
  in.items = n;
  in.encode = [encodes](int64_t pos) -> absl::StatusOr<EncodedValue> {
    if (encodes && !encodes(pos)) return absl::InvalidArgumentError("cannot encode it");
    EncodedValue v;
    v.bytes = absl::StrCat("in", pos);
    return v;
  };
  return in;
}

LoaderOptions Options(int workers, int prefetch = 4) {
  LoaderOptions o;
  o.num_workers = workers;
  o.prefetch = prefetch;
  o.progress = LoaderOptions::Progress::kOff;
  o.name = "test";
  return o;
}

struct Drained {
  std::vector<int64_t> delivered;
  absl::Status end;  // what the last Next returned
};

// Calls Next until it fails (OUT_OF_RANGE at the end).
Drained Drain(LoaderCore& core) {
  Drained r;
  for (int i = 0; i < 100000; ++i) {
    absl::StatusOr<LoaderResult> next = core.Next();
    if (!next.ok()) {
      r.end = next.status();
      return r;
    }
    EXPECT_EQ(std::string(next->value.view.bytes), absl::StrCat("v", next->position));
    r.delivered.push_back(next->position);
  }
  ADD_FAILURE() << "the loader never ended";
  return r;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

struct Loader {
  std::shared_ptr<FakeWorkers::Record> record = std::make_shared<FakeWorkers::Record>();
  std::unique_ptr<LoaderCore> core;
  Loader(LoaderInputs in, LoaderOptions o, Behavior b = AllMade, bool newest_first = false) {
    core = std::make_unique<LoaderCore>(std::make_unique<FakeWorkers>(std::move(b), newest_first, record),
                                        std::move(in), "fn", std::move(o));
  }
};

TEST(LoaderCoreTest, OrderedDeliversEveryItemInOrderWhenCallsFinishOutOfOrder) {
  Loader l(Items(50), Options(3), AllMade, /*newest_first=*/true);
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  EXPECT_EQ(r.delivered, Range(50));
  EXPECT_EQ(r.end.code(), absl::StatusCode::kOutOfRange) << r.end;
  EXPECT_TRUE(absl::StrContains(r.end.message(), "50 delivered, 0 skipped")) << r.end;
  EXPECT_NE(l.record->finished, Range(50)) << "the fake was meant to finish out of order";
}

TEST(LoaderCoreTest, UnorderedDeliversItemsAsTheyFinish) {
  LoaderOptions o = Options(3);
  o.ordered = false;
  Loader l(Items(50), o, AllMade, /*newest_first=*/true);
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  EXPECT_EQ(r.delivered, l.record->finished);
  std::vector<int64_t> sorted = r.delivered;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, Range(50));
}

TEST(LoaderCoreTest, NoWorkerHoldsMoreThanPrefetchSlowItems) {
  Loader l(Items(100), Options(2, /*prefetch=*/3));
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  EXPECT_EQ(r.delivered, Range(100));
  EXPECT_EQ(l.record->most_positions_held, 3);
  // Each worker got work.
  std::set<size_t> used;
  for (const auto& s : l.record->sent) used.insert(s.worker);
  EXPECT_EQ(used, (std::set<size_t>{0, 1}));
}

TEST(LoaderCoreTest, FastItemsGoInLargerCallsOnceTheirRunTimeIsKnown) {
  Behavior fast = [](size_t, const std::vector<LoaderCall>& calls) {
    std::vector<LoaderOutcome> out;
    for (const LoaderCall& c : calls) out.push_back(Made(c, /*run_us=*/10));
    return absl::StatusOr<std::vector<LoaderOutcome>>(out);
  };
  Loader l(Items(500), Options(2, /*prefetch=*/64), fast);
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  EXPECT_EQ(r.delivered, Range(500));
  ASSERT_FALSE(l.record->sent.empty());
  EXPECT_EQ(l.record->sent[0].positions.size(), 1u) << "one item until the run time is known";
  size_t largest = 0;
  for (const auto& s : l.record->sent) largest = std::max(largest, s.positions.size());
  EXPECT_GT(largest, 1u);
  EXPECT_LT(l.record->sent.size(), 500u);
}

// Position `poison` kills whichever worker runs it.
Behavior Poison(int64_t poison) {
  return [poison](size_t w, const std::vector<LoaderCall>& calls) -> absl::StatusOr<std::vector<LoaderOutcome>> {
    for (const LoaderCall& c : calls) {
      if (c.position == poison) return absl::UnavailableError(absl::StrCat("worker ", w, " died (signal 9)"));
    }
    return AllMade(w, calls);
  };
}

TEST(LoaderCoreTest, ADeathInABatchIsChargedOnlyToTheItemThatKills) {
  LoaderOptions o = Options(2, /*prefetch=*/4);
  o.max_retries = 2;
  Loader l(Items(20), o, Poison(7));
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  // Ordered, stop on error: everything before the poisoned item, then its error.
  EXPECT_EQ(r.delivered, Range(7));
  EXPECT_EQ(r.end.code(), absl::StatusCode::kUnavailable) << r.end;
  EXPECT_TRUE(absl::StrContains(r.end.message(), "loader 'test': item 7: its worker died 3 times"))
      << r.end;
  // After the first death, item 7 ran alone on an idle worker each time.
  int alone = 0;
  bool first = true;
  for (const auto& s : l.record->sent) {
    if (std::find(s.positions.begin(), s.positions.end(), 7) == s.positions.end()) continue;
    if (first) {
      first = false;
      continue;
    }
    EXPECT_EQ(s.positions.size(), 1u);
    EXPECT_EQ(s.outstanding_before, 0);
    ++alone;
  }
  EXPECT_EQ(alone, 3);  // max_retries + 1 exclusive runs
}

TEST(LoaderCoreTest, SkippingAKillingItemDeliversEveryOtherItem) {
  LoaderOptions o = Options(2, /*prefetch=*/4);
  o.max_retries = 1;
  o.on_error = LoaderOptions::OnError::kSkip;
  Loader l(Items(20), o, Poison(7));
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  std::vector<int64_t> expected = Range(20);
  expected.erase(expected.begin() + 7);
  EXPECT_EQ(r.delivered, expected);
  EXPECT_EQ(r.end.code(), absl::StatusCode::kOutOfRange) << r.end;
  std::vector<SkippedItem> skipped = l.core->skipped();
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].position, 7);
  EXPECT_TRUE(absl::StrContains(skipped[0].error.message(), "item 7: its worker died 2 times"))
      << skipped[0].error;
}

TEST(LoaderCoreTest, WhenEveryWorkerIsDeadForGoodTheLoaderSaysSo) {
  Behavior dies = [](size_t w, const std::vector<LoaderCall>&) -> absl::StatusOr<std::vector<LoaderOutcome>> {
    return absl::UnavailableError(absl::StrCat("worker ", w, " died (exit 1)"));
  };
  LoaderOptions o = Options(2);
  o.max_retries = 0;
  o.on_error = LoaderOptions::OnError::kSkip;
  Loader l(Items(100), o, dies);
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  EXPECT_TRUE(r.delivered.empty());
  EXPECT_EQ(r.end.code(), absl::StatusCode::kAborted) << r.end;
  EXPECT_TRUE(absl::StrContains(r.end.message(), "all 2 workers are dead; the last: worker "))
      << r.end;
  // Each worker took calls until its restarts (max_retries + 2) were used up, no more.
  EXPECT_EQ(l.record->max_restarts, 2);
  for (const auto& [w, d] : l.record->deaths) EXPECT_EQ(d, 3) << "worker " << w;
  // Every later Next answers the same.
  absl::StatusOr<LoaderResult> again = l.core->Next();
  EXPECT_EQ(again.status(), r.end);
}

TEST(LoaderCoreTest, AnItemsErrorStopsTheLoaderNamingTheItemItsNodeAndWorker) {
  Behavior b = [](size_t w, const std::vector<LoaderCall>& calls) -> absl::StatusOr<std::vector<LoaderOutcome>> {
    std::vector<LoaderOutcome> out;
    for (const LoaderCall& c : calls) {
      LoaderOutcome o = Made(c);
      if (c.position == 3) {
        o.code = static_cast<int32_t>(absl::StatusCode::kInvalidArgument);
        o.message = "bad record";
        o.node = "node-x";
      }
      out.push_back(o);
    }
    return out;
  };
  Loader l(Items(10), Options(1), b);
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  EXPECT_EQ(r.delivered, Range(3));
  EXPECT_EQ(r.end.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.end.message(), "loader 'test': item 3 (on node-x, worker 0): bad record");
  EXPECT_EQ(l.core->Next().status(), r.end);
}

TEST(LoaderCoreTest, AnInputThatDoesNotEncodeIsNamedAndNeverSent) {
  LoaderOptions o = Options(2);
  o.on_error = LoaderOptions::OnError::kSkip;
  Loader l(Items(10, [](int64_t p) { return p != 5; }), o);
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  EXPECT_EQ(r.delivered.size(), 9u);
  ASSERT_EQ(l.core->skipped().size(), 1u);
  EXPECT_EQ(l.core->skipped()[0].position, 5);
  EXPECT_TRUE(absl::StrContains(l.core->skipped()[0].error.message(),
                                "item 5: its input does not encode: cannot encode it"));
  for (const auto& s : l.record->sent) {
    EXPECT_EQ(std::count(s.positions.begin(), s.positions.end(), 5), 0);
  }
}

TEST(LoaderCoreTest, AnOutcomeTheWorkerLeftOutFailsItsItem) {
  Behavior b = [](size_t w, const std::vector<LoaderCall>& calls) -> absl::StatusOr<std::vector<LoaderOutcome>> {
    std::vector<LoaderOutcome> out;
    for (const LoaderCall& c : calls) {
      if (c.position != 2) out.push_back(Made(c));
    }
    return out;
  };
  Loader l(Items(5), Options(1), b);
  ASSERT_TRUE(l.core->Start().ok());
  Drained r = Drain(*l.core);
  EXPECT_EQ(r.delivered, Range(2));
  EXPECT_EQ(r.end.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(r.end.message(), "item 2: its worker returned no outcome for it"))
      << r.end;
}

TEST(LoaderCoreTest, BadOptionsAreRefusedBeforeAnyWorkerStarts) {
  Loader zero(Items(5), Options(0));
  absl::Status s = zero.core->Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "num_workers and prefetch must be at least 1")) << s;
  EXPECT_EQ(zero.record->max_restarts, -1) << "a worker was started";

  LoaderOptions batched = Options(1);
  batched.batch_size = 4;
  Loader mismatch(Items(5), batched);
  s = mismatch.core->Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "fn takes one input: batch_size must be 0")) << s;
}

TEST(LoaderCoreTest, BatchesAreDescribedByTheirItems) {
  LoaderInputs in = Items(3);
  in.items = 10;
  in.batched = true;
  in.batch_size = 4;
  in.first_index = 100;
  LoaderOptions o = Options(1);
  o.batch_size = 4;
  Loader l(std::move(in), o);
  EXPECT_EQ(l.core->Describe(0), "batch 0 (items 100..103)");
  EXPECT_EQ(l.core->Describe(2), "batch 2 (items 108..109)");
}

TEST(LoaderCoreTest, ResultsMadeAndNeverTakenAreReleased) {
  Behavior stored = [](size_t, const std::vector<LoaderCall>& calls) {
    std::vector<LoaderOutcome> out;
    for (const LoaderCall& c : calls) {
      LoaderOutcome o = Made(c);
      o.owned.push_back(WireRef{absl::StrCat("obj-", c.position), "node-1", 8});
      out.push_back(o);
    }
    return absl::StatusOr<std::vector<LoaderOutcome>>(out);
  };
  auto record = std::make_shared<FakeWorkers::Record>();
  {
    LoaderCore core(std::make_unique<FakeWorkers>(stored, /*newest_first=*/true, record), Items(10), "fn",
                    Options(2));
    ASSERT_TRUE(core.Start().ok());
    absl::StatusOr<LoaderResult> first = core.Next();
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->position, 0);
  }
  // Item 0 came last (newest first): what came before it was made and never taken;
  // each is released once, the taken one not.
  std::set<std::string> released;
  for (const StoredRef& r : record->released) EXPECT_TRUE(released.insert(r.object_id).second);
  EXPECT_FALSE(released.empty());
  EXPECT_EQ(released.count("obj-0"), 0u);
}

}  // namespace
}  // namespace drover::internal
