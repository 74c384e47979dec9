// The chaos campaign's short run in the test suite (docs/reliability.md): about a
// minute of faults of every kind against a 2-node cluster with a mixed workload, then
// every invariant checked. CHAOS_SEED=S replays a seed's faults; CHAOS_SECONDS sets
// the length.
#include <cstdlib>
#include <iostream>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "tests/chaos/campaign.h"

namespace drover::chaos {
namespace {

TEST(ChaosTest, ShortCampaignKeepsEveryInvariant) {
  CampaignOptions o;
  if (const char* seed = std::getenv("CHAOS_SEED"); seed != nullptr) {
    ASSERT_TRUE(absl::SimpleAtoi(seed, &o.seed)) << "CHAOS_SEED=" << seed;
  }
  int64_t seconds = 60;
  if (const char* s = std::getenv("CHAOS_SECONDS"); s != nullptr) {
    ASSERT_TRUE(absl::SimpleAtoi(s, &seconds)) << "CHAOS_SECONDS=" << s;
  }
  o.duration = absl::Seconds(seconds);
  o.mean_gap = absl::Seconds(3);
  auto result = RunCampaign(o);
  ASSERT_TRUE(result.ok()) << result.status();
  // Every kind of fault was tried (the schedule has each at least once); a kind that
  // could not be injected here is one of the substitutes the summary names.
  for (int k = 0; k < kFaultKinds; ++k) {
    const char* name = FaultKindName(static_cast<FaultKind>(k));
    EXPECT_GE(result->injected[name] + result->not_injected[name], 1) << name;
  }
  // Violations of known, documented issues (docs/reliability.md) are checked and
  // printed, not failed on; any other fails the test.
  EXPECT_EQ(result->unknown_violations, 0)
      << "seed " << result->seed << " (replay: CHAOS_SEED=" << result->seed << ")\n"
      << result->summary;
  if (result->violations > 0) {
    std::cout << "known issues seen (docs/reliability.md): " << result->violations << "\n";
  }
}

}  // namespace
}  // namespace drover::chaos
