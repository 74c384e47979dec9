#include "scheduler/object_directory.h"

#include "gtest/gtest.h"

namespace drover {
namespace {

std::vector<std::string> Nodes(const ObjectDirectory& d, const std::string& id) {
  std::vector<std::string> out;
  for (const auto& h : d.Holders(id)) out.push_back(h.node_id);
  return out;
}

TEST(ObjectDirectoryTest, AddIsIdempotentAndListsHoldersInNodeOrder) {
  ObjectDirectory d;
  d.Add("node-2", "obj-a", 100);
  d.Add("node-1", "obj-a", 100);
  d.Add("node-1", "obj-a", 100);  // retried report
  EXPECT_EQ(Nodes(d, "obj-a"), (std::vector<std::string>{"node-1", "node-2"}));
  EXPECT_EQ(d.size(), 2);
  EXPECT_EQ(d.objects(), 1);
  d.Add("node-1", "obj-a", 120);  // a re-add replaces the size
  EXPECT_EQ(d.Holders("obj-a")[0].size, 120);
  EXPECT_EQ(d.size(), 2);
}

TEST(ObjectDirectoryTest, WithPrefixListsEveryCopyOfTheMatchingObjectsOnly) {
  ObjectDirectory d;
  d.Add("node-1", "job-a.1", 10);
  d.Add("node-2", "job-a.1", 10);
  d.Add("node-1", "job-a.2", 10);
  d.Add("node-1", "job-ab.1", 10);  // shares the text, not the prefix with its dot
  d.Add("node-2", "job-b.1", 10);
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(d.WithPrefix("job-a."),
            (std::vector<P>{{"node-1", "job-a.1"}, {"node-2", "job-a.1"}, {"node-1", "job-a.2"}}));
  EXPECT_TRUE(d.WithPrefix("job-c.").empty());
}

TEST(ObjectDirectoryTest, UnknownObjectHasNoHolders) {
  ObjectDirectory d;
  EXPECT_TRUE(d.Holders("nope").empty());
  d.Remove("node-1", "nope");  // not an error
  EXPECT_EQ(d.RemoveNode("node-9"), 0);
  EXPECT_EQ(d.size(), 0);
}

TEST(ObjectDirectoryTest, RemoveIsIdempotentAndDropsEmptyObjects) {
  ObjectDirectory d;
  d.Add("node-1", "obj-a", 1);
  d.Add("node-2", "obj-a", 1);
  d.Remove("node-1", "obj-a");
  d.Remove("node-1", "obj-a");
  EXPECT_EQ(Nodes(d, "obj-a"), (std::vector<std::string>{"node-2"}));
  d.Remove("node-2", "obj-a");
  EXPECT_TRUE(d.Holders("obj-a").empty());
  EXPECT_EQ(d.objects(), 0);
  EXPECT_EQ(d.size(), 0);
}

TEST(ObjectDirectoryTest, RemoveNodeDropsOnlyThatNodesCopies) {
  ObjectDirectory d;
  d.Add("node-1", "obj-a", 1);
  d.Add("node-1", "obj-b", 2);
  d.Add("node-2", "obj-b", 2);
  EXPECT_EQ(d.RemoveNode("node-1"), 2);
  EXPECT_TRUE(d.Holders("obj-a").empty());
  EXPECT_EQ(Nodes(d, "obj-b"), (std::vector<std::string>{"node-2"}));
  EXPECT_EQ(d.size(), 1);
  EXPECT_EQ(d.RemoveNode("node-1"), 0);
  // The node may come back and report again.
  d.Add("node-1", "obj-a", 1);
  EXPECT_EQ(Nodes(d, "obj-a"), (std::vector<std::string>{"node-1"}));
}

TEST(ObjectDirectoryTest, BinaryIdsAreKeptExactly) {
  ObjectDirectory d;
  std::string id("\x00\x01\xff", 3);
  d.Add("node-1", id, 5);
  EXPECT_EQ(Nodes(d, id).size(), 1u);
  EXPECT_TRUE(d.Holders(std::string("\x00\x01", 2)).empty());
}

}  // namespace
}  // namespace drover
