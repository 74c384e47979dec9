#include "scheduler/dashboard_auth.h"

#include "common/clock.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

TEST(DashboardAuthTest, ACodeIsGoodForOneSession) {
  FakeClock clock;
  DashboardAuth auth(&clock);
  absl::Time expires;
  const std::string code = auth.NewCode(&expires);
  EXPECT_EQ(code.size(), 32u);
  EXPECT_EQ(expires, clock.Now() + auth.options().code_ttl);
  auto session = auth.Redeem(code);
  ASSERT_TRUE(session.has_value());
  EXPECT_TRUE(auth.ValidSession(*session));
  EXPECT_FALSE(auth.Redeem(code).has_value()) << "a second use must fail";
  EXPECT_FALSE(auth.ValidSession("nope"));
  EXPECT_FALSE(auth.ValidSession(""));
  EXPECT_FALSE(auth.Redeem("").has_value());
}

TEST(DashboardAuthTest, CodesAndSessionsExpire) {
  FakeClock clock;
  DashboardAuth auth(&clock);
  absl::Time expires;
  const std::string late = auth.NewCode(&expires);
  const std::string early = auth.NewCode(&expires);
  auto session = auth.Redeem(early);
  ASSERT_TRUE(session.has_value());
  clock.Advance(auth.options().code_ttl);
  EXPECT_FALSE(auth.Redeem(late).has_value());
  EXPECT_TRUE(auth.ValidSession(*session));
  clock.Advance(auth.options().session_ttl);
  EXPECT_FALSE(auth.ValidSession(*session));
}

TEST(DashboardAuthTest, TheOldestGoWhenFull) {
  FakeClock clock;
  DashboardAuthOptions o;
  o.max_codes = 2;
  DashboardAuth auth(&clock, o);
  absl::Time expires;
  const std::string first = auth.NewCode(&expires);
  clock.Advance(absl::Seconds(1));
  const std::string second = auth.NewCode(&expires);
  clock.Advance(absl::Seconds(1));
  const std::string third = auth.NewCode(&expires);
  EXPECT_FALSE(auth.Redeem(first).has_value());
  EXPECT_TRUE(auth.Redeem(second).has_value());
  EXPECT_TRUE(auth.Redeem(third).has_value());
}

}  // namespace
}  // namespace drover
