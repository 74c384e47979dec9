// HttpServer over real loopback sockets: the token gates every route, /metrics serves
// a registry's counters as exposition text.
#include "common/http_server.h"

#include "common/metrics_http.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"

namespace drover {
namespace {

constexpr char kToken[] = "0123456789abcdef";

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_shared<prometheus::Registry>();
    counter_ = &prometheus::BuildCounter()
                    .Name("drover_test_things_total")
                    .Help("Things.")
                    .Register(*registry_)
                    .Add({{"kind", "a"}});
    ServeMetrics(&server_, {registry_, CollectAtScrape(
                                           [this](ScrapeFamilies* f) {
                                             f->Gauge("drover_test_scrapes", "Scrapes.")
                                                 .Add(++scrapes_, {{"k", "v"}});
                                           },
                                           MetricLabels{{"node", "n1"}})});
    server_.AddPublicPath("/login");
    server_.routes().Get("/login", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("come in", "text/plain");
    });
    server_.SetAuthorizer([](const httplib::Request& req) {
      return req.get_header_value("Cookie") == "session=good";
    });
    auto port = server_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }

  HttpServer server_{kToken, 2};
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* counter_ = nullptr;
  int scrapes_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpServerTest, RequestsWithoutTheTokenAreRefused) {
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(res->body.find("drover_test_things_total"), std::string::npos);
  res = client_->Get("/metrics", {{"Authorization", "Bearer wrong"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = client_->Get("/metrics", {{"Authorization", std::string("Bearer ") + kToken + "x"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = client_->Get("/metrics", {{"Cookie", "session=bad"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
}

TEST_F(HttpServerTest, EitherTokenHeaderOrTheOwnersCheckLetsIn) {
  counter_->Increment(3);
  for (const httplib::Headers& h :
       {httplib::Headers{{"Authorization", std::string("Bearer ") + kToken}},
        httplib::Headers{{"x-drover-token", kToken}},
        httplib::Headers{{"Cookie", "session=good"}}}) {
    auto res = client_->Get("/metrics", h);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->body.find("# TYPE drover_test_things_total counter"), std::string::npos)
        << res->body;
    EXPECT_NE(res->body.find("drover_test_things_total{kind=\"a\"} 3"), std::string::npos)
        << res->body;
    // Read at the scrape: a new value each time, with the common labels first.
    EXPECT_NE(res->body.find("# TYPE drover_test_scrapes gauge"), std::string::npos);
    EXPECT_NE(res->body.find("drover_test_scrapes{node=\"n1\",k=\"v\"} " +
                             std::to_string(scrapes_)),
              std::string::npos)
        << res->body;
  }
}

TEST_F(HttpServerTest, PublicPathsNeedNoToken) {
  auto res = client_->Get("/login");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "come in");
  // Only that exact path.
  res = client_->Get("/login/x");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
}

TEST(HttpServerStartTest, APortInUseIsAClearError) {
  HttpServer a(kToken), b(kToken);
  auto port = a.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  auto again = b.Start("127.0.0.1", *port);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(again.status().message().find("--metrics-port"), std::string::npos);
  a.Stop();
  a.Stop();  // idempotent
}

TEST(HttpHostPortTest, BracketsIpv6) {
  EXPECT_EQ(HttpHostPort("127.0.0.1", 80), "127.0.0.1:80");
  EXPECT_EQ(HttpHostPort("::1", 80), "[::1]:80");
  EXPECT_EQ(HttpHostPort("[::1]", 80), "[::1]:80");
}

}  // namespace
}  // namespace drover
