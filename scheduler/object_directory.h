// ObjectDirectory: which node's object store holds a sealed copy of which object, as
// reported by the agents (AddObjectLocations / RemoveObjectLocations). The scheduler
// answers GetObjectLocations from it so that an agent can pull an object it lacks.
//
// In memory only: a scheduler restart empties it (agents report new copies as they
// make them). Node health is not its business: SchedulerCore drops a node's entries
// when it declares the node dead and filters out non-ALIVE nodes on reads.
//
// Thread safety: NOT thread-safe. SchedulerCore owns one and guards it with its own
// mutex (the directory is small bookkeeping next to the node table it must agree
// with, so one lock keeps "node dead" and "its objects gone" atomic).
#ifndef DROVER_SCHEDULER_OBJECT_DIRECTORY_H_
#define DROVER_SCHEDULER_OBJECT_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace drover {

class ObjectDirectory {
 public:
  struct Holder {
    std::string node_id;
    int64_t size = 0;
  };

  // Records that `node_id` holds `object_id` (`size` bytes of data). Adding again
  // replaces the size.
  void Add(const std::string& node_id, const std::string& object_id, int64_t size);
  // Forgets one copy; no-op if unknown.
  void Remove(const std::string& node_id, const std::string& object_id);
  // Forgets every copy on `node_id` (the node died). Returns how many were dropped.
  int RemoveNode(const std::string& node_id);
  // Every node holding `object_id`, in node id order; empty if none.
  std::vector<Holder> Holders(const std::string& object_id) const;
  // Every (node, object) whose object id starts with `prefix`.
  std::vector<std::pair<std::string, std::string>> WithPrefix(const std::string& prefix) const;

  // Number of (object, node) entries.
  int64_t size() const { return entries_; }
  // Number of distinct objects with at least one copy.
  int64_t objects() const { return static_cast<int64_t>(by_object_.size()); }

 private:
  // object id -> node id -> size.
  std::map<std::string, std::map<std::string, int64_t>> by_object_;
  // node id -> object ids it holds (so a node's death costs O(its objects)).
  std::map<std::string, std::set<std::string>> by_node_;
  int64_t entries_ = 0;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_OBJECT_DIRECTORY_H_
