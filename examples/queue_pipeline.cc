// Producers and consumers on different nodes connected by a bounded drover::Queue: the
// torch.multiprocessing.Queue pattern across a cluster. Each producer (a task, one per
// node) writes frames straight into its node's store (drover::AllocateInStore) and puts
// them; each consumer (a task on the other node) takes frames as they come, checks
// them and lets them go. The queue holds at most --capacity frames, so the memory in
// use stays bounded however many frames flow: every consumer samples its node's store
// while it runs and reports the peak, beside the bytes that went through.
//
//   bazel build //examples:queue_pipeline
//   drover up --nodes 2
//   bazel-bin/examples/queue_pipeline --frames 64 --frame-kib 1024 --capacity 4
//
// Prints per consumer `consumer <node>: <n> frames, store peak <bytes>`, then
// `frames=`, `checksum=` (every frame's sum, which the producers' own equals),
// `streamed_bytes=`, `store_peak_bytes=` (the largest of any node) and
// `bounded=yes|no` (the peak is within twice the capacity plus what producers and
// consumers hold: a bound that does not grow with the stream).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "drover/drover.h"

// A frame: `n` floats, all the value frame * 1000 + producer.
double FrameValue(int64_t producer, int64_t frame) { return static_cast<double>(frame * 1000 + producer); }

// Puts `frames` frames of `n` floats; returns the sum of everything it put.
absl::StatusOr<double> Produce(drover::Queue<drover::Tensor> q, int64_t producer, int64_t frames, int64_t n) {
  double sum = 0;
  for (int64_t f = 0; f < frames; ++f) {
    absl::StatusOr<drover::Tensor> t = drover::AllocateInStore(drover::DType::kFloat32, {n});
    if (!t.ok()) return t.status();
    absl::Span<float> v = *t->mutable_span<float>();
    std::fill(v.begin(), v.end(), static_cast<float>(FrameValue(producer, f)));
    sum += FrameValue(producer, f) * static_cast<double>(n);
    if (absl::Status s = q.Put(*t); !s.ok()) return s;
  }
  return sum;
}

struct Consumed {
  int64_t frames = 0;
  double sum = 0;
  uint64_t store_peak = 0;
  std::string node;
  MSGPACK_DEFINE(frames, sum, store_peak, node)
};

// Takes frames until the queue is closed and drained.
absl::StatusOr<Consumed> Consume(drover::Queue<drover::Tensor> q) {
  Consumed c;
  c.node = drover::NodeId();
  for (;;) {
    absl::StatusOr<drover::Tensor> t = q.Get();
    if (absl::IsOutOfRange(t.status())) return c;
    if (!t.ok()) return t.status();
    for (float x : *t->span<float>()) c.sum += x;
    ++c.frames;
    absl::StatusOr<drover::StoreUsage> u = drover::NodeStoreUsage();
    if (u.ok()) c.store_peak = std::max(c.store_peak, u->used);
  }
}

DROVER_REMOTE(Produce, Consume);

int main(int argc, char** argv) {
  if (absl::Status s = drover::Init(argc, argv); !s.ok()) {
    std::cerr << "drover::Init: " << s << "\n";
    return 1;
  }
  int64_t frames = 64, frame_kib = 1024, capacity = 4;
  CLI::App app{"queue_pipeline: producers and consumers on different nodes through a bounded queue"};
  app.add_option("--frames", frames, "frames per producer")->check(CLI::PositiveNumber);
  app.add_option("--frame-kib", frame_kib, "KiB per frame")->check(CLI::PositiveNumber);
  app.add_option("--capacity", capacity, "frames the queue holds at most")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  // The cluster's live nodes (the same cluster Init found).
  std::vector<std::string> nodes;
  absl::StatusOr<drover::ClusterAddress> where = drover::ResolveCluster("", "");
  absl::StatusOr<std::unique_ptr<drover::Client>> client =
      where.ok() ? drover::Client::Connect(*where) : absl::StatusOr<std::unique_ptr<drover::Client>>(where.status());
  absl::StatusOr<drover::ClusterStatus> cluster =
      client.ok() ? (*client)->Status() : absl::StatusOr<drover::ClusterStatus>(client.status());
  if (cluster.ok()) {
    for (const drover::NodeInfo& node : cluster->nodes) {
      if (node.state == drover::NodeState::kAlive) nodes.push_back(node.node_id);
    }
  }
  if (nodes.empty()) nodes.push_back(drover::NodeId());
  const int64_t n = frame_kib * 1024 / 4;
  drover::QueueOptions options;
  options.capacity = static_cast<uint64_t>(capacity);
  absl::StatusOr<drover::Queue<drover::Tensor>> q = drover::Queue<drover::Tensor>::Create(options);
  if (!q.ok()) {
    std::cerr << "Queue::Create: " << q.status() << "\n";
    return 1;
  }
  // A producer on each node, and its consumer on the next node.
  std::vector<drover::ObjectRef<double>> producers;
  std::vector<drover::ObjectRef<Consumed>> consumers;
  for (size_t i = 0; i < nodes.size(); ++i) {
    producers.push_back(drover::Task(Produce).SetNodeAffinity(nodes[i]).Remote(*q, static_cast<int64_t>(i), frames, n));
    consumers.push_back(drover::Task(Consume).SetNodeAffinity(nodes[(i + 1) % nodes.size()]).Remote(*q));
  }
  double produced = 0;
  for (auto& p : producers) {
    absl::StatusOr<double> s = drover::Get(p);
    if (!s.ok()) {
      std::cerr << "a producer failed: " << s.status() << "\n";
      return 1;
    }
    produced += *s;
  }
  if (absl::Status s = q->Close(); !s.ok()) std::cerr << "Close: " << s << "\n";
  int64_t got = 0;
  double sum = 0;
  uint64_t peak = 0;
  for (auto& c : consumers) {
    absl::StatusOr<Consumed> r = drover::Get(c);
    if (!r.ok()) {
      std::cerr << "a consumer failed: " << r.status() << "\n";
      return 1;
    }
    std::printf("consumer %s: %lld frames, store peak %llu\n", r->node.c_str(), static_cast<long long>(r->frames),
                static_cast<unsigned long long>(r->store_peak));
    got += r->frames;
    sum += r->sum;
    peak = std::max(peak, r->store_peak);
  }
  const uint64_t frame_bytes = static_cast<uint64_t>(n) * 4;
  const uint64_t streamed = static_cast<uint64_t>(got) * frame_bytes;
  // Queued frames, one each producer is writing and each consumer holds, on one node at
  // most; twice that, since a consumer frees a frame made on another node through that
  // node's agent, asynchronously. Independent of how many frames stream through.
  const uint64_t bound = 2 * (static_cast<uint64_t>(capacity) + 2 * nodes.size() + 1) * frame_bytes;
  std::printf("frames=%lld\nchecksum=%s\nstreamed_bytes=%llu\nstore_peak_bytes=%llu\nbounded=%s\n",
              static_cast<long long>(got), sum == produced ? "match" : "MISMATCH",
              static_cast<unsigned long long>(streamed), static_cast<unsigned long long>(peak),
              peak <= bound ? "yes" : "no");
  q->Destroy().IgnoreError();
  return got == frames * static_cast<int64_t>(nodes.size()) && sum == produced && peak <= bound ? 0 : 1;
}
