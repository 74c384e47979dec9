// drover-gpucheck: the GPU paths of drover, exercised by scripts/gpu_check.sh on a
// machine with a GPU (and, where they apply, against the stand-in NVML and CUDA here).
// Each subcommand does one thing and prints `KEY value...` lines the script reads:
//
//   info                  which CUDA runtime and NCCL were loaded, and the devices seen;
//                         exit 0 with a device, 3 without (the script's SKIP)
//   probe                 CUDA_VISIBLE_DEVICES, the device count and the devices' UUIDs
//                         as a CUDA call in this process sees them (run as a job)
//   tasks                 as its own driver: a task with gpus=1 probes as above; then a
//                         DataLoader with pin_memory feeds CopyToDevice (device 0 of
//                         this process), bytes checked on the device's copy
//   copier BYTES          in a job: a device buffer put into the store through the CUDA
//                         copier, read back into device memory by a child process,
//                         bytes compared; both copies timed beside plain cudaMemcpy
//                         through cudaMallocHost memory
//   copier-get ID BYTES   the child of `copier`
//   nccl                  in a job of one rank per GPU: CollectiveGroup over NCCL,
//                         allreduce of 1 Mi and 16 Mi floats, results exact
//   nccl-kill DIR         in a job of >= 2 ranks: rank 1 SIGKILLs itself inside an
//                         allreduce; the others write DIR/rankN.txt with how their
//                         allreduce ended and after how long
//
// It is a drover task program (DROVER_REMOTE below): the agents run this binary as its
// workers, so Init is called first for `tasks` and in workers only.
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "drover/drover.h"
#include "gpu/cuda_copier.h"
#include "gpu/cuda_library.h"
#include "gpu/gpu_runtime.h"
#include "object_store/client.h"
#include "object_store/device_copier.h"
#include "object_store/object_id.h"

