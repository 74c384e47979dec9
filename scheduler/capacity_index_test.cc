// CapacityIndex against PlaceGang: the same answer (ranks and reason) on tables that
// change between placements (use, nodes joining and leaving, a reader far behind).
#include "scheduler/capacity_index.h"

#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

std::string Describe(const PlacementResult& r) {
  std::string out = r.ok ? "ok:" : absl::StrCat("no: ", r.reason);
  for (const auto& p : r.ranks) absl::StrAppend(&out, " ", p.ShortDebugString());
  return out;
}

class CapacityIndexTest : public ::testing::Test {
 protected:
  // A node of `cpus` CPUs, `gpus` GPUs, 64 GiB and, on every third, 2 of "disk".
  void AddNode(int i, double cpus, int gpus) {
    proto::Resources r;
    r.set_cpus(cpus);
    r.set_gpus(gpus);
    r.set_memory_bytes(int64_t{64} << 30);
    if (i % 3 == 0) (*r.mutable_custom())["disk"] = 2;
    std::vector<int> ids;
    for (int g = 0; g < gpus; ++g) ids.push_back(g);
    const std::string id = absl::StrCat("n", i);
    table_.Set(id, absl::StrCat("10.0.0.", i), r, ids, i);
    table_.SetAlive(id, true);
    ids_.push_back(id);
  }

  // Places `spec` with `index` and with PlaceGang; both must agree. Records the
  // placement as used (as the scheduler does), returning whether it was placed.
  bool PlaceBoth(CapacityIndex& index, const proto::JobSpec& spec) {
    PlacementResult fast = index.Place(spec, table_);
    PlacementResult scan = PlaceGang(spec, table_.Free());
    EXPECT_EQ(Describe(fast), Describe(scan)) << spec.ShortDebugString();
    EXPECT_EQ(index.Fits(spec, table_), scan.ok);
    if (!scan.ok) return false;
    for (const auto& p : scan.ranks) {
      table_.Use(p.node_id(), spec.per_process(),
                 std::vector<int>(p.gpu_ids().begin(), p.gpu_ids().end()), +1);
      placed_.push_back({p.node_id(), spec.per_process(),
                         std::vector<int>(p.gpu_ids().begin(), p.gpu_ids().end())});
    }
    return true;
  }

  // Gives back a random earlier placement's rank.
  void FreeOne(std::mt19937& rng) {
    if (placed_.empty()) return;
    const size_t i = rng() % placed_.size();
    table_.Use(placed_[i].node, placed_[i].per, placed_[i].gpus, -1);
    placed_.erase(placed_.begin() + static_cast<long>(i));
  }

  struct Placed {
    std::string node;
    proto::Resources per;
    std::vector<int> gpus;
  };
  NodeTable table_;
  std::vector<std::string> ids_;
  std::vector<Placed> placed_;
};

proto::JobSpec Spec(int nproc, int ppn, double cpus, int gpus, proto::PlacementStrategy s,
                    double disk = 0) {
  proto::JobSpec spec;
  spec.add_command("x");
  spec.set_nproc(nproc);
  spec.set_nproc_per_node(ppn);
  spec.set_strategy(s);
  spec.mutable_per_process()->set_cpus(cpus);
  spec.mutable_per_process()->set_gpus(gpus);
  if (disk > 0) (*spec.mutable_per_process()->mutable_custom())["disk"] = disk;
  return spec;
}

// An index for each of `shapes`.
std::vector<std::unique_ptr<CapacityIndex>> IndexesFor(const std::vector<proto::JobSpec>& shapes) {
  std::vector<std::unique_ptr<CapacityIndex>> indexes;
  for (const auto& s : shapes) {
    indexes.push_back(std::make_unique<CapacityIndex>(s.per_process(), s.nproc_per_node()));
  }
  return indexes;
}

TEST_F(CapacityIndexTest, PlacesAsPlaceGangWhileTheTableChanges) {
  std::mt19937 rng(7);
  for (int i = 0; i < 40; ++i) AddNode(i, 4 + i % 5, i % 4 == 0 ? 2 : 0);
  const std::vector<proto::JobSpec> shapes = {
      Spec(1, 0, 1, 0, proto::PACK),  Spec(6, 0, 1, 0, proto::PACK),
      Spec(3, 0, 2, 0, proto::SPREAD), Spec(4, 2, 1, 0, proto::PACK),
      Spec(2, 0, 1, 1, proto::PACK),  Spec(2, 2, 0.5, 0, proto::PACK, 1),
      Spec(30, 0, 1, 0, proto::PACK), Spec(1, 0, 16, 0, proto::PACK)};
  std::vector<std::unique_ptr<CapacityIndex>> indexes = IndexesFor(shapes);
  int placed = 0, refused = 0;
  for (int step = 0; step < 3000; ++step) {
    const size_t k = rng() % shapes.size();
    if (PlaceBoth(*indexes[k], shapes[k])) {
      ++placed;
    } else {
      ++refused;
    }
    for (int f = rng() % 3; f > 0; --f) FreeOne(rng);
    if (step % 500 == 250) {
      // A node leaves and another joins: the views are rebuilt, the indexes read again.
      table_.SetAlive(ids_[rng() % ids_.size()], false);
      AddNode(static_cast<int>(ids_.size()), 8, 0);
    }
  }
  // Both outcomes were exercised, so the reasons were compared too.
  EXPECT_GT(placed, 100);
  EXPECT_GT(refused, 100);
}

