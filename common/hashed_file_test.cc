#include "common/hashed_file.h"

#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "common/files.h"
#include "common/sha256.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

class HashedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = std::string(::testing::TempDir()) + "/hashed-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  bool Exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }
  std::string Final() { return dir_ + "/program"; }
  std::string Tmp() { return dir_ + "/program.part"; }
  std::string dir_;
};

TEST_F(HashedFileTest, ChunksWithTheAnnouncedHashTakeTheFinalName) {
  const std::string data = "hello, packages";
  auto w = HashedFileWriter::Create(Final(), Tmp(), 0600);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Append(0, data.substr(0, 5), 100).ok());
  EXPECT_FALSE(Exists(Final())) << "a partial file must not have the final name";
  ASSERT_TRUE(w->Append(5, data.substr(5), 100).ok());
  EXPECT_EQ(w->written(), data.size());
  ASSERT_TRUE(w->Commit(Sha256Hex(data)).ok());
  EXPECT_EQ(*ReadFile(Final()), data);
  EXPECT_FALSE(Exists(Tmp()));
  EXPECT_EQ(w->Commit(Sha256Hex(data)).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(HashedFileTest, AWrongHashLeavesNothing) {
  auto w = HashedFileWriter::Create(Final(), Tmp(), 0600);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append(0, "tampered", 100).ok());
  absl::Status s = w->Commit(Sha256Hex("original"));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(Sha256Hex("tampered")), std::string::npos) << s;
  EXPECT_FALSE(Exists(Final()));
  EXPECT_FALSE(Exists(Tmp()));
}

TEST_F(HashedFileTest, AGapARepeatOrTooManyBytesAreRefusedAndTheDestructorCleansUp) {
  {
    auto w = HashedFileWriter::Create(Final(), Tmp(), 0600);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append(0, "abcd", 10).ok());
    EXPECT_EQ(w->Append(8, "efgh", 10).code(), absl::StatusCode::kInvalidArgument);  // a gap
    EXPECT_EQ(w->Append(0, "abcd", 10).code(), absl::StatusCode::kInvalidArgument);  // a repeat
    absl::Status big = w->Append(4, "0123456789", 10);
    EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(big.message().find("limit of 10 bytes"), std::string::npos) << big;
    EXPECT_TRUE(Exists(Tmp()));
  }
  EXPECT_FALSE(Exists(Tmp()));
  EXPECT_FALSE(Exists(Final()));
}

}  // namespace
}  // namespace drover
