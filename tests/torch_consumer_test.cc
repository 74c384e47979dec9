// The Python module (//python:drover) on a real 2-node cluster: tests/torch_consumer.py,
// a PyTorch process run by /usr/bin/python3, reads what tests/torch_feeder_program (C++)
// writes: a queue item whose tensors are views of the writer's pages (checked through
// both processes' /proc/self/maps, and writes crossing a SharedTensor both ways), a
// DataLoader of C++ workers matching a serial run, an object of another cluster
// refused at once, answers put back by Python, a queue that outlives its producer's
// work, and the module's API reference.
#include <dirent.h>
#include <stdlib.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "gtest/gtest.h"
#include "tests/util/driver_program.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

// Entries of /dev/shm, but collective groups' segments of other tests running meanwhile.
std::set<std::string> ShmEntries() {
  std::set<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != ".." && !absl::StartsWith(name, "drover-coll-")) out.insert(name);
    }
    ::closedir(d);
  }
  return out;
}

class TorchConsumerTest : public TwoNodeClusterTest {
 protected:
  void SetUp() override {
    const std::string module = Runfile("python/drover.so");
    ::setenv("PYTHONPATH", module.substr(0, module.rfind('/')).c_str(), 1);
  }
  std::vector<std::string> Script(std::vector<std::string> args) {
    args.insert(args.begin(), Runfile("tests/torch_consumer.py"));
    return args;
  }
};

TEST_F(TorchConsumerTest, AQueueItemsTensorsShareTheWritersPages) {
  const std::set<std::string> shm_before = ShmEntries();
  const std::string base = cluster_->dir() + "/feeder";
  const pid_t feeder = StartDriver(*cluster_, "tests/torch_feeder_program", {"feed", "torch-feed"}, base);
  DriverRun py = RunDriver(*cluster_, kPython, Script({"feed", "torch-feed"}));
  DriverRun cc = FinishDriver(*cluster_, feeder, base, absl::Seconds(60));
  ASSERT_EQ(py.code, 0) << py.All() << cc.All();
  ASSERT_EQ(cc.code, 0) << cc.All() << py.All();
  EXPECT_EQ(py.Get("keys"), "sealed,sealed_id,sealed_mapping,shared,shared_mapping,small");
  EXPECT_EQ(py.Get("rest"), "[]");
  EXPECT_EQ(py.Get("get_after_close"), "OUT_OF_RANGE");
  EXPECT_EQ(py.Get("sealed"), "torch.float32[256, 256]");
  EXPECT_EQ(py.Get("sealed_values_ok"), "True");
  // The same file and offset as the writer's pages; read-only here, and a write faults.
  EXPECT_EQ(py.Get("sealed_same_pages"), "True") << py.All();
  EXPECT_TRUE(absl::EndsWith(py.Get("sealed_mapping"), ":r--s")) << py.Get("sealed_mapping");
  EXPECT_EQ(py.Get("sealed_write_faults"), "True");
  EXPECT_EQ(py.Get("by_id_same_pages"), "True");
  EXPECT_EQ(py.Get("small"), "[1, 2, 3]");
  // The SharedTensor: the writer's pages, writable, and writes cross both ways.
  EXPECT_EQ(py.Get("shared_same_pages"), "True") << py.All();
  EXPECT_TRUE(absl::EndsWith(py.Get("shared_mapping"), ":rw-s")) << py.Get("shared_mapping");
  EXPECT_EQ(py.Get("shared_first"), "1.0");
  EXPECT_EQ(py.Get("pingpong"), "ok");
  EXPECT_EQ(cc.Get("pingpong"), "ok");
  // The consumer owned the item's object: gone with its last view. Nothing in /dev/shm.
  EXPECT_EQ(py.Get("freed"), "True");
  EXPECT_EQ(py.Get("shm_mapped"), "none");
  EXPECT_EQ(ShmEntries(), shm_before);
}

TEST_F(TorchConsumerTest, ALoaderOfCppWorkersGivesTheBatchesOfASerialRun) {
  constexpr int kItems = 24;
  DriverRun serial = RunDriver(*cluster_, "tests/torch_feeder_program", {"serial", "5", std::to_string(kItems)});
  ASSERT_EQ(serial.code, 0) << serial.All();
  DriverRun py = RunDriver(*cluster_, kPython,
                           Script({"loader", Runfile("tests/torch_feeder_program"), "5", std::to_string(kItems)}));
  ASSERT_EQ(py.code, 0) << py.All();
  EXPECT_EQ(py.Get("len"), std::to_string(kItems));
  // 256 KiB results: store objects, viewed read-only.
  EXPECT_EQ(py.Get("first"), "torch.int32[64, 1024] r--s");
  for (int i = 0; i < kItems; ++i) {
    const std::string key = absl::StrCat("item_", i);
    EXPECT_EQ(py.Get(key), serial.Get(key)) << key;
  }
  EXPECT_EQ(py.Get("again_equal"), "True");
  EXPECT_EQ(py.Get("unordered_same_set"), "True");
  // (0*1 + 1*2), (2*3 + 3*4), (4*5); (3 + 4), (5 + 6), (7).
  EXPECT_EQ(py.Get("batched_pairs"), "[2, 18, 20]");
  EXPECT_EQ(py.Get("batched_range"), "[7, 11, 7]");
  const std::string unknown = py.Get("unknown_function");
  EXPECT_TRUE(absl::StrContains(unknown, "NoSuchFunction is not a registered function")) << unknown;
}

