#include "object_store/object_table.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "object_store/arena.h"

namespace drover::object_store {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

// The arena as a plain heap buffer.
class HeapArena : public ArenaIo {
 public:
  explicit HeapArena(uint64_t capacity) : buf_(capacity, '\0') {}
  char* At(uint64_t offset) override { return buf_.data() + offset; }

 private:
  std::vector<char> buf_;
};

uint64_t Checksum(const char* p, uint64_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (uint64_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

void Fill(char* p, uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<char>(rng());
}

std::string TmpDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base ? base : "/tmp", "/", name, "_", ::getpid());
  return dir;
}

int CountFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

bool FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

class ObjectTableTest : public ::testing::Test {
 protected:
  void Init(uint64_t capacity, std::string spill_dir = "", uint64_t spill_capacity = 0) {
    arena_ = std::make_unique<HeapArena>(capacity);
    TableOptions o;
    o.capacity = capacity;
    o.spill_dir = std::move(spill_dir);
    o.spill_capacity = spill_capacity;
    table_ = std::make_unique<ObjectTable>(o, arena_.get());
  }

  // Create + fill (data from `seed`) + Seal + Release: an unreferenced sealed object.
  ObjectLocation Put(ClientId c, const ObjectId& id, uint64_t size, bool primary = true,
                     const std::string& metadata = "") {
    auto loc = table_->Create(c, id, size, metadata, primary);
    EXPECT_TRUE(loc.ok()) << id << ": " << loc.status();
    if (!loc.ok()) return {};
    Fill(arena_->At(loc->offset + loc->data_offset), size, Seed(id));
    sums_[id] = Checksum(arena_->At(loc->offset + loc->data_offset), size);
    EXPECT_TRUE(table_->Seal(c, id).ok());
    EXPECT_TRUE(table_->Release(c, id).ok());
    return *loc;
  }

  static uint64_t Seed(const ObjectId& id) { return std::hash<std::string>()(id); }

  // Gets, checks the bytes, releases.
  void ExpectIntact(ClientId c, const ObjectId& id) {
    auto loc = table_->Get(c, id);
    ASSERT_TRUE(loc.ok()) << id << ": " << loc.status();
    EXPECT_EQ(Checksum(arena_->At(loc->offset + loc->data_offset), loc->data_size), sums_[id])
        << id;
    ASSERT_TRUE(table_->Release(c, id).ok());
  }

  // Gets and releases (for objects whose bytes the test did not record).
  void ExpectIntactSize(const ObjectId& id) {
    auto loc = table_->Get(77, id);
    ASSERT_TRUE(loc.ok()) << id << ": " << loc.status();
    ASSERT_TRUE(table_->Release(77, id).ok());
  }

  // Deletes every id (ignoring those already gone) and checks nothing is left.
  void ExpectCleanAfterDeleting(const std::vector<ObjectId>& ids) {
    for (const auto& id : ids) (void)table_->Delete(id);
    TableStats s = table_->Stats();
    EXPECT_EQ(s.used, 0u);
    EXPECT_EQ(s.objects, 0u);
    EXPECT_EQ(s.referenced, 0u);
    EXPECT_EQ(s.spilled_objects, 0u);
    EXPECT_EQ(s.spilled_bytes, 0u);
    EXPECT_EQ(s.largest_free, s.capacity);
  }

