#include "object_store/pending_gets.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace drover::object_store {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// What the index answered: one entry per Get.
struct Answer {
  ClientId client;
  uint64_t request_id;
  std::vector<std::string> filled;   // ids of the results filled, in order
  std::vector<std::string> missing;  // ids of the results still waiting
  bool timed_out;
};

class PendingGetsTest : public ::testing::Test {
 protected:
  // Parks a Get of `ids` by `client` (request `rid`); the ids in `present` are found
  // at once, the others wait.
  void Park(ClientId client, uint64_t rid, const std::vector<std::string>& ids,
            const std::set<std::string>& present, absl::Time deadline) {
    proto::StoreReply reply;
    reply.set_request_id(rid);
    std::vector<char> waiting;
    for (const std::string& id : ids) {
      proto::GetResult* r = reply.mutable_get()->add_results();
      r->set_id(id);
      r->set_found(present.count(id) > 0);
      waiting.push_back(present.count(id) > 0 ? 0 : 1);
    }
    index_.Park(client, &reply, std::move(waiting), deadline);
  }

  // `id` was sealed; the store has it unless it is in `gone` (deleted again).
  void Seal(const std::string& id, const std::set<std::string>& gone = {}) {
    index_.OnSealed(
        id,
        [&](ClientId, proto::GetResult* r) {
          if (gone.count(r->id()) > 0) return false;
          r->set_found(true);
          return true;
        },
        [&](ClientId c, proto::StoreReply* reply, const std::vector<char>& waiting,
            bool timed_out) { Record(c, *reply, waiting, timed_out); });
  }

  void Expire(absl::Time now) {
    index_.Expire(now, [&](ClientId c, proto::StoreReply* reply,
                           const std::vector<char>& waiting,
                           bool timed_out) { Record(c, *reply, waiting, timed_out); });
  }

  void Record(ClientId c, const proto::StoreReply& reply, const std::vector<char>& waiting,
              bool timed_out) {
    Answer a{c, reply.request_id(), {}, {}, timed_out};
    for (int i = 0; i < reply.get().results_size(); ++i) {
      const proto::GetResult& r = reply.get().results(i);
      if (waiting[i]) {
        EXPECT_FALSE(r.found()) << r.id();
        a.missing.push_back(r.id());
      } else {
        EXPECT_TRUE(r.found()) << r.id();
        a.filled.push_back(r.id());
      }
    }
    answers_.push_back(a);
  }

  PendingGets index_;
  std::vector<Answer> answers_;
};

TEST_F(PendingGetsTest, AGetIsAnsweredWhenItsLastMissingObjectIsSealed) {
  Park(1, 10, {"a", "b", "c"}, {"b"}, absl::InfiniteFuture());
  EXPECT_EQ(index_.size(), 1u);
  EXPECT_EQ(index_.CountFor(1), 1u);
  Seal("a");
  EXPECT_TRUE(answers_.empty());
  Seal("x");  // nobody waits for it
  EXPECT_TRUE(answers_.empty());
  Seal("c");
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].client, 1u);
  EXPECT_EQ(answers_[0].request_id, 10u);
  EXPECT_EQ(answers_[0].filled, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(answers_[0].timed_out);
  EXPECT_EQ(index_.size(), 0u);
  EXPECT_EQ(index_.CountFor(1), 0u);
  Seal("c");  // answered once only
  EXPECT_EQ(answers_.size(), 1u);
}

TEST_F(PendingGetsTest, OneSealAnswersEveryGetWaitingForIt) {
  Park(1, 10, {"a"}, {}, absl::InfiniteFuture());
  Park(2, 20, {"a", "b"}, {}, absl::InfiniteFuture());
  Park(2, 21, {"a", "a"}, {}, absl::InfiniteFuture());  // the same id twice
  EXPECT_EQ(index_.CountFor(2), 2u);
  Seal("a");
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(answers_[0].request_id, 10u);
  EXPECT_EQ(answers_[1].request_id, 21u);
  EXPECT_EQ(answers_[1].filled, (std::vector<std::string>{"a", "a"}));
  Seal("b");
  ASSERT_EQ(answers_.size(), 3u);
  EXPECT_EQ(answers_[2].request_id, 20u);
}

TEST_F(PendingGetsTest, ASealTheGetCouldNotTakeKeepsItWaiting) {
  Park(1, 10, {"a"}, {}, absl::InfiniteFuture());
  Seal("a", /*gone=*/{"a"});  // sealed, then deleted before the Get took it
  EXPECT_TRUE(answers_.empty());
  EXPECT_EQ(index_.size(), 1u);
  Seal("a");
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].filled, (std::vector<std::string>{"a"}));
}

TEST_F(PendingGetsTest, DeadlinesAnswerWhatIsMissingInDeadlineOrder) {
  Park(1, 10, {"a", "b"}, {}, kT0 + absl::Seconds(2));
  Park(2, 20, {"c"}, {}, kT0 + absl::Seconds(1));
  Park(3, 30, {"d"}, {}, absl::InfiniteFuture());
  EXPECT_EQ(index_.NextDeadline(), kT0 + absl::Seconds(1));
  Seal("a");
  Expire(kT0 + absl::Milliseconds(999));
  EXPECT_TRUE(answers_.empty());
  Expire(kT0 + absl::Seconds(5));
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(answers_[0].request_id, 20u);
  EXPECT_TRUE(answers_[0].timed_out);
  EXPECT_EQ(answers_[0].missing, (std::vector<std::string>{"c"}));
  EXPECT_EQ(answers_[1].request_id, 10u);
  EXPECT_EQ(answers_[1].filled, (std::vector<std::string>{"a"}));
  EXPECT_EQ(answers_[1].missing, (std::vector<std::string>{"b"}));
  // Only the Get without a deadline is left, and a seal of a timed-out id finds none.
  EXPECT_EQ(index_.NextDeadline(), absl::InfiniteFuture());
  Seal("b");
  Seal("c");
  EXPECT_EQ(answers_.size(), 2u);
  EXPECT_EQ(index_.size(), 1u);
}

TEST_F(PendingGetsTest, ADisconnectedClientsGetsAreDroppedUnanswered) {
  Park(1, 10, {"a"}, {}, kT0 + absl::Seconds(1));
  Park(1, 11, {"b"}, {}, absl::InfiniteFuture());
  Park(2, 20, {"a"}, {}, absl::InfiniteFuture());
  index_.DropClient(1);
  EXPECT_EQ(index_.CountFor(1), 0u);
  EXPECT_EQ(index_.size(), 1u);
  EXPECT_EQ(index_.NextDeadline(), absl::InfiniteFuture());
  Seal("b");
  Expire(kT0 + absl::Seconds(5));
  EXPECT_TRUE(answers_.empty());
  Seal("a");
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].client, 2u);
  index_.DropClient(1);  // again: nothing
  index_.DropClient(7);  // never seen
}

}  // namespace
}  // namespace drover::object_store