TEST_F(TorchConsumerTest, AnObjectOfAnotherClusterIsAClearErrorAtOnce) {
  TestClusterOptions o;
  o.nodes = 1;
  o.cpus_per_node = 2;
  auto other = TestCluster::Start(o);
  ASSERT_TRUE(other.ok()) << other.status();
  const std::set<std::string> shm_before = ShmEntries();
  const std::string base = (*other)->dir() + "/putter";
  const std::string release = (*other)->dir() + "/release";
  const pid_t putter = StartDriver(**other, "tests/torch_feeder_program", {"put_and_wait", release}, base);
  std::string id;
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string out = ReadFile(base + ".out").value_or("");
        const size_t at = out.find("object_id=");
        if (at == std::string::npos || out.find('\n', at) == std::string::npos) return false;
        id = out.substr(at + 10, out.find('\n', at) - at - 10);
        return true;
      },
      absl::Seconds(60)))
      << ReadFile(base + ".err").value_or("");
  DriverRun py = RunDriver(*cluster_, kPython, Script({"other_cluster", id}), absl::Seconds(60));
  ASSERT_TRUE(WriteFileAtomic(release, "").ok());
  DriverRun put = FinishDriver(**other, putter, base, absl::Seconds(30));
  EXPECT_EQ(put.code, 0) << put.All();
  ASSERT_EQ(py.code, 0) << py.All();
  EXPECT_EQ(py.Get("code"), "NOT_FOUND");
  const std::string error = py.Get("error");
  EXPECT_TRUE(absl::StrContains(error, "object " + id + " belongs to job ")) << error;
  EXPECT_TRUE(absl::StrContains(error, "has never run: it is another cluster's")) << error;
  double seconds = 99;
  ASSERT_TRUE(absl::SimpleAtod(py.Get("seconds"), &seconds));
  EXPECT_LT(seconds, 5) << "asked with a 60 s timeout: the answer must not wait for it";
  EXPECT_EQ(py.Get("objects_after"), py.Get("objects_before"));
  EXPECT_EQ(py.Get("shm_mapped"), "none");
  EXPECT_EQ(ShmEntries(), shm_before);
}

// The Python side answers: a consumer puts a value per item (tensors the C++ producer
// reads in place in the store), closes the answers' queue (ending the producer's loop),
// and round-trips values through drover.put/get.
TEST_F(TorchConsumerTest, APythonConsumerPutsAnswersAndClosesTheQueue) {
  const std::string base = cluster_->dir() + "/answer";
  const pid_t producer = StartDriver(*cluster_, "tests/torch_feeder_program", {"answer", "torch-work", "4"}, base);
  DriverRun py = RunDriver(*cluster_, kPython, Script({"answer", "torch-work"}));
  DriverRun cc = FinishDriver(*cluster_, producer, base, absl::Seconds(120));
  ASSERT_EQ(py.code, 0) << py.All() << cc.All();
  ASSERT_EQ(cc.code, 0) << cc.All() << py.All();
  EXPECT_EQ(py.Get("taken"), "4");
  EXPECT_EQ(cc.Get("answers"), "4") << cc.All();
  EXPECT_EQ(cc.Get("answers_ok"), "true");
  EXPECT_EQ(cc.Get("answers_in_store"), "true");
  EXPECT_EQ(cc.Get("answers_end"), "OUT_OF_RANGE");  // the consumer's close ended it
  const std::string bad = py.Get("bad_put");
  EXPECT_TRUE(absl::StrContains(bad, "element ['bad'] is a object")) << bad;
  EXPECT_EQ(py.Get("put_after_close"), "FAILED_PRECONDITION");
  EXPECT_EQ(py.Get("put_get"), "True") << py.All();
  EXPECT_EQ(py.Get("put_get_store_view"), "r--s");  // read-only view of the store object
  EXPECT_EQ(py.Get("ref_id_job"), "True");
  EXPECT_TRUE(absl::StrContains(py.Get("bad_dtype"), "dtype complex64")) << py.Get("bad_dtype");
}

// A producer that returns from main before its consumer started: the queue (created
// with keep_until_drained) and its items outlive the producer's work; the consumer gets
// every item, and the producer's process ends once they are taken.
TEST_F(TorchConsumerTest, AProducerThatFinishedFirstStillDeliversEveryItem) {
  constexpr int kItems = 6;
  const std::string base = cluster_->dir() + "/drain";
  const pid_t producer =
      StartDriver(*cluster_, "tests/torch_feeder_program", {"drain", "torch-drain", std::to_string(kItems)}, base);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(ReadFile(base + ".out").value_or(""), "main_done=1"); },
                      absl::Seconds(120)))
      << ReadFile(base + ".err").value_or("");
  DriverRun py = RunDriver(*cluster_, kPython, Script({"drain", "torch-drain", std::to_string(kItems)}));
  DriverRun cc = FinishDriver(*cluster_, producer, base, absl::Seconds(120));
  ASSERT_EQ(py.code, 0) << py.All() << cc.All();
  EXPECT_EQ(py.Get("count"), std::to_string(kItems)) << py.All();
  EXPECT_EQ(py.Get("indices"), "True");
  EXPECT_EQ(py.Get("values_ok"), "True");
  EXPECT_EQ(cc.code, 0) << cc.All();
}

// The API reference ships with the module: every public name documented, help()
// readable, and the type stub installed beside drover.so and covering every name.
TEST_F(TorchConsumerTest, TheModuleCarriesItsApiReference) {
  DriverRun py = RunDriver(*cluster_, kPython, Script({"reference"}));
  ASSERT_EQ(py.code, 0) << py.All();
  EXPECT_EQ(py.Get("help_has_put"), "True");
  EXPECT_EQ(py.Get("undocumented"), "none");
  EXPECT_EQ(py.Get("stub_beside_module"), "True");
  EXPECT_EQ(py.Get("stub_missing"), "none");
}

}  // namespace
}  // namespace drover::testing