TEST_F(CapacityIndexTest, PlacesAsPlaceGangBesideAClaim) {
  std::mt19937 rng(11);
  for (int i = 0; i < 30; ++i) AddNode(i, 2 + i % 7, i % 3 == 0 ? 4 : 0);
  const std::vector<proto::JobSpec> shapes = {
      Spec(1, 0, 1, 0, proto::PACK), Spec(5, 0, 1, 0, proto::PACK),
      Spec(4, 0, 1, 0, proto::SPREAD), Spec(6, 3, 1, 0, proto::PACK),
      Spec(2, 0, 1, 2, proto::PACK), Spec(40, 0, 1, 0, proto::PACK)};
  std::vector<std::unique_ptr<CapacityIndex>> indexes = IndexesFor(shapes);
  int placed = 0, refused = 0;
  for (int step = 0; step < 2000; ++step) {
    // A claim on a few nodes: some CPUs (maybe more than is free) and GPUs of each.
    std::vector<NodeCapacity> claimed;
    claimed.reserve(4);
    CapacityIndex::Overrides overrides;
    std::vector<const NodeCapacity*> view;
    for (const NodeCapacity& n : table_.Free()) view.push_back(&n);
    for (int k = 1 + rng() % 3; k > 0; --k) {
      const std::string& id = ids_[rng() % ids_.size()];
      const int i = table_.ViewIndex(id);
      bool seen = false;
      for (const auto& o : overrides) seen = seen || o.first == i;
      if (i < 0 || seen) continue;
      proto::Resources r;
      r.set_cpus(rng() % 6);
      std::set<int> gpus = {static_cast<int>(rng() % 4)};
      claimed.push_back(CapacityOf(*table_.Find(id), /*free=*/true, &r, &gpus));
      overrides.emplace_back(i, &claimed.back());
      view[i] = &claimed.back();
    }
    std::sort(overrides.begin(), overrides.end());
    const size_t k = rng() % shapes.size();
    PlacementResult fast = indexes[k]->Place(shapes[k], table_, overrides);
    PlacementResult scan = PlaceGang(shapes[k], view);
    ASSERT_EQ(Describe(fast), Describe(scan)) << shapes[k].ShortDebugString();
    EXPECT_EQ(indexes[k]->Fits(shapes[k], table_, overrides), scan.ok);
    scan.ok ? ++placed : ++refused;
    // The table moves on with placements on what is free.
    const size_t m = rng() % 2;
    PlaceBoth(*indexes[m], shapes[m]);
    for (int f = rng() % 3; f > 0; --f) FreeOne(rng);
  }
  EXPECT_GT(placed, 100);
  EXPECT_GT(refused, 100);
}

TEST_F(CapacityIndexTest, AReaderFarBehindReadsEveryNodeAgain) {
  for (int i = 0; i < 4; ++i) AddNode(i, 8, 0);
  const proto::JobSpec one = Spec(1, 0, 1, 0, proto::PACK);
  CapacityIndex index(one.per_process(), 0);
  ASSERT_TRUE(PlaceBoth(index, one));
  // Far more changes than the log keeps, none of them read by the index.
  for (int i = 0; i < 5000; ++i) table_.Use("n2", one.per_process(), {}, i % 2 ? -1 : +1);
  table_.Use("n2", one.per_process(), {}, +1);
  EXPECT_TRUE(PlaceBoth(index, Spec(1, 0, 1, 0, proto::PACK)));
  EXPECT_FALSE(PlaceBoth(index, Spec(30, 0, 1, 0, proto::PACK)));
}

TEST_F(CapacityIndexTest, NoNodesSaysSo) {
  const proto::JobSpec one = Spec(1, 0, 1, 0, proto::PACK);
  CapacityIndex index(one.per_process(), 0);
  PlacementResult r = index.Place(one, table_);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.reason, kNoNodesAlive);
  EXPECT_FALSE(index.Fits(one, table_));
}

}  // namespace
}  // namespace drover
