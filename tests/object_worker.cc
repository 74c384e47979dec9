// A worker for tests/object_store_cluster_test.cc, run by drover as a 2-process job
// on two nodes. Rank 0 puts a float32 tensor (deterministic contents) and its
// checksum; rank 1, on the other node, gets both (the tensor is pulled across nodes
// by its agent) and checks the shape, dtype and every byte. Exit 0 on success.
//
// With --late-put-ms N (on one node or two): rank 1 announces that it is about to
// wait (object ID.waiting) and Gets ID; rank 0 waits for the announcement, then N ms
// more, and only then puts ID. Both print when (Unix microseconds, one host's clock):
// "late-put ID put_us T" once the put returned, "late-get ID started_us T0
// returned_us T1" for the Get.
//
//   object_worker --id ID [--mib 32] [--timeout-s 60] [--late-put-ms N]
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "drover/objects.h"
#include "drover/tensor.h"
#include "sdk/internal/objects_internal.h"

namespace {

int Fail(const std::string& msg) {
  std::cerr << "object_worker: " << msg << std::endl;
  return 1;
}

// FNV-1a over the bytes, 8 at a time.
uint64_t Checksum(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int64_t NowUs() { return absl::ToUnixMicros(absl::Now()); }

// --late-put-ms: see the file comment.
int LatePut(drover::Objects& objects, int rank, const std::string& id, int64_t late_put_ms,
            absl::Duration timeout) {
  const std::string waiting_id = id + ".waiting";
  const std::string contents = "late object " + id;
  if (rank == 0) {
    if (auto w = objects.Get(waiting_id, timeout); !w.ok()) {
      return Fail(absl::StrCat("Get ", waiting_id, ": ", w.status().ToString()));
    }
    // The point of the test, not a synchronization: the getter has been waiting this
    // long when the object is put.
    absl::SleepFor(absl::Milliseconds(late_put_ms));
    if (auto s = objects.Put(id, contents); !s.ok())
      return Fail(absl::StrCat("Put: ", s.ToString()));
    std::cout << "late-put " << id << " put_us " << NowUs() << std::endl;
    return 0;
  }
  if (rank != 1) return Fail(absl::StrCat("unexpected RANK ", rank));
  // Read before the announcement: rank 0 may see it, wait and put before this rank runs
  // again after its own put returns (the put is then < N ms after a later reading).
  const int64_t started_us = NowUs();
  if (auto s = objects.Put(waiting_id, "1"); !s.ok()) {
    return Fail(absl::StrCat("Put ", waiting_id, ": ", s.ToString()));
  }
  auto got = objects.Get(id, timeout);
  const int64_t returned_us = NowUs();
  if (!got.ok()) return Fail(absl::StrCat("Get ", id, ": ", got.status().ToString()));
  if (got->view() != contents) return Fail(absl::StrCat("wrong contents: ", got->view()));
  std::cout << "late-get " << id << " started_us " << started_us << " returned_us " << returned_us
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string id;
  int64_t mib = 32;
  int64_t timeout_s = 60;
  int64_t late_put_ms = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--id") {
      id = argv[i + 1];
    } else if (flag == "--mib" && absl::SimpleAtoi(argv[i + 1], &mib) && mib > 0) {
    } else if (flag == "--timeout-s" && absl::SimpleAtoi(argv[i + 1], &timeout_s)) {
    } else if (flag == "--late-put-ms" && absl::SimpleAtoi(argv[i + 1], &late_put_ms) &&
               late_put_ms > 0) {
    } else {
      return Fail(absl::StrCat("bad argument ", flag));
    }
  }
  if (id.empty()) return Fail("--id is required");
  const char* rank_env = std::getenv("RANK");
  int rank = rank_env ? std::atoi(rank_env) : -1;

  auto objects = drover::Objects::FromEnvironment();
  if (!objects.ok()) return Fail(std::string(objects.status().message()));
  if (late_put_ms > 0) return LatePut(**objects, rank, id, late_put_ms, absl::Seconds(timeout_s));

  const int64_t cols = 1024;
  const int64_t rows = mib * (1 << 20) / (4 * cols);
  const std::string sum_id = id + ".sum";
  if (rank == 0) {
    auto tensor = drover::Tensor::Empty(drover::DType::kFloat32, {rows, cols});
    if (!tensor.ok()) return Fail(tensor.status().ToString());
    absl::Span<float> data = *tensor->mutable_span<float>();
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i % 65521) * 0.5f;
    const size_t bytes = tensor->nbytes();
    uint64_t sum = Checksum(reinterpret_cast<const uint8_t*>(data.data()), bytes);
    if (auto s = (*objects)->PutTensor(id, *tensor); !s.ok()) {
      return Fail(absl::StrCat("PutTensor: ", s.ToString()));
    }
    if (auto s = (*objects)->Put(sum_id, absl::StrCat(sum)); !s.ok()) {
      return Fail(absl::StrCat("Put checksum: ", s.ToString()));
    }
    std::cout << "put " << id << " " << bytes << " bytes checksum " << sum << std::endl;
    return 0;
  }
  if (rank != 1) return Fail(absl::StrCat("unexpected RANK ", rank));
  if (*drover::internal::ObjectsAccess::Store(**objects).Contains(id)) {
    return Fail("the tensor is already on this node");
  }
  absl::Time t0 = absl::Now();
  auto tensor = (*objects)->GetTensor(id, absl::Seconds(timeout_s));
  if (!tensor.ok()) return Fail(absl::StrCat("GetTensor: ", tensor.status().ToString()));
  absl::Duration took = absl::Now() - t0;
  auto sum_ref = (*objects)->Get(sum_id, absl::Seconds(timeout_s));
  if (!sum_ref.ok()) return Fail(absl::StrCat("Get checksum: ", sum_ref.status().ToString()));
  uint64_t want = 0;
  const std::string sum_text(sum_ref->view());
  if (!absl::SimpleAtoi(sum_text, &want)) return Fail("bad checksum object: " + sum_text);
  if (tensor->dtype() != drover::DType::kFloat32 ||
      tensor->shape() != std::vector<int64_t>{rows, cols}) {
    return Fail(absl::StrCat("wrong tensor: ", tensor->Describe()));
  }
  if (!tensor->in_store()) return Fail("the tensor is not read in place from the store");
  auto data = tensor->span<float>();
  if (!data.ok()) return Fail(data.status().ToString());
  if (reinterpret_cast<uintptr_t>(data->data()) % 64 != 0) return Fail("data not 64-aligned");
  uint64_t got = Checksum(reinterpret_cast<const uint8_t*>(data->data()), tensor->nbytes());
  if (got != want) return Fail(absl::StrCat("checksum ", got, " != ", want));
  if (data->back() != static_cast<float>((rows * cols - 1) % 65521) * 0.5f) {
    return Fail("last element is wrong");
  }
  std::cout << "got " << id << " " << tensor->nbytes() << " bytes checksum " << got << " in "
            << absl::FormatDuration(took) << std::endl;
  return 0;
}