  std::unique_ptr<ArenaIo> arena_;
  std::unique_ptr<ObjectTable> table_;
  std::map<ObjectId, uint64_t> sums_;
};

TEST_F(ObjectTableTest, RejectsBadIdsAndSizes) {
  Init(kMiB);
  EXPECT_EQ(table_->Create(1, "", 10, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->Create(1, std::string(65, 'x'), 10, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(table_->Create(1, std::string(64, 'x'), 10, "").ok());
  EXPECT_TRUE(table_->Create(1, std::string(1, '\0'), 10, "").ok());  // any bytes
  EXPECT_EQ(table_->Create(1, "empty", 0, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto big = table_->Create(1, "big", kMiB + 1, "");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("1048577"), std::string::npos) << big.status();
  EXPECT_NE(big.status().message().find("1048576"), std::string::npos) << big.status();
  EXPECT_EQ(table_->Create(1, "huge", UINT64_MAX, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->Create(1, "huge2", UINT64_MAX - 10, "meta").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Data + (aligned) metadata beyond the arena.
  EXPECT_EQ(table_->Create(1, "sum", kMiB - 10, "0123456789ab").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Metadata only, and exactly the whole arena, are fine.
  EXPECT_TRUE(table_->Create(2, "meta-only", 0, "m").ok());
  EXPECT_EQ(table_->Stats().objects, 3u);
  table_->DisconnectClient(1);
  table_->DisconnectClient(2);
  EXPECT_TRUE(table_->Create(3, "whole", kMiB, "").ok());
  table_->DisconnectClient(3);
  ExpectCleanAfterDeleting({});
}

TEST_F(ObjectTableTest, CreateSealGetLifecycle) {
  Init(kMiB);
  std::vector<ObjectId> sealed_ids;
  table_->set_on_sealed([&](const ObjectId& id) { sealed_ids.push_back(id); });
  auto loc = table_->Create(1, "obj", 1000, "abc");
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(loc->offset % kAlignment, 0u);
  EXPECT_EQ(loc->data_offset, 64u);
  EXPECT_EQ(loc->data_size, 1000u);
  EXPECT_EQ(loc->metadata_size, 3u);
  EXPECT_EQ(std::string(arena_->At(loc->offset), 3), "abc");
  EXPECT_EQ(table_->Stats().used, 1088u);  // 64 + 1000 rounded to 1024

  EXPECT_EQ(table_->Create(2, "obj", 5, "").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(table_->Get(2, "obj").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(table_->Metadata("obj").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(table_->Contains("obj"));
  EXPECT_EQ(table_->Seal(2, "obj").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(sealed_ids.empty());
  ASSERT_TRUE(table_->Seal(1, "obj").ok());
  EXPECT_EQ(sealed_ids, std::vector<ObjectId>{"obj"});
  EXPECT_EQ(table_->Seal(1, "obj").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table_->Create(1, "obj", 5, "").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(table_->Contains("obj"));
  EXPECT_EQ(*table_->Metadata("obj"), "abc");

  auto got = table_->Get(2, "obj");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->offset, loc->offset);
  EXPECT_EQ(got->data_offset, loc->data_offset);
  EXPECT_EQ(got->data_size, 1000u);
  TableStats s = table_->Stats();
  EXPECT_EQ(s.objects, 1u);
  EXPECT_EQ(s.sealed, 1u);
  EXPECT_EQ(s.referenced, 1u);

  EXPECT_EQ(table_->Get(1, "nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Seal(1, "nope").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Metadata("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Delete("nope").code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(table_->Contains("nope"));

  ASSERT_TRUE(table_->Release(1, "obj").ok());
  ASSERT_TRUE(table_->Release(2, "obj").ok());
  EXPECT_EQ(table_->Stats().referenced, 0u);
  ExpectCleanAfterDeleting({"obj"});
}

TEST_F(ObjectTableTest, NoMetadataMeansDataAtOffset) {
  Init(kMiB);
  auto loc = table_->Create(1, "x", 100, "");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->data_offset, 0u);
  EXPECT_EQ(loc->metadata_size, 0u);
  ASSERT_TRUE(table_->Seal(1, "x").ok());
  EXPECT_EQ(*table_->Metadata("x"), "");
  ASSERT_TRUE(table_->Release(1, "x").ok());
  ExpectCleanAfterDeleting({"x"});
}

TEST_F(ObjectTableTest, ReferencesAreCountedPerClient) {
  Init(kMiB);
  Put(1, "obj", 100);
  ASSERT_TRUE(table_->Get(2, "obj").ok());
  ASSERT_TRUE(table_->Get(2, "obj").ok());
  ASSERT_TRUE(table_->Get(3, "obj").ok());
  EXPECT_EQ(table_->Stats().referenced, 1u);
  // Client 1 released its creation reference in Put: it holds none.
  EXPECT_EQ(table_->Release(1, "obj").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Release(2, "unknown").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(table_->Release(2, "obj").ok());
  ASSERT_TRUE(table_->Release(3, "obj").ok());
  EXPECT_EQ(table_->Release(3, "obj").code(), absl::StatusCode::kNotFound);
  // Client 2 still holds one: the object is still pinned against deletion.
  ASSERT_TRUE(table_->Delete("obj").ok());
  EXPECT_EQ(table_->Stats().objects, 1u);
  ASSERT_TRUE(table_->Release(2, "obj").ok());
  EXPECT_EQ(table_->Release(2, "obj").code(), absl::StatusCode::kNotFound);  // no underflow
  EXPECT_EQ(table_->Stats().objects, 0u);
  ExpectCleanAfterDeleting({});
}

TEST_F(ObjectTableTest, DeleteUnreferencedFreesAtOnce) {
  Init(kMiB);
  Put(1, "a", 5000);
  EXPECT_GT(table_->Stats().used, 0u);
  ASSERT_TRUE(table_->Delete("a").ok());
  EXPECT_EQ(table_->Stats().used, 0u);
  EXPECT_FALSE(table_->Contains("a"));
  EXPECT_EQ(table_->Delete("a").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Get(1, "a").status().code(), absl::StatusCode::kNotFound);
  Put(1, "a", 10);  // the id can be used again
  ExpectCleanAfterDeleting({"a"});
}

TEST_F(ObjectTableTest, DeleteReferencedWaitsForLastRelease) {
  Init(kMiB);
  Put(1, "a", 5000);
  ASSERT_TRUE(table_->Get(2, "a").ok());
  ASSERT_TRUE(table_->Get(3, "a").ok());
  uint64_t used = table_->Stats().used;
  ASSERT_TRUE(table_->Delete("a").ok());
  EXPECT_FALSE(table_->Contains("a"));
  EXPECT_EQ(table_->Get(4, "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Metadata("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Delete("a").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Create(4, "a", 10, "").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(table_->Stats().used, used);
  ASSERT_TRUE(table_->Release(2, "a").ok());
  EXPECT_EQ(table_->Stats().used, used);
  ASSERT_TRUE(table_->Release(3, "a").ok());
  EXPECT_EQ(table_->Stats().used, 0u);
  EXPECT_TRUE(table_->Create(4, "a", 10, "").ok());
  table_->DisconnectClient(4);
  ExpectCleanAfterDeleting({});
}

TEST_F(ObjectTableTest, DeleteOfUnsealedObjectWaitsForItsCreator) {
  Init(kMiB);
  ASSERT_TRUE(table_->Create(1, "u", 100, "").ok());
  ASSERT_TRUE(table_->Delete("u").ok());
  EXPECT_EQ(table_->Stats().objects, 1u);  // the creator may still be writing
  ASSERT_TRUE(table_->Seal(1, "u").ok());
  EXPECT_FALSE(table_->Contains("u"));
  ASSERT_TRUE(table_->Release(1, "u").ok());
  EXPECT_EQ(table_->Stats().used, 0u);

  // Released before sealing: still pinned until sealed.
  ASSERT_TRUE(table_->Create(1, "v", 100, "").ok());
  ASSERT_TRUE(table_->Release(1, "v").ok());
  ASSERT_TRUE(table_->Delete("v").ok());
  EXPECT_EQ(table_->Stats().objects, 1u);
  ASSERT_TRUE(table_->Seal(1, "v").ok());
  EXPECT_EQ(table_->Stats().used, 0u);

  // Or aborted.
  ASSERT_TRUE(table_->Create(1, "w", 100, "").ok());
  ASSERT_TRUE(table_->Delete("w").ok());
  ASSERT_TRUE(table_->Abort(1, "w").ok());
  ExpectCleanAfterDeleting({});
}

TEST_F(ObjectTableTest, AbortOnlyByCreatorAndOnlyUnsealed) {
  Init(kMiB);
  ASSERT_TRUE(table_->Create(1, "u", 100, "").ok());
  EXPECT_EQ(table_->Abort(2, "u").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table_->Abort(1, "nope").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(table_->Abort(1, "u").ok());
  EXPECT_EQ(table_->Stats().used, 0u);
  EXPECT_EQ(table_->Get(1, "u").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Release(1, "u").code(), absl::StatusCode::kNotFound);
  Put(1, "s", 100);
  EXPECT_EQ(table_->Abort(1, "s").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table_->Contains("s"));
  ExpectCleanAfterDeleting({"s"});
}

TEST_F(ObjectTableTest, DisconnectAbortsUnsealedAndDropsReferences) {
  Init(kMiB);
  ASSERT_TRUE(table_->Create(1, "unsealed", 100, "").ok());
  Put(2, "shared", 100);
  ASSERT_TRUE(table_->Get(1, "shared").ok());
  ASSERT_TRUE(table_->Get(1, "shared").ok());
  ASSERT_TRUE(table_->Get(2, "shared").ok());
  ASSERT_TRUE(table_->Create(1, "mine", 100, "").ok());
  ASSERT_TRUE(table_->Seal(1, "mine").ok());  // sealed, client 1 still holds a reference
  ASSERT_TRUE(table_->Create(1, "to-delete", 100, "").ok());
  ASSERT_TRUE(table_->Seal(1, "to-delete").ok());
  ASSERT_TRUE(table_->Delete("to-delete").ok());

  std::vector<ObjectId> aborted = table_->DisconnectClient(1);
  EXPECT_EQ(aborted, std::vector<ObjectId>{"unsealed"});
  EXPECT_EQ(table_->Get(3, "unsealed").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(table_->Contains("shared"));
  EXPECT_TRUE(table_->Contains("mine"));  // sealed objects outlive their creator
  EXPECT_FALSE(table_->Contains("to-delete"));
  EXPECT_EQ(table_->Release(1, "shared").code(), absl::StatusCode::kNotFound);
  TableStats s = table_->Stats();
  EXPECT_EQ(s.objects, 2u);
  EXPECT_EQ(s.referenced, 1u);  // client 2's reference to "shared"
  ExpectIntact(3, "shared");
  EXPECT_TRUE(table_->DisconnectClient(1).empty());
  EXPECT_TRUE(table_->DisconnectClient(99).empty());
  EXPECT_TRUE(table_->DisconnectClient(2).empty());
  EXPECT_EQ(table_->Stats().referenced, 0u);
  ExpectCleanAfterDeleting({"shared", "mine"});
}

TEST_F(ObjectTableTest, EvictsUnreferencedSecondaryCopiesLeastRecentlyUsedFirst) {
  Init(kMiB);
  std::vector<ObjectId> evicted;
  table_->set_on_evicted([&](const ObjectId& id) { evicted.push_back(id); });
  // Ten secondary copies of 100 KiB fill the arena but for 24 KiB.
  for (int i = 0; i < 10; ++i) Put(1, absl::StrCat("s", i), 100 * kKiB, /*primary=*/false);
  // Touch s0 and s1 so s2 is now the least recently used; pin s3.
  ExpectIntact(2, "s0");
  ExpectIntact(2, "s1");
  ASSERT_TRUE(table_->Get(2, "s3").ok());
  Put(1, "new1", 100 * kKiB);
  EXPECT_EQ(evicted, std::vector<ObjectId>{"s2"});
  Put(1, "new2", 150 * kKiB);  // needs two more: s3 is pinned, so s4 and s5
  EXPECT_EQ(evicted, (std::vector<ObjectId>{"s2", "s4", "s5"}));
  EXPECT_FALSE(table_->Contains("s2"));
  EXPECT_TRUE(table_->Contains("s3"));
  EXPECT_EQ(table_->Stats().evictions, 3u);
  for (auto id : {"s0", "s1", "s3", "s6", "new1", "new2"}) ExpectIntact(3, id);
  ASSERT_TRUE(table_->Release(2, "s3").ok());
  ExpectCleanAfterDeleting({"s0", "s1", "s3", "s6", "s7", "s8", "s9", "new1", "new2"});
}

TEST_F(ObjectTableTest, SecondariesGoBeforePrimariesAreSpilled) {
  std::string dir = TmpDir("order");
  Init(kMiB, dir, 10 * kMiB);
  Put(1, "p0", 300 * kKiB);
  Put(1, "s0", 300 * kKiB, false);
  Put(1, "p1", 300 * kKiB);
  ExpectIntact(1, "s0");  // most recently used, yet a secondary: evicted first
  Put(1, "new", 300 * kKiB);
  TableStats s = table_->Stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.spills, 0u);
  EXPECT_FALSE(table_->Contains("s0"));
  Put(1, "new2", 300 * kKiB);  // now the least recently used primary, p0, is spilled
  s = table_->Stats();
  EXPECT_EQ(s.spills, 1u);
  EXPECT_EQ(s.spilled_objects, 1u);
  EXPECT_EQ(s.spilled_bytes, 300 * kKiB);
  EXPECT_TRUE(table_->Contains("p0"));
  EXPECT_TRUE(FileExists(absl::StrCat(dir, "/", absl::BytesToHexString("p0"))));
  ExpectCleanAfterDeleting({"p0", "p1", "new", "new2"});
  EXPECT_EQ(CountFiles(dir), 0);
}

TEST_F(ObjectTableTest, SpilledObjectComesBackOnGet) {
  std::string dir = TmpDir("restore");
  Init(kMiB, dir, 10 * kMiB);
  Put(1, "a", 400 * kKiB, true, "meta-a");
  Put(1, "b", 400 * kKiB, true, std::string(100, 'm'));
  Put(1, "c", 400 * kKiB);  // spills a
  EXPECT_EQ(table_->Stats().spilled_objects, 1u);
  std::string a_file = absl::StrCat(dir, "/", absl::BytesToHexString("a"));
  EXPECT_TRUE(FileExists(a_file));
  EXPECT_TRUE(table_->Contains("a"));
  EXPECT_EQ(*table_->Metadata("a"), "meta-a");  // read from the spill file
  ExpectIntact(2, "a");                          // restores a, spills b
  EXPECT_FALSE(FileExists(a_file));
  TableStats s = table_->Stats();
  EXPECT_EQ(s.restores, 1u);
  EXPECT_EQ(s.spills, 2u);
  EXPECT_EQ(s.spilled_objects, 1u);
  EXPECT_EQ(*table_->Metadata("b"), std::string(100, 'm'));
  ExpectIntact(2, "b");
  ExpectIntact(2, "c");
  // Delete of a spilled object removes its file.
  ASSERT_GE(table_->Stats().spilled_objects, 1u);
  ExpectCleanAfterDeleting({"a", "b", "c"});
  EXPECT_EQ(CountFiles(dir), 0);
}

// A store killed by SIGKILL leaves its spill files; the store started next (empty)
// removes them, else they fill the spill space.
TEST_F(ObjectTableTest, ANewTableRemovesTheSpillFilesOfAnEarlierOne) {
  std::string dir = TmpDir("stale");
  Init(kMiB, dir, 10 * kMiB);
  Put(1, "a", 600 * kKiB);
  Put(1, "b", 600 * kKiB);  // spills a
  ASSERT_EQ(CountFiles(dir), 1);
  std::ofstream(dir + "/not-a-spill-file") << "someone else's";
  table_.release();  // the store was killed: its destructor never ran (leaks the table)
  Init(kMiB, dir, 10 * kMiB);
  EXPECT_EQ(CountFiles(dir), 1) << "the earlier store's spill file is still there";
  EXPECT_TRUE(FileExists(dir + "/not-a-spill-file"));
  EXPECT_FALSE(table_->Contains("a"));
}

TEST_F(ObjectTableTest, LostSpillFileIsDataLossAndTheObjectIsDropped) {
  std::string dir = TmpDir("lost");
  Init(kMiB, dir, 10 * kMiB);
  Put(1, "a", 600 * kKiB);
  Put(1, "b", 600 * kKiB);  // spills a
  ASSERT_EQ(table_->Stats().spilled_objects, 1u);
  std::vector<ObjectId> removed;
  table_->set_on_evicted([&](const ObjectId& id) { removed.push_back(id); });
  ASSERT_EQ(::unlink(absl::StrCat(dir, "/", absl::BytesToHexString("a")).c_str()), 0);
  EXPECT_EQ(table_->Get(2, "a").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(table_->Contains("a"));
  // Reported as gone (the store turns this into a REMOVED event for subscribers).
  EXPECT_EQ(removed, std::vector<ObjectId>{"a"});
  EXPECT_EQ(table_->Get(2, "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->Stats().spilled_objects, 0u);
  ExpectIntact(2, "b");
  ExpectCleanAfterDeleting({"b"});
  EXPECT_EQ(CountFiles(dir), 0);
}

TEST_F(ObjectTableTest, ReferencedAndUnsealedObjectsAreNeverTouched) {
  std::string dir = TmpDir("pinned");
  Init(kMiB, dir, 10 * kMiB);
  Put(1, "ref1", 300 * kKiB);
  Put(1, "ref2", 300 * kKiB, false);
  ASSERT_TRUE(table_->Get(2, "ref1").ok());
  ASSERT_TRUE(table_->Get(2, "ref2").ok());
  auto u = table_->Create(3, "unsealed", 300 * kKiB, "");
  ASSERT_TRUE(u.ok());
  Fill(arena_->At(u->offset), 300 * kKiB, 99);
  uint64_t usum = Checksum(arena_->At(u->offset), 300 * kKiB);

  auto st = table_->Create(4, "big", 200 * kKiB, "");
  ASSERT_EQ(st.status().code(), absl::StatusCode::kResourceExhausted) << st.status();
  std::string msg(st.status().message());
  EXPECT_NE(msg.find("cannot allocate 200.0 KiB for object 'big'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("124.0 KiB free (largest free block 124.0 KiB) of 1.0 MiB"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("600.0 KiB held by 2 referenced objects"), std::string::npos) << msg;
  EXPECT_NE(msg.find("300.0 KiB by 1 unsealed objects"), std::string::npos) << msg;
  TableStats s = table_->Stats();
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.spills, 0u);
  EXPECT_EQ(s.objects, 3u);
  EXPECT_EQ(Checksum(arena_->At(u->offset), 300 * kKiB), usum);
  ExpectIntact(5, "ref1");
  ExpectIntact(5, "ref2");
  table_->DisconnectClient(2);
  table_->DisconnectClient(3);
  EXPECT_TRUE(table_->Create(4, "big", 200 * kKiB, "").ok());
  table_->DisconnectClient(4);
  ExpectCleanAfterDeleting({"ref1", "ref2"});
}

TEST_F(ObjectTableTest, ExhaustedWhenSpillSpaceIsFull) {
  std::string dir = TmpDir("spillfull");
  Init(kMiB, dir, 500 * kKiB);
  Put(1, "a", 400 * kKiB);
  Put(1, "b", 400 * kKiB);
  Put(1, "c", 400 * kKiB);  // spills a (400 of 500 KiB)
  EXPECT_EQ(table_->Stats().spills, 1u);
  auto st = table_->Create(1, "d", 400 * kKiB, "");
  ASSERT_EQ(st.status().code(), absl::StatusCode::kResourceExhausted) << st.status();
  std::string msg(st.status().message());
  EXPECT_NE(msg.find("800.0 KiB by 2 unreferenced objects"), std::string::npos) << msg;
  EXPECT_NE(msg.find("spill space 400.0 KiB of 500.0 KiB used by 1 spilled objects"),
            std::string::npos)
      << msg;
  EXPECT_EQ(table_->Stats().spills, 1u);  // nothing was spilled in vain
  // Getting the spilled one back needs b or c spilled: no room either.
  auto g = table_->Get(2, "a");
  ASSERT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted) << g.status();
  EXPECT_NE(g.status().message().find("to restore spilled object 'a'"), std::string::npos)
      << g.status();
  EXPECT_TRUE(table_->Contains("a"));
  ASSERT_TRUE(table_->Delete("b").ok());
  ExpectIntact(2, "a");
  ExpectCleanAfterDeleting({"a", "c"});
  EXPECT_EQ(CountFiles(dir), 0);
}

TEST_F(ObjectTableTest, WithoutSpillDirectoryPrimariesStayAndCreateFails) {
  Init(kMiB);
  Put(1, "a", 600 * kKiB);
  auto st = table_->Create(1, "b", 600 * kKiB, "");
  ASSERT_EQ(st.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.status().message().find("spilling disabled"), std::string::npos) << st.status();
  EXPECT_NE(st.status().message().find("600.0 KiB by 1 unreferenced objects"),
            std::string::npos)
      << st.status();
  ExpectIntact(1, "a");
  ExpectCleanAfterDeleting({"a"});
}

TEST_F(ObjectTableTest, HopelessRequestDisturbsNothing) {
  std::string dir = TmpDir("hopeless");
  Init(kMiB, dir, 10 * kMiB);
  Put(1, "idle", 300 * kKiB, false);
  Put(1, "idle2", 300 * kKiB);
  Put(1, "pinned", 300 * kKiB);
  ASSERT_TRUE(table_->Get(2, "pinned").ok());
  // 1 MiB - 300 KiB pinned < 800 KiB: no amount of evicting or spilling helps.
  auto st = table_->Create(1, "x", 800 * kKiB, "");
  ASSERT_EQ(st.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.status().message().find("would not make enough room"), std::string::npos)
      << st.status();
  TableStats s = table_->Stats();
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.spills, 0u);
  table_->DisconnectClient(2);
  ExpectCleanAfterDeleting({"idle", "idle2", "pinned"});
}

TEST_F(ObjectTableTest, CallbacksMayCallBackIntoTheTable) {
  Init(kMiB);
  int gets = 0;
  table_->set_on_sealed([&](const ObjectId& id) {
    auto loc = table_->Get(7, id);
    if (loc.ok()) ++gets;
  });
  std::vector<ObjectId> evicted;
  table_->set_on_evicted([&](const ObjectId& id) {
    evicted.push_back(id);
    EXPECT_FALSE(table_->Contains(id));
    // The Create that evicted has completed: "new" exists (unsealed yet).
    EXPECT_EQ(table_->Get(9, "new").status().code(), absl::StatusCode::kUnavailable);
  });
  Put(1, "a", 600 * kKiB, false);
  EXPECT_EQ(gets, 1);
  table_->DisconnectClient(7);
  Put(1, "new", 600 * kKiB);
  EXPECT_EQ(evicted, std::vector<ObjectId>{"a"});
  table_->DisconnectClient(7);
  ExpectCleanAfterDeleting({"new"});
}

// A store driven far past its size with a real shared-memory arena: everything spills
// and comes back byte for byte.
// --- Leases ----------------------------------------------------------------------

TEST_F(ObjectTableTest, LeasedPutIsSealedVisibleAndAnOrdinaryObject) {
  std::vector<ObjectId> sealed;
  Init(2 * kMiB);
  table_->set_on_sealed([&](const ObjectId& id) { sealed.push_back(id); });
  auto lease = table_->Lease(1, 100 * kKiB);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->size, 100 * kKiB);
  EXPECT_EQ(lease->offset % 64, 0u);
  EXPECT_EQ(table_->Stats().leased_bytes, 100 * kKiB);
  EXPECT_EQ(table_->Stats().objects, 0u);
  // The client writes metadata and data in place, then registers the object.
  const std::string meta = "tensor-header";
  std::memcpy(arena_->At(lease->offset), meta.data(), meta.size());
  Fill(arena_->At(lease->offset + 64), 1000, 5);
  const uint64_t sum = Checksum(arena_->At(lease->offset + 64), 1000);
  auto loc = table_->SealLeased(1, "a", lease->offset, 1000, meta.size());
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(loc->offset, lease->offset);
  EXPECT_EQ(loc->data_offset, 64u);
  EXPECT_EQ(sealed, std::vector<ObjectId>{"a"});
  EXPECT_TRUE(table_->Contains("a"));
  EXPECT_EQ(*table_->Metadata("a"), meta);
  TableStats s = table_->Stats();
  EXPECT_EQ(s.objects, 1u);
  EXPECT_EQ(s.sealed, 1u);
  EXPECT_EQ(s.referenced, 0u);
  EXPECT_EQ(s.leased_bytes, 100 * kKiB - 1088);  // 64 + 1000 rounded to 1088
  auto got = table_->Get(2, "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(Checksum(arena_->At(got->offset + got->data_offset), got->data_size), sum);
  ASSERT_TRUE(table_->Release(2, "a").ok());
  // Only its creator's lease could hold it; sealing is final.
  EXPECT_EQ(table_->Seal(1, "a").code(), absl::StatusCode::kFailedPrecondition);
  // The next put comes from the rest of the lease; a duplicate id frees its range.
  auto b = table_->SealLeased(1, "b", lease->offset + 1088, 64, 0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(table_->SealLeased(1, "a", lease->offset + 1152, 64, 0).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(table_->Stats().leased_bytes, 100 * kKiB - 1088 - 128);
  // Deleting an object carved from a lease frees exactly its block.
  // (The failed duplicate's 64 bytes were freed too.)
  ASSERT_TRUE(table_->Delete("a").ok());
  EXPECT_EQ(table_->Stats().used, 100 * kKiB - 1088 - 64);
  ASSERT_TRUE(table_->Delete("b").ok());
  table_->DisconnectClient(1);  // frees the rest of the lease
  ExpectCleanAfterDeleting({});
  EXPECT_EQ(table_->Stats().leased_bytes, 0u);
  EXPECT_EQ(table_->Stats().lease_pieces, 0u);
}

TEST_F(ObjectTableTest, LeasedPutOutsideOwnLeaseIsRejectedAndChangesNothing) {
  Init(4 * kMiB);
  auto mine = table_->Lease(1, 64 * kKiB);
  auto theirs = table_->Lease(2, 64 * kKiB);
  ASSERT_TRUE(mine.ok() && theirs.ok());
  auto ok = table_->Create(3, "plain", 1000, "");
  ASSERT_TRUE(ok.ok());
  const TableStats before = table_->Stats();
  auto expect_bad = [&](uint64_t off, uint64_t data, uint64_t meta) {
    auto r = table_->SealLeased(1, "x", off, data, meta);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << off << " " << data << " " << meta << ": " << r.status();
  };
  expect_bad(theirs->offset, 64, 0);             // another client's lease
  expect_bad(ok->offset, 64, 0);                 // an object's space
  expect_bad(mine->offset + 1, 64, 0);           // unaligned
  expect_bad(mine->offset, 64 * kKiB + 1, 0);    // runs past the end
  expect_bad(mine->offset + 64 * kKiB, 64, 0);   // just past the end
  expect_bad(~0ull - 63, 64, 0);                 // overflowing
  expect_bad(1ull << 40, 64, 0);                 // outside the arena
  expect_bad(mine->offset, 0, 0);                // empty
  expect_bad(mine->offset, ~0ull, 0);            // absurd sizes
  expect_bad(mine->offset, 64, ~0ull);
  expect_bad(mine->offset, ~0ull - 100, 200);
  EXPECT_EQ(table_->SealLeased(1, "", mine->offset, 64, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A range spanning two adjacent leases of the same client is not inside one lease.
  auto second = table_->Lease(1, 64 * kKiB);
  ASSERT_TRUE(second.ok());
  if (second->offset == mine->offset + mine->size) {
    expect_bad(second->offset - 64, 128, 0);
  }
  EXPECT_EQ(table_->ReturnLease(1, theirs->offset, 64).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->ReturnLease(1, mine->offset, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->ReturnLease(1, mine->offset, 100).code(), absl::StatusCode::kInvalidArgument);
  const TableStats after = table_->Stats();
  EXPECT_EQ(after.used, before.used + second->size);
  EXPECT_EQ(after.objects, before.objects);
  EXPECT_EQ(after.leased_bytes, before.leased_bytes + second->size);
  EXPECT_FALSE(table_->Contains("x"));
  // The leases still work.
  EXPECT_TRUE(table_->SealLeased(1, "x", mine->offset, 64, 0).ok());
  EXPECT_TRUE(table_->SealLeased(2, "y", theirs->offset + 128, 64, 0).ok());
}

TEST_F(ObjectTableTest, LeaseCarvesAnywhereAndReturnsPieces) {
  Init(kMiB);
  auto lease = table_->Lease(1, 64 * 10);
  ASSERT_TRUE(lease.ok());
  const uint64_t o = lease->offset;
  // Out of order (threads of one client finish their puts in any order).
  ASSERT_TRUE(table_->SealLeased(1, "m", o + 64 * 4, 64, 0).ok());
  ASSERT_TRUE(table_->SealLeased(1, "l", o, 64 * 2, 0).ok());
  ASSERT_TRUE(table_->SealLeased(1, "r", o + 64 * 8, 64 * 2, 0).ok());
  EXPECT_EQ(table_->Stats().leased_bytes, 64u * 5);  // [2,4) and [5,8)
  EXPECT_EQ(table_->Stats().lease_pieces, 2u);
  // Reused space: the middle object's block only.
  EXPECT_EQ(table_->SealLeased(1, "again", o + 64 * 4, 64, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(table_->ReturnLease(1, o + 64 * 5, 64 * 3).ok());
  ASSERT_TRUE(table_->ReturnLease(1, o + 64 * 2, 64).ok());
  EXPECT_EQ(table_->Stats().leased_bytes, 64u);
  EXPECT_EQ(table_->Stats().used, 64u * 6);
  table_->DisconnectClient(1);
  EXPECT_EQ(table_->Stats().used, 64u * 5);  // the three objects stay: they are sealed
  for (const char* id : {"l", "m", "r"}) ExpectIntactSize(id);
  ExpectCleanAfterDeleting({"l", "m", "r"});
}

TEST_F(ObjectTableTest, LeasesTakeOnlyFreeSpaceWithinLimits) {
  std::string dir = TmpDir("lease_spill");
  Init(kMiB, dir, 10 * kMiB);
  // Limits: capacity/16 per client, capacity/4 over all.
  EXPECT_TRUE(table_->Lease(1, 64 * kKiB).ok());
  EXPECT_EQ(table_->Lease(1, 1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(table_->Lease(1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->Lease(1, ~0ull).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(table_->Lease(2, 64 * kKiB).ok());
  EXPECT_TRUE(table_->Lease(3, 64 * kKiB).ok());
  EXPECT_TRUE(table_->Lease(4, 64 * kKiB).ok());
  auto over = table_->Lease(5, 64);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("all clients"), std::string::npos) << over.status();
  table_->DisconnectClient(4);
  // Free space only: a lease never spills an idle object to make room.
  Put(9, "big", 800 * kKiB);
  auto no_room = table_->Lease(4, 64 * kKiB);
  EXPECT_EQ(no_room.status().code(), absl::StatusCode::kResourceExhausted) << no_room.status();
  EXPECT_EQ(table_->Stats().spills, 0u);
  // Create does make room, and its error names what the leases hold.
  auto c = table_->Create(9, "c", 300 * kKiB, "");
  EXPECT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(table_->Stats().spills, 1u);
  auto none = table_->Create(9, "d", 600 * kKiB, "");
  ASSERT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("leased by 3 clients"), std::string::npos)
      << none.status();
  for (ClientId k : {1, 2, 3}) table_->DisconnectClient(k);
  ASSERT_TRUE(table_->Seal(9, "c").ok());
  ASSERT_TRUE(table_->Release(9, "c").ok());
  ExpectCleanAfterDeleting({"big", "c"});
  EXPECT_EQ(CountFiles(dir), 0);
}

TEST(ObjectTableSpillTest, DrivenPastItsSizeEveryObjectComesBackByteForByte) {
  auto arena = Arena::Create(kMiB);
  ASSERT_TRUE(arena.ok()) << arena.status();
  std::string dir = TmpDir("pastsize");
  TableOptions o;
  o.capacity = (*arena)->capacity();
  o.spill_dir = dir;
  o.spill_capacity = 64 * kMiB;
  ObjectTable table(o, arena->get());
  std::mt19937_64 rng(1234);
  struct Expect {
    uint64_t sum;
    std::string metadata;
  };
  std::map<ObjectId, Expect> objects;
  uint64_t total = 0;
  for (int i = 0; i < 300; ++i) {
    ObjectId id = absl::StrCat("obj-", i);
    uint64_t size = 1 + rng() % (120 * kKiB);
    std::string metadata(rng() % 200, '\0');
    for (char& ch : metadata) ch = static_cast<char>(rng());
    auto loc = table.Create(1, id, size, metadata, /*primary=*/true);
    ASSERT_TRUE(loc.ok()) << id << ": " << loc.status();
    char* data = (*arena)->At(loc->offset + loc->data_offset);
    Fill(data, size, i);
    objects[id] = {Checksum(data, size), metadata};
    ASSERT_TRUE(table.Seal(1, id).ok());
    ASSERT_TRUE(table.Release(1, id).ok());
    total += size;
  }
  TableStats s = table.Stats();
  EXPECT_GT(total, 15 * kMiB);
  EXPECT_GT(s.spills, 250u);
  EXPECT_GT(s.spilled_objects, 250u);
  EXPECT_EQ(CountFiles(dir), static_cast<int>(s.spilled_objects));
  // Read everything back twice, in random order, holding a few references at a time.
  std::vector<ObjectId> ids;
  for (auto& [id, e] : objects) ids.push_back(id);
  for (int round = 0; round < 2; ++round) {
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<ObjectId> held;
    for (const ObjectId& id : ids) {
      auto loc = table.Get(2, id);
      ASSERT_TRUE(loc.ok()) << id << ": " << loc.status();
      ASSERT_EQ(Checksum((*arena)->At(loc->offset + loc->data_offset), loc->data_size),
                objects[id].sum)
          << id;
      ASSERT_EQ(std::string((*arena)->At(loc->offset), loc->metadata_size), objects[id].metadata);
      ASSERT_EQ(*table.Metadata(id), objects[id].metadata);
      held.push_back(id);
      if (held.size() > 3) {
        ASSERT_TRUE(table.Release(2, held.front()).ok());
        held.erase(held.begin());
      }
    }
    for (auto& id : held) ASSERT_TRUE(table.Release(2, id).ok());
  }
  s = table.Stats();
  EXPECT_GT(s.restores, 400u);
  for (auto& id : ids) ASSERT_TRUE(table.Delete(id).ok());
  s = table.Stats();
  EXPECT_EQ(s.used, 0u);
  EXPECT_EQ(s.objects, 0u);
  EXPECT_EQ(s.spilled_objects, 0u);
  EXPECT_EQ(s.spilled_bytes, 0u);
  EXPECT_EQ(CountFiles(dir), 0);
}

// Random operations from several clients; invariants checked throughout: objects
// readers hold keep their bytes, nothing pinned moves, and cleanup leaves nothing.
TEST(ObjectTableRandomTest, RandomOperationsKeepInvariants) {
  const uint64_t capacity = 2 * kMiB;
  HeapArena arena(capacity);
  std::string dir = TmpDir("random");
  TableOptions o;
  o.capacity = capacity;
  o.spill_dir = dir;
  o.spill_capacity = 4 * kMiB;
  ObjectTable table(o, &arena);
  std::mt19937_64 rng(99);
  std::map<ObjectId, uint64_t> sums;                // sealed objects we wrote
  std::map<ObjectId, ClientId> unsealed;            // id -> creator
  std::map<std::pair<ClientId, ObjectId>, int> held;  // references we hold
  std::map<ObjectId, ObjectLocation> pinned_loc;
  std::set<ObjectId> deleted;
  int next_id = 0;
  auto check_held = [&] {
    for (auto& [key, n] : held) {
      const ObjectLocation& loc = pinned_loc[key.second];
      if (!sums.count(key.second)) continue;
      ASSERT_EQ(Checksum(arena.At(loc.offset + loc.data_offset), loc.data_size),
                sums[key.second])
          << key.second;
    }
  };
  for (int step = 0; step < 5000; ++step) {
    ClientId c = 1 + rng() % 4;
    int op = rng() % 100;
    if (op < 30) {
      ObjectId id = absl::StrCat("r", next_id++);
      uint64_t size = 1 + rng() % (150 * kKiB);
      auto loc = table.Create(c, id, size, "", rng() % 3 != 0);
      if (!loc.ok()) {
        ASSERT_EQ(loc.status().code(), absl::StatusCode::kResourceExhausted) << loc.status();
        continue;
      }
      Fill(arena.At(loc->offset + loc->data_offset), size, step);
      if (rng() % 5 == 0) {
        unsealed[id] = c;
        held[{c, id}] += 1;
        pinned_loc[id] = *loc;
        continue;
      }
      sums[id] = Checksum(arena.At(loc->offset + loc->data_offset), size);
      ASSERT_TRUE(table.Seal(c, id).ok());
      ASSERT_TRUE(table.Release(c, id).ok());
    } else if (op < 55 && !sums.empty()) {
      auto it = sums.begin();
      std::advance(it, rng() % sums.size());
      auto loc = table.Get(c, it->first);
      if (deleted.count(it->first) || !loc.ok()) {
        if (!loc.ok()) {
          ASSERT_TRUE(loc.status().code() == absl::StatusCode::kNotFound ||
                      loc.status().code() == absl::StatusCode::kResourceExhausted)
              << loc.status();
        }
        // Evicted secondary copies are gone: forget them.
        if (loc.status().code() == absl::StatusCode::kNotFound) sums.erase(it);
        continue;
      }
      ASSERT_EQ(Checksum(arena.At(loc->offset + loc->data_offset), loc->data_size), it->second);
      held[{c, it->first}] += 1;
      pinned_loc[it->first] = *loc;
    } else if (op < 80 && !held.empty()) {
      auto it = held.begin();
      std::advance(it, rng() % held.size());
      ASSERT_TRUE(table.Release(it->first.first, it->first.second).ok());
      if (--it->second == 0) held.erase(it);
    } else if (op < 88 && !unsealed.empty()) {
      auto it = unsealed.begin();
      std::advance(it, rng() % unsealed.size());
      const ObjectLocation& loc = pinned_loc[it->first];
      sums[it->first] = Checksum(arena.At(loc.offset + loc.data_offset), loc.data_size);
      ASSERT_TRUE(table.Seal(it->second, it->first).ok());
      unsealed.erase(it);
    } else if (op < 95 && !sums.empty()) {
      auto it = sums.begin();
      std::advance(it, rng() % sums.size());
      absl::Status st = table.Delete(it->first);
      ASSERT_TRUE(st.ok() || st.code() == absl::StatusCode::kNotFound) << st;
      deleted.insert(it->first);
      bool still_held = false;
      for (auto& [key, n] : held) still_held |= key.second == it->first;
      if (!still_held) sums.erase(it);
    } else if (op < 97) {
      std::vector<ObjectId> aborted = table.DisconnectClient(c);
      for (auto& id : aborted) {
        ASSERT_EQ(unsealed.count(id), 1u);
        ASSERT_EQ(unsealed[id], c);
        unsealed.erase(id);
      }
      for (auto it = unsealed.begin(); it != unsealed.end(); ++it) ASSERT_NE(it->second, c);
      for (auto it = held.begin(); it != held.end();) {
        it = it->first.first == c ? held.erase(it) : std::next(it);
      }
    }
    if (step % 50 == 0) check_held();
    TableStats s = table.Stats();
    ASSERT_LE(s.used, capacity);
    ASSERT_LE(s.spilled_bytes, o.spill_capacity);
  }
  check_held();
  for (ClientId c = 1; c <= 4; ++c) table.DisconnectClient(c);
  for (int i = 0; i < next_id; ++i) (void)table.Delete(absl::StrCat("r", i));
  TableStats s = table.Stats();
  EXPECT_GT(s.spills, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(s.restores, 0u);
  EXPECT_EQ(s.used, 0u);
  EXPECT_EQ(s.objects, 0u);
  EXPECT_EQ(s.referenced, 0u);
  EXPECT_EQ(s.spilled_objects, 0u);
  EXPECT_EQ(CountFiles(dir), 0);
}

TEST(ObjectTableCleanupTest, DestructorRemovesSpillFiles) {
  HeapArena arena(kMiB);
  std::string dir = TmpDir("dtor");
  {
    TableOptions o;
    o.capacity = kMiB;
    o.spill_dir = dir;
    o.spill_capacity = 10 * kMiB;
    ObjectTable table(o, &arena);
    for (int i = 0; i < 5; ++i) {
      ObjectId id = absl::StrCat("x", i);
      ASSERT_TRUE(table.Create(1, id, 400 * kKiB, "").ok());
      ASSERT_TRUE(table.Seal(1, id).ok());
      ASSERT_TRUE(table.Release(1, id).ok());
    }
    EXPECT_EQ(CountFiles(dir), 3);
  }
  EXPECT_EQ(CountFiles(dir), 0);
}

}  // namespace
}  // namespace drover::object_store