namespace {

using drover::Env;
using drover::gpu::CudaApi;

std::string UuidString(const cudaUUID_t& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  return absl::StrFormat("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                         b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                         b[12], b[13], b[14], b[15]);
}

// "cvd=0 count=1 uuids=GPU-..." as this process sees its devices.
std::string Probe() {
  std::string out = absl::StrCat("cvd=", Env("CUDA_VISIBLE_DEVICES").empty()
                                             ? std::string("(empty)")
                                             : Env("CUDA_VISIBLE_DEVICES"));
  auto rt = drover::NewCudaRuntime();
  absl::StatusOr<int> n = rt->DeviceCount();
  if (!n.ok()) return absl::StrCat(out, " count=0 error=", n.status().message());
  absl::StrAppend(&out, " count=", *n);
  const CudaApi* cu = *drover::gpu::LoadCudaRuntime();
  std::vector<std::string> uuids, names;
  for (int d = 0; d < *n; ++d) {
    // cudaDeviceProp is CUDA 13's layout: the runtime loaded must be 13.x (it is the
    // same major as the headers drover was built with, or the call is refused).
    auto prop = std::make_unique<cudaDeviceProp>();
    cudaError_t e = cu->cudaGetDeviceProperties(prop.get(), d);
    if (e != cudaSuccess) {
      uuids.push_back(absl::StrCat("unavailable(", cu->cudaGetErrorName(e), ")"));
      continue;
    }
    uuids.push_back(UuidString(prop->uuid));
    names.push_back(prop->name);
  }
  absl::StrAppend(&out, " uuids=", absl::StrJoin(uuids, ","), " names=",
                  absl::StrJoin(names, ","));
  return out;
}

std::string ProbeTask(int) { return Probe(); }

// Item i of the loader: 256 Ki floats (1 MiB), element j = i * 1e6 + j (exact in float
// up to 2^24, so items stay below 16).
absl::StatusOr<drover::Tensor> MakeItem(int64_t index, uint64_t) {
  const int64_t n = 256 * 1024;
  absl::StatusOr<drover::Tensor> t = drover::Tensor::Empty(drover::DType::kFloat32, {n});
  if (!t.ok()) return t.status();
  absl::StatusOr<float*> p = t->mutable_data<float>();
  if (!p.ok()) return p.status();
  for (int64_t j = 0; j < n; ++j) (*p)[j] = static_cast<float>(index * 1000000 + j);
  return t;
}

DROVER_REMOTE(ProbeTask, MakeItem);

// Deterministic bytes: both processes of the copier check make the same.
void Pattern(uint8_t* p, size_t bytes, uint64_t seed) {
  uint64_t x = seed;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(p + i, &z, 8);
  }
  for (; i < bytes; ++i) p[i] = static_cast<uint8_t>(i);
}

double Gbps(size_t bytes, int reps, absl::Duration d) {
  return static_cast<double>(bytes) * reps / absl::ToDoubleSeconds(d) / 1e9;
}

int Reps(size_t bytes) { return bytes <= (8u << 20) ? 50 : 3; }

int Info() {
  std::printf("INFO cuda %s\n", drover::gpu::DescribeCudaRuntime().c_str());
  std::printf("INFO nccl %s\n", drover::gpu::DescribeNccl().c_str());
  auto rt = drover::NewCudaRuntime();
  absl::StatusOr<int> n = rt->DeviceCount();
  std::printf("INFO devices %s\n",
              n.ok() ? absl::StrCat(*n).c_str() : std::string(n.status().message()).c_str());
  std::printf("INFO copier %s\n", drover::object_store::ProcessDeviceCopier()->Describe().c_str());
  return n.ok() ? 0 : 3;
}

int Tasks(int argc, char** argv) {
  absl::Status init = drover::Init(argc, argv);
  if (!init.ok()) {
    std::printf("TASK error %s\n", init.ToString().c_str());
    return 1;
  }
  int rc = 0;
  auto ref = drover::Task(ProbeTask).SetResources({.cpus = 1, .gpus = 1}).Remote(0);
  absl::StatusOr<std::string> probe = drover::Get(ref, absl::Seconds(60));
  if (probe.ok()) {
    std::printf("TASK %s\n", probe->c_str());
  } else {
    std::printf("TASK error %s\n", probe.status().ToString().c_str());
    rc = 1;
  }
  std::fflush(stdout);

  // The driver is a plain process: it sees the machine's GPUs (device 0).
  drover::object_store::DeviceCopier* copier = drover::object_store::ProcessDeviceCopier();
  std::printf("LOADER copier %s\n", copier->Describe().c_str());
  if (!copier->HasDevice()) {
    std::printf("LOADER skip no device in this process\n");
    return rc;
  }
  auto rt = drover::NewCudaRuntime();
  const size_t bytes = 256 * 1024 * sizeof(float);
  absl::StatusOr<void*> dev = rt->Allocate(0, bytes);
  if (!dev.ok()) {
    std::printf("LOADER error %s\n", dev.status().ToString().c_str());
    return 1;
  }
  drover::LoaderOptions o{.num_workers = 2, .prefetch = 2, .name = "gpucheck", .pin_memory = true};
  o.progress = drover::LoaderOptions::Progress::kOff;
  auto loader = drover::DataLoader<drover::Tensor>::Create(drover::IndexRange{0, 8}, MakeItem, o);
  if (!loader.ok()) {
    std::printf("LOADER error %s\n", loader.status().ToString().c_str());
    return 1;
  }
  int items = 0, exact = 0, in_store = 0;
  std::string first_error;
  std::vector<float> back(256 * 1024);
  for (int64_t i = 0;; ++i) {
    absl::StatusOr<drover::Tensor> t = loader->Next();
    if (!t.ok()) {
      if (t.status().code() != absl::StatusCode::kOutOfRange && first_error.empty()) {
        first_error = t.status().ToString();
      }
      break;
    }
    ++items;
    in_store += t->in_store() ? 1 : 0;
    absl::Status s = drover::CopyToDevice(*t, 0, *dev);
    if (s.ok()) s = rt->CopyToHost(0, back.data(), *dev, bytes);
    if (!s.ok()) {
      if (first_error.empty()) first_error = s.ToString();
      continue;
    }
    bool same = true;
    for (size_t j = 0; j < back.size(); ++j) {
      same = same && back[j] == static_cast<float>(i * 1000000 + static_cast<int64_t>(j));
    }
    exact += same ? 1 : 0;
  }
  (void)rt->Free(0, *dev);
  std::printf("LOADER items=%d in_store=%d exact=%d error=%s\n", items, in_store, exact,
              first_error.empty() ? "none" : first_error.c_str());
  return rc != 0 || items != 8 || exact != 8 ? 1 : 0;
}

struct Gpu {
  std::unique_ptr<drover::GpuRuntime> rt = drover::NewCudaRuntime();
  const CudaApi* cu = nullptr;
};

absl::Status Ok(const Gpu& g, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", g.cu->cudaGetErrorName(e)));
}

// Plain cudaMemcpy through cudaMallocHost memory, the baseline: GB/s D2H and H2D.
absl::Status Baseline(Gpu& g, void* dev, size_t bytes, double* d2h, double* h2d) {
  void* pinned = nullptr;
  if (absl::Status s = Ok(g, g.cu->cudaMallocHost(&pinned, bytes), "cudaMallocHost"); !s.ok()) {
    return s;
  }
  std::memset(pinned, 1, bytes);
  const int reps = Reps(bytes);
  absl::Status s = Ok(g, g.cu->cudaMemcpy(pinned, dev, bytes, cudaMemcpyDeviceToHost), "warm-up");
  absl::Time t0 = absl::Now();
  for (int r = 0; r < reps && s.ok(); ++r) {
    s = Ok(g, g.cu->cudaMemcpy(pinned, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }
  *d2h = Gbps(bytes, reps, absl::Now() - t0);
  t0 = absl::Now();
  for (int r = 0; r < reps && s.ok(); ++r) {
    s = Ok(g, g.cu->cudaMemcpy(dev, pinned, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  *h2d = Gbps(bytes, reps, absl::Now() - t0);
  g.cu->cudaFreeHost(pinned);
  return s;
}

int Fail(const char* tag, const absl::Status& s) {
  std::printf("%s error %s\n", tag, s.ToString().c_str());
  return 1;
}

// The arena, page-locked as the DataLoader does (the whole mapping, once per process).
absl::Status RegisterArena(drover::object_store::DeviceCopier* copier,
                           drover::object_store::Client* client) {
  return copier->RegisterHostMemory(const_cast<uint8_t*>(client->arena_base()),
                                    client->arena_capacity());
}

int CopierGet(const std::string& id_hex, size_t bytes) {
  Gpu g;
  absl::StatusOr<int> n = g.rt->DeviceCount();
  if (!n.ok()) return Fail("GET", n.status());
  g.cu = *drover::gpu::LoadCudaRuntime();
  auto client = drover::object_store::Client::Connect(Env("DROVER_OBJECT_STORE_SOCKET"));
  if (!client.ok()) return Fail("GET", client.status());
  auto ref = (*client)->Get(id_hex, absl::Seconds(30));
  if (!ref.ok()) return Fail("GET", ref.status());
  if (ref->data().size() != bytes) {
    return Fail("GET", absl::InternalError(absl::StrCat("object has ", ref->data().size(), " bytes")));
  }
  drover::object_store::DeviceCopier* copier = drover::object_store::ProcessDeviceCopier();
  absl::Status reg = RegisterArena(copier, client->get());
  absl::StatusOr<void*> dev = g.rt->Allocate(0, bytes);
  if (!dev.ok()) return Fail("GET", dev.status());
  drover::object_store::DeviceBuffer buf{0, *dev};
  absl::Status s = copier->FromHost(ref->data().data(), &buf, bytes);  // warm-up
  const int reps = Reps(bytes);
  absl::Time t0 = absl::Now();
  for (int r = 0; r < reps && s.ok(); ++r) s = copier->FromHost(ref->data().data(), &buf, bytes);
  const double gbps = Gbps(bytes, reps, absl::Now() - t0);
  if (!s.ok()) return Fail("GET", s);
  std::vector<uint8_t> want(bytes), got(bytes);
  Pattern(want.data(), bytes, 42);
  if (absl::Status c = g.rt->CopyToHost(0, got.data(), *dev, bytes); !c.ok()) return Fail("GET", c);
  const bool exact = want == got;
  std::printf("GET bytes=%zu exact=%s get_gbps=%.2f registered=%s\n", bytes, exact ? "yes" : "no",
              gbps, reg.ok() ? "yes" : std::string(reg.message()).c_str());
  (void)g.rt->Free(0, *dev);
  return exact ? 0 : 1;
}

int Copier(size_t bytes) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return Fail("PUT", absl::InternalError("readlink /proc/self/exe failed"));
  self[len] = '\0';
  Gpu g;
  absl::StatusOr<int> n = g.rt->DeviceCount();
  if (!n.ok()) return Fail("PUT", n.status());
  g.cu = *drover::gpu::LoadCudaRuntime();
  auto client = drover::object_store::Client::Connect(Env("DROVER_OBJECT_STORE_SOCKET"));
  if (!client.ok()) return Fail("PUT", client.status());
  std::vector<uint8_t> host(bytes);
  Pattern(host.data(), bytes, 42);
  absl::StatusOr<void*> dev = g.rt->Allocate(0, bytes);
  if (!dev.ok()) return Fail("PUT", dev.status());
  if (absl::Status s = g.rt->CopyToDevice(0, *dev, host.data(), bytes); !s.ok()) {
    return Fail("PUT", s);
  }
  drover::object_store::DeviceCopier* copier = drover::object_store::ProcessDeviceCopier();
  absl::Status reg = RegisterArena(copier, client->get());
  const drover::object_store::ObjectId id = drover::object_store::Client::RandomId();
  auto obj = (*client)->Create(id, bytes);
  if (!obj.ok()) return Fail("PUT", obj.status());
  drover::object_store::DeviceBuffer src{0, *dev};
  absl::Status s = copier->ToHost(src, obj->data.data(), bytes);  // warm-up
  const int reps = Reps(bytes);
  absl::Time t0 = absl::Now();
  for (int r = 0; r < reps && s.ok(); ++r) s = copier->ToHost(src, obj->data.data(), bytes);
  const double put_gbps = Gbps(bytes, reps, absl::Now() - t0);
  if (!s.ok()) return Fail("PUT", s);
  if (absl::Status sealed = (*client)->Seal(id); !sealed.ok()) return Fail("PUT", sealed);
  double d2h = 0, h2d = 0;
  if (absl::Status b = Baseline(g, *dev, bytes, &d2h, &h2d); !b.ok()) return Fail("PUT", b);
  std::printf("PUT bytes=%zu put_gbps=%.2f pinned_d2h_gbps=%.2f pinned_h2d_gbps=%.2f arena_mib=%llu "
              "registered=%s\n",
              bytes, put_gbps, d2h, h2d,
              static_cast<unsigned long long>((*client)->arena_capacity() >> 20),
              reg.ok() ? "yes" : std::string(reg.message()).c_str());
  std::fflush(stdout);
  (void)g.rt->Free(0, *dev);
  // The reader: another process (this binary), given the object's id.
  const std::string cmd = absl::StrCat("'", self, "' copier-get ", id, " ", bytes);
  return std::system(cmd.c_str()) == 0 ? 0 : 1;
}

absl::StatusOr<std::unique_ptr<drover::CollectiveGroup>> NcclGroup(const std::string& name) {
  absl::StatusOr<drover::CollectiveOptions> o = drover::CollectiveOptions::FromEnvironment(name);
  if (!o.ok()) return o.status();
  o->backend = drover::CollectiveOptions::Backend::kNccl;
  o->device = 0;  // each rank sees its own GPU as device 0
  o->timeout = absl::Seconds(60);
  return drover::CollectiveGroup::Create(*o);
}

int Nccl() {
  std::printf("NCCL library %s\n", drover::gpu::DescribeNccl().c_str());
  auto group = NcclGroup("gpucheck");
  if (!group.ok()) return Fail("NCCL", group.status());
  Gpu g;
  const int rank = (*group)->rank(), size = (*group)->size();
  bool exact = true;
  std::string detail;
  for (size_t count : {size_t{1} << 20, size_t{16} << 20}) {
    absl::StatusOr<void*> dev = g.rt->Allocate(0, count * sizeof(float));
    if (!dev.ok()) return Fail("NCCL", dev.status());
    float* p = static_cast<float*>(*dev);
    if (absl::Status s = g.rt->Fill(0, p, count, static_cast<float>(rank + 1)); !s.ok()) {
      return Fail("NCCL", s);
    }
    absl::Time t0 = absl::Now();
    absl::Status s = (*group)->AllReduce(p, count, drover::DType::kFloat32, drover::ReduceOp::kSum);
    const absl::Duration took = absl::Now() - t0;
    if (!s.ok()) return Fail("NCCL", s);
    std::vector<float> back(count);
    if (absl::Status c = g.rt->CopyToHost(0, back.data(), p, count * sizeof(float)); !c.ok()) {
      return Fail("NCCL", c);
    }
    const float want = static_cast<float>(size * (size + 1) / 2);
    size_t bad = 0;
    for (float v : back) bad += v == want ? 0 : 1;
    exact = exact && bad == 0;
    absl::StrAppend(&detail, " count=", count, ":", bad == 0 ? "exact" : absl::StrCat(bad, "_wrong"),
                    ":", absl::ToInt64Milliseconds(took), "ms");
    (void)g.rt->Free(0, p);
  }
  std::printf("NCCL rank=%d size=%d exact=%s%s\n", rank, size, exact ? "yes" : "no", detail.c_str());
  return exact ? 0 : 1;
}

void WriteReport(const std::string& dir, int rank, const std::string& text) {
  const std::string tmp = absl::StrCat(dir, "/.rank", rank);
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), absl::StrCat(dir, "/rank", rank, ".txt").c_str());
}

int NcclKill(const std::string& dir) {
  auto group = NcclGroup("gpucheck-kill");
  if (!group.ok()) return Fail("KILL", group.status());
  Gpu g;
  const int rank = (*group)->rank();
  const size_t count = size_t{64} << 20;  // 256 MiB: long enough to die inside it
  absl::StatusOr<void*> dev = g.rt->Allocate(0, count * sizeof(float));
  if (!dev.ok()) return Fail("KILL", dev.status());
  std::atomic<bool> inside{false};
  for (int i = 0;; ++i) {
    if (rank == 1 && i == 3) {
      std::thread([&] {
        while (!inside.load()) std::this_thread::yield();
        absl::SleepFor(absl::Milliseconds(2));
        WriteReport(dir, rank, absl::StrCat("killed_at_ms=", absl::ToUnixMillis(absl::Now()), "\n"));
        raise(SIGKILL);
      }).detach();
    }
    inside.store(true);
    const absl::Time start = absl::Now();
    absl::Status s =
        (*group)->AllReduce(*dev, count, drover::DType::kFloat32, drover::ReduceOp::kSum);
    inside.store(false);
    if (s.ok()) continue;
    const absl::Time now = absl::Now();
    WriteReport(dir, rank,
                absl::StrCat("code=", absl::StatusCodeToString(s.code()), "\nfailed_at_ms=",
                             absl::ToUnixMillis(now), "\nwaited_ms=",
                             absl::ToInt64Milliseconds(now - start), "\nmessage=", s.message(), "\n"));
    return 3;
  }
}

int Usage() {
  std::fprintf(stderr,
               "usage: drover-gpucheck info | probe | tasks | copier BYTES | "
               "copier-get ID BYTES | nccl | nccl-kill DIR\n"
               "  (scripts/gpu_check.sh runs these; see docs/gpu.md)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // A worker the agent started: serve tasks (never returns).
  if (drover::RunningAsWorker()) {
    absl::Status s = drover::Init(argc, argv);
    std::fprintf(stderr, "drover-gpucheck worker: %s\n", s.ToString().c_str());
    return 1;
  }
  if (argc < 2) return Usage();
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h") {
    Usage();
    return 0;
  }
  if (cmd == "info") return Info();
  if (cmd == "probe") {
    std::printf("PROBE %s\n", Probe().c_str());
    return 0;
  }
  if (cmd == "tasks") return Tasks(argc, argv);
  size_t bytes = 0;
  if (cmd == "copier" && argc == 3 && absl::SimpleAtoi(argv[2], &bytes)) {
    return Copier(bytes);
  }
  if (cmd == "copier-get" && argc == 4 && absl::SimpleAtoi(argv[3], &bytes)) {
    return CopierGet(argv[2], bytes);
  }
  if (cmd == "nccl") return Nccl();
  if (cmd == "nccl-kill" && argc == 3) return NcclKill(argv[2]);
  return Usage();
}
