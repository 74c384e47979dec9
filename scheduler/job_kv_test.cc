#include "scheduler/job_kv.h"

#include "gtest/gtest.h"

namespace drover {
namespace {

const JobKv::Scope kA{"job-1", 0};
const JobKv::Scope kA1{"job-1", 1};
const JobKv::Scope kB{"job-2", 0};

TEST(JobKvTest, ScopesAreSeparate) {
  JobKv kv;
  ASSERT_TRUE(kv.Set(kA, "k", "a").ok());
  ASSERT_TRUE(kv.Set(kA1, "k", "a1").ok());
  EXPECT_EQ(*kv.Get(kA, "k"), "a");
  EXPECT_EQ(*kv.Get(kA1, "k"), "a1");
  EXPECT_FALSE(kv.Get(kB, "k").has_value());
  kv.DropOlderThan("job-1", 1);
  EXPECT_FALSE(kv.Get(kA, "k").has_value());
  EXPECT_EQ(*kv.Get(kA1, "k"), "a1");
  kv.DropJob("job-1");
  EXPECT_EQ(kv.scopes(), 0u);
}

TEST(JobKvTest, CompareAndSetAndAbsentExpectation) {
  JobKv kv;
  std::optional<std::string> cur;
  EXPECT_TRUE(*kv.CompareAndSet(kA, "k", std::nullopt, "first", &cur));
  EXPECT_EQ(*cur, "first");
  EXPECT_FALSE(*kv.CompareAndSet(kA, "k", std::nullopt, "second", &cur));
  EXPECT_EQ(*cur, "first");
  EXPECT_FALSE(*kv.CompareAndSet(kA, "k", std::string("nope"), "second", &cur));
  EXPECT_TRUE(*kv.CompareAndSet(kA, "k", std::string("first"), "second", &cur));
  EXPECT_EQ(*kv.Get(kA, "k"), "second");
}

TEST(JobKvTest, AddIsRetrySafeAndRejectsNonIntegers) {
  JobKv kv;
  EXPECT_EQ(*kv.Add(kA, "n", 5, "r1"), 5);
  EXPECT_EQ(*kv.Add(kA, "n", 5, "r1"), 5);  // the same request again
  EXPECT_EQ(*kv.Add(kA, "n", -2, "r2"), 3);
  EXPECT_EQ(*kv.Add(kA, "n", 1, ""), 4);
  ASSERT_TRUE(kv.Set(kA, "s", "text").ok());
  EXPECT_EQ(kv.Add(kA, "s", 1, "").status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(kv.Set(kA, "big", "9223372036854775807").ok());
  EXPECT_EQ(kv.Add(kA, "big", 1, "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobKvTest, LimitsOnKeysValuesAndScopeSize) {
  JobKv kv;
  EXPECT_EQ(kv.Set(kA, "", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Set(kA, std::string(kKvMaxKeyBytes + 1, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Set(kA, "k", std::string(kKvMaxValueBytes + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
  std::string mib(kKvMaxValueBytes, 'x');
  absl::Status last;
  for (int i = 0; i < 100 && last.ok(); ++i) last = kv.Set(kA, "k" + std::to_string(i), mib);
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted);
  // Overwriting keeps the accounting right: replacing a value frees its old bytes.
  ASSERT_TRUE(kv.Set(kA, "k0", "small").ok());
  EXPECT_TRUE(kv.Set(kA, "again", std::string(1000, 'y')).ok());
}

}  // namespace
}  // namespace drover
