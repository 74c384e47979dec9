// store_tool: a client process for the object store's integration tests.
//
//   store_tool SOCKET put ID SIZE SEED            -> "ok CHECKSUM"
//   store_tool SOCKET get ID TIMEOUT_MS           -> "ok SIZE CHECKSUM IN_ARENA OFFSET"
//   store_tool SOCKET hold ID TIMEOUT_MS READY    -> gets ID, writes READY, holds the ref
//                                                   until killed
//   store_tool SOCKET crash-mid-create ID SIZE READY
//                                                 -> creates ID, writes half of it,
//                                                   writes READY, waits to be killed
//   store_tool SOCKET put-and-hold ID SIZE COUNT READY
//                                                 -> puts ID-0 .. ID-(COUNT-1) of SIZE
//                                                   bytes (medium sizes go through the
//                                                   client's lease, which it then still
//                                                   holds), writes READY, waits to be
//                                                   killed
// Errors print "error CODE MESSAGE" and exit 1.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "object_store/client.h"
#include "object_store/testing/test_data.h"

namespace os = drover::object_store;

namespace {

int Fail(const absl::Status& s) {
  printf("error %d %s\n", static_cast<int>(s.code()), std::string(s.message()).c_str());
  return 1;
}

uint64_t ParseU64(const char* s) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(s, &v)) {
    fprintf(stderr, "store_tool: '%s' is not a number\n", s);
    exit(2);
  }
  return v;
}

[[noreturn]] void WaitToBeKilled() {
  while (true) pause();
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  if (argc < 4) {
    fprintf(stderr, "usage: store_tool SOCKET put|get|hold|crash-mid-create ID ...\n");
    return 2;
  }
  std::string cmd = argv[2];
  std::string id = argv[3];
  auto client = os::Client::Connect(argv[1]);
  if (!client.ok()) return Fail(client.status());
  os::Client& c = **client;

  if (cmd == "put" && argc == 6) {
    std::string buf(ParseU64(argv[4]), '\0');
    auto span = absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(buf.data()), buf.size());
    os::testing::FillPattern(span, ParseU64(argv[5]));
    if (absl::Status s = c.Put(id, buf, "tool-metadata"); !s.ok()) return Fail(s);
    printf("ok %llu\n", static_cast<unsigned long long>(os::testing::Checksum(span)));
    return 0;
  }
  if ((cmd == "get" && argc == 5) || (cmd == "hold" && argc == 6)) {
    auto ref = c.Get(id, absl::Milliseconds(ParseU64(argv[4])));
    if (!ref.ok()) return Fail(ref.status());
    const uint8_t* p = ref->data().data();
    bool in_arena = p >= c.arena_base() && p + ref->data().size() <= c.arena_base() + c.arena_capacity();
    printf("ok %zu %llu %d %llu\n", ref->data().size(),
           static_cast<unsigned long long>(os::testing::Checksum(ref->data())), in_arena ? 1 : 0,
           static_cast<unsigned long long>(p - c.arena_base()));
    if (cmd == "hold") {
      if (!drover::WriteFileAtomic(argv[5], "ready\n").ok()) return 3;
      WaitToBeKilled();
    }
    return 0;
  }
  if (cmd == "crash-mid-create" && argc == 6) {
    auto obj = c.Create(id, ParseU64(argv[4]), "partial");
    if (!obj.ok()) return Fail(obj.status());
    os::testing::FillPattern(obj->data.subspan(0, obj->data.size() / 2), 1);
    printf("created\n");
    if (!drover::WriteFileAtomic(argv[5], "ready\n").ok()) return 3;
    WaitToBeKilled();
  }
  if (cmd == "put-and-hold" && argc == 7) {
    std::string buf(ParseU64(argv[4]), '\0');
    auto span = absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(buf.data()), buf.size());
    const uint64_t count = ParseU64(argv[5]);
    for (uint64_t i = 0; i < count; ++i) {
      os::testing::FillPattern(span, i);
      if (absl::Status s = c.Put(absl::StrCat(id, "-", i), buf, "tool-metadata"); !s.ok()) {
        return Fail(s);
      }
    }
    printf("put %llu\n", static_cast<unsigned long long>(count));
    if (!drover::WriteFileAtomic(argv[6], "ready\n").ok()) return 3;
    WaitToBeKilled();
  }
  fprintf(stderr, "store_tool: bad command line\n");
  return 2;
}
