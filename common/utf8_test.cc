#include "common/utf8.h"

#include <string>

#include "absl/strings/escaping.h"
#include "google/protobuf/stubs/common.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

constexpr size_t kValid = absl::string_view::npos;

struct Case {
  std::string bytes;
  size_t bad_at;
};

TEST(Utf8Test, EdgeCasesOfTheEncoding) {
  const Case cases[] = {
      {"", kValid},
      {"plain ascii", kValid},
      {std::string("nul\0inside", 10), kValid},
      {"\x7f", kValid},
      {"\xc2\x80", kValid},                  // U+0080, the first 2-byte form
      {"\xdf\xbf", kValid},                  // U+07FF
      {"\xe0\xa0\x80", kValid},              // U+0800, the first 3-byte form
      {"\xed\x9f\xbf", kValid},              // U+D7FF, just below the surrogates
      {"\xee\x80\x80", kValid},              // U+E000, just above them
      {"\xef\xbf\xbf", kValid},              // U+FFFF
      {"\xf0\x90\x80\x80", kValid},          // U+10000, the first 4-byte form
      {"\xf4\x8f\xbf\xbf", kValid},          // U+10FFFF, the last code point
      {"h\xc3\xa9llo w\xc3\xb6rld \xe2\x82\xac \xf0\x9f\x98\x80", kValid},
      // Overlong forms.
      {"\xc0\x80", 0},                       // NUL in two bytes
      {"\xc1\xbf", 0},                       // U+007F in two bytes
      {"\xe0\x80\xaf", 0},                   // '/' in three bytes
      {"\xe0\x9f\xbf", 0},                   // U+07FF in three bytes
      {"\xf0\x80\x80\xaf", 0},               // '/' in four bytes
      {"\xf0\x8f\xbf\xbf", 0},               // U+FFFF in four bytes
      // Surrogates, alone or paired (CESU-8).
      {"\xed\xa0\x80", 0},                   // U+D800
      {"\xed\xbf\xbf", 0},                   // U+DFFF
      {"\xed\xa0\xbd\xed\xb8\x80", 0},
      // Past U+10FFFF.
      {"\xf4\x90\x80\x80", 0},               // U+110000
      {"\xf5\x80\x80\x80", 0},
      {"\xf7\xbf\xbf\xbf", 0},
      {"\xf8\x88\x80\x80\x80", 0},           // the old 5-byte form
      {"\xfc\x84\x80\x80\x80\x80", 0},       // the old 6-byte form
      {"\xfe", 0},
      {"\xff", 0},
      // Stray continuation bytes and truncated sequences.
      {"\x80", 0},
      {"\xbf", 0},
      {"ab\xc3", 2},
      {"ab\xe2\x82", 2},
      {"ab\xf0\x9f\x98", 2},
      {"\xc3(", 0},
      {"\xe2\x82(", 0},
      {"ok \xc3\xa9 then \xff", 11},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(InvalidUtf8At(c.bytes), c.bad_at) << "\"" << absl::CHexEscape(c.bytes) << "\"";
  }
}

// Protobuf's own check is what refuses a string field: agree with it on every string of
// up to 3 bytes (google::protobuf::internal is protobuf 3.21's: a newer protobuf
// checks with utf8_range, and this oracle moves there), and on 4-byte strings over every first two bytes with boundary values
// after them, each between valid text (so the offset is checked too).
TEST(Utf8Test, AgreesWithProtobufsCheck) {
  auto expect_same = [](const std::string& s) {
    const size_t ours = InvalidUtf8At(s);
    const size_t theirs =
        static_cast<size_t>(google::protobuf::internal::UTF8SpnStructurallyValid(s));
    ASSERT_EQ(ours == kValid ? s.size() : ours, theirs) << "\"" << absl::CHexEscape(s) << "\"";
  };
  std::string s;
  for (int len = 1; len <= 3; ++len) {
    const int total = 1 << (8 * len);
    // A 3-byte string led by ASCII is ASCII and a 2-byte string, checked already.
    for (int v = len == 3 ? 0x800000 : 0; v < total; ++v) {
      s.assign("a");
      for (int k = len - 1; k >= 0; --k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
      s.append("z");
      expect_same(s);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  const unsigned char tails[] = {0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xff};
  for (int b0 = 0xc0; b0 <= 0xff; ++b0) {
    for (int b1 = 0; b1 <= 0xff; ++b1) {
      for (unsigned char b2 : tails) {
        for (unsigned char b3 : tails) {
          s.assign("a");
          for (int b : {b0, b1, static_cast<int>(b2), static_cast<int>(b3)}) {
            s.push_back(static_cast<char>(b));
          }
          s.append("z");
          expect_same(s);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace drover
