#include "object_store/object_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "object_store/allocator.h"

namespace drover::object_store {
namespace {

std::string Bytes(uint64_t n) {
  if (n >= (1ull << 30)) return absl::StrFormat("%.1f GiB", n / 1073741824.0);
  if (n >= (1ull << 20)) return absl::StrFormat("%.1f MiB", n / 1048576.0);
  if (n >= (1ull << 10)) return absl::StrFormat("%.1f KiB", n / 1024.0);
  return absl::StrCat(n, " B");
}

// Ids are usually hex already; anything else is shown escaped so a log line stays one
// line of text.
std::string ShowId(const ObjectId& id) {
  return absl::StrCat("'", absl::CHexEscape(id), "'");
}

absl::Status WriteAll(int fd, const char* p, uint64_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<uint64_t>(n, 1 << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      return absl::InternalError(absl::StrCat("write ", path, ": ", std::strerror(errno)));
    }
    p += w;
    n -= w;
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* p, uint64_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min<uint64_t>(n, 1 << 30), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::InternalError(absl::StrCat("read ", path, ": ", std::strerror(errno)));
    }
    if (r == 0) return absl::DataLossError(absl::StrCat(path, " is shorter than expected"));
    p += r;
    n -= r;
    offset += r;
  }
  return absl::OkStatus();
}

}  // namespace

struct ObjectTable::Impl {
  enum class Lru { kNone, kSecondary, kPrimary };

  struct Object {
    ObjectId id;
    ObjectLocation loc;
    uint64_t block_size = 0;  // bytes allocated (loc.offset is valid unless spilled)
    ClientId creator = 0;
    bool primary = true;
    bool sealed = false;
    bool spilled = false;
    bool delete_pending = false;
    std::unordered_map<ClientId, uint64_t> refs;
    uint64_t total_refs = 0;
    uint64_t lru_tick = 0;
    Lru lru = Lru::kNone;

    uint64_t file_size() const { return loc.metadata_size + loc.data_size; }
    // Never evicted, spilled or freed while pinned: a reader holds it, or its creator
    // may still be writing it.
    bool pinned() const { return total_refs > 0 || !sealed; }
    bool visible() const { return sealed && !delete_pending; }
  };

  Impl(TableOptions o, ArenaIo* a) : options(std::move(o)), arena(a), alloc(options.capacity) {
    if (options.max_client_lease == 0) options.max_client_lease = alloc.capacity() / 16;
    if (options.max_total_lease == 0) options.max_total_lease = alloc.capacity() / 4;
  }

  // One leased range: an allocator block of its own, owned by a client.
  struct LeasePiece {
    ClientId client = 0;
    uint64_t size = 0;
  };
  struct ClientLeases {
    uint64_t bytes = 0;
    std::set<uint64_t> offsets;
  };

  TableOptions options;
  ArenaIo* arena;
  Allocator alloc;
  std::unordered_map<ObjectId, std::unique_ptr<Object>> objects;
  // Unpinned, sealed, in-memory objects by last use (Get/Seal), oldest first.
  std::map<uint64_t, Object*> lru_secondary;
  std::map<uint64_t, Object*> lru_primary;
  uint64_t lru_secondary_bytes = 0;
  uint64_t lru_primary_bytes = 0;
  uint64_t tick = 0;
  // Ids each client references, or created and has not sealed yet.
  std::unordered_map<ClientId, std::unordered_set<ObjectId>> by_client;
  uint64_t in_memory = 0;
  uint64_t sealed_in_memory = 0;
  uint64_t referenced = 0;
  uint64_t spilled_objects = 0;
  uint64_t spilled_bytes = 0;
  uint64_t evictions = 0;
  uint64_t spills = 0;
  uint64_t restores = 0;
  // Leased ranges by offset, and by client.
  std::map<uint64_t, LeasePiece> leases;
  std::unordered_map<ClientId, ClientLeases> leases_by_client;
  uint64_t leased_bytes = 0;
  bool spill_dir_ready = false;
  std::function<void(const ObjectId&)> on_sealed;
  std::function<void(const ObjectId&)> on_evicted;
  // Evicted ids whose callbacks run once the public call has finished its changes.
  std::vector<ObjectId> evicted_pending;

  Object* Find(const ObjectId& id) const {
    auto it = objects.find(id);
    return it == objects.end() ? nullptr : it->second.get();
  }

  void UnLru(Object* o) {
    if (o->lru == Lru::kSecondary) {
      lru_secondary.erase(o->lru_tick);
      lru_secondary_bytes -= o->block_size;
    } else if (o->lru == Lru::kPrimary) {
      lru_primary.erase(o->lru_tick);
      lru_primary_bytes -= o->block_size;
    }
    o->lru = Lru::kNone;
  }

  // Puts the object on the list it belongs to now (or none).
  void UpdateLru(Object* o) {
    UnLru(o);
    if (o->spilled || o->pinned() || o->delete_pending) return;
    if (o->primary) {
      lru_primary.emplace(o->lru_tick, o);
      lru_primary_bytes += o->block_size;
      o->lru = Lru::kPrimary;
    } else {
      lru_secondary.emplace(o->lru_tick, o);
      lru_secondary_bytes += o->block_size;
      o->lru = Lru::kSecondary;
    }
  }

  void Touch(Object* o) {
    UnLru(o);  // the lists are keyed by the old tick
    o->lru_tick = ++tick;
    UpdateLru(o);
  }

  void Unindex(Object* o, ClientId client) {
    if (o->refs.count(client) || (!o->sealed && o->creator == client)) return;
    auto it = by_client.find(client);
    if (it == by_client.end()) return;
    it->second.erase(o->id);
    if (it->second.empty()) by_client.erase(it);
  }

  void FreeMemory(Object* o) {
    UnLru(o);
    if (!alloc.Free(o->loc.offset)) {
      DROVER_LOG(ERROR) << "object table: allocator refused to free object " << ShowId(o->id)
                        << " at offset " << o->loc.offset << " (bookkeeping bug)";
    }
    --in_memory;
    if (o->sealed) --sealed_in_memory;
  }

  // Removes the object entirely (memory or spill file, indexes, the entry).
  void Erase(Object* o) {
    if (o->spilled) {
      ::unlink(SpillPath(o->id).c_str());
      spilled_bytes -= o->file_size();
      --spilled_objects;
    } else {
      FreeMemory(o);
    }
    if (o->total_refs > 0) --referenced;
    std::vector<ClientId> clients = {o->creator};
    for (auto& [c, n] : o->refs) clients.push_back(c);
    for (ClientId c : clients) {
      auto it = by_client.find(c);
      if (it == by_client.end()) continue;
      it->second.erase(o->id);
      if (it->second.empty()) by_client.erase(it);
    }
    objects.erase(o->id);
  }

  std::string SpillPath(const ObjectId& id) const {
    return absl::StrCat(options.spill_dir, "/", absl::BytesToHexString(id));
  }

  uint64_t SpillFree() const {
    return options.spill_capacity > spilled_bytes ? options.spill_capacity - spilled_bytes : 0;
  }

  absl::Status Spill(Object* o) {
    if (!spill_dir_ready) {
      absl::Status st = MakeDirs(options.spill_dir, 0700);
      if (!st.ok()) return st;
      spill_dir_ready = true;
    }
    std::string path = SpillPath(o->id);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("create ", path, ": ", std::strerror(errno)));
    }
    const char* base = arena->At(o->loc.offset);
    absl::Status st = WriteAll(fd, base, o->loc.metadata_size, path);
    if (st.ok()) st = WriteAll(fd, base + o->loc.data_offset, o->loc.data_size, path);
    if (::close(fd) != 0 && st.ok()) {
      st = absl::InternalError(absl::StrCat("close ", path, ": ", std::strerror(errno)));
    }
    if (!st.ok()) {
      ::unlink(path.c_str());
      return st;
    }
    FreeMemory(o);
    o->spilled = true;
    ++spilled_objects;
    spilled_bytes += o->file_size();
    ++spills;
    return absl::OkStatus();
  }

  // How much memory evicting and spilling (as AllocateWithPressure would, in the same
  // order) could free at most, given the spill space left.
  uint64_t Reclaimable() const {
    uint64_t total = alloc.free_bytes() + lru_secondary_bytes;
    if (options.spill_dir.empty()) return total;
    uint64_t spill_free = SpillFree();
    for (auto& [tick, o] : lru_primary) {
      if (o->file_size() > spill_free) continue;
      spill_free -= o->file_size();
      total += o->block_size;
    }
    return total;
  }

  // An offset for `size` bytes for object `id`, evicting unpinned secondary copies and
  // then spilling unpinned primary copies, least recently used first, until it fits.
  absl::StatusOr<uint64_t> AllocateWithPressure(uint64_t size, const ObjectId& id,
                                                const Object* restoring) {
    uint64_t rounded = Allocator::RoundUp(size);
    absl::Status spill_error;
    // Nothing is disturbed when even dropping everything allowed would not make room.
    const bool hopeless = Reclaimable() < rounded;
    while (!hopeless) {
      if (auto off = alloc.Allocate(size)) return *off;
      if (!lru_secondary.empty()) {
        Object* victim = lru_secondary.begin()->second;
        DROVER_LOG(DEBUG) << "object table: evicting secondary copy " << ShowId(victim->id)
                          << " (" << Bytes(victim->block_size) << ")";
        evicted_pending.push_back(victim->id);
        ++evictions;
        Erase(victim);
        continue;
      }
      Object* victim = nullptr;
      if (!options.spill_dir.empty() && spill_error.ok()) {
        uint64_t spill_free = SpillFree();
        for (auto& [tick, o] : lru_primary) {
          if (o->file_size() <= spill_free) {
            victim = o;
            break;
          }
        }
      }
      if (victim == nullptr) break;
      DROVER_LOG(DEBUG) << "object table: spilling " << ShowId(victim->id) << " ("
                        << Bytes(victim->file_size()) << ")";
      spill_error = Spill(victim);
      if (!spill_error.ok()) {
        DROVER_LOG(WARNING) << "object table: cannot spill " << ShowId(victim->id) << ": "
                            << spill_error;
      }
    }
    return Exhausted(rounded, id, restoring, spill_error, hopeless);
  }

  absl::Status Exhausted(uint64_t rounded, const ObjectId& id, const Object* restoring,
                         const absl::Status& spill_error, bool hopeless) const {
    uint64_t ref_bytes = 0, ref_n = 0, unsealed_bytes = 0, unsealed_n = 0, idle_bytes = 0,
             idle_n = 0;
    for (auto& [oid, o] : objects) {
      if (o->spilled) continue;
      if (!o->sealed) {
        unsealed_bytes += o->block_size;
        ++unsealed_n;
      } else if (o->total_refs > 0) {
        ref_bytes += o->block_size;
        ++ref_n;
      } else {
        idle_bytes += o->block_size;
        ++idle_n;
      }
    }
    std::string msg = absl::StrCat(
        "cannot allocate ", Bytes(rounded), restoring ? " to restore spilled object " : " for object ",
        ShowId(id), ": ", Bytes(alloc.free_bytes()), " free (largest free block ",
        Bytes(alloc.largest_free()), ") of ", Bytes(alloc.capacity()), "; ", Bytes(ref_bytes),
        " held by ", ref_n, " referenced objects, ", Bytes(unsealed_bytes), " by ", unsealed_n,
        " unsealed objects");
    if (leased_bytes > 0) {
      absl::StrAppend(&msg, ", ", Bytes(leased_bytes), " leased by ", leases_by_client.size(),
                      " clients for puts in progress");
    }
    if (idle_n > 0) {
      absl::StrAppend(&msg, ", ", Bytes(idle_bytes), " by ", idle_n, " unreferenced objects",
                      hopeless ? " (evicting or spilling them would not make enough room)"
                      : options.spill_dir.empty() || !spill_error.ok()
                          ? ""
                          : " (too large for the spill space left)");
    }
    if (options.spill_dir.empty()) {
      absl::StrAppend(&msg, "; spilling disabled (no spill directory)");
    } else if (!spill_error.ok()) {
      absl::StrAppend(&msg, "; spilling failed: ", spill_error.message());
    } else {
      absl::StrAppend(&msg, "; spill space ", SpillFree() == 0 ? "full, " : "", Bytes(spilled_bytes),
                      " of ", Bytes(options.spill_capacity), " used by ", spilled_objects,
                      " spilled objects");
    }
    absl::StrAppend(&msg, ". Release or delete objects, or give the store more memory.");
    return absl::ResourceExhaustedError(msg);
  }

  absl::Status Restore(Object* o) {
    std::string path = SpillPath(o->id);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st_buf;
    if (fd < 0 || ::fstat(fd, &st_buf) != 0 ||
        static_cast<uint64_t>(st_buf.st_size) != o->file_size()) {
      std::string why = fd < 0 ? std::strerror(errno)
                               : absl::StrCat("holds ", st_buf.st_size, " bytes, expected ",
                                              o->file_size());
      if (fd >= 0) ::close(fd);
      return absl::DataLossError(
          absl::StrCat("spilled object ", ShowId(o->id), " is lost: ", path, ": ", why));
    }
    auto off = AllocateWithPressure(o->loc.data_offset + o->loc.data_size, o->id, o);
    if (!off.ok()) {
      ::close(fd);
      return off.status();
    }
    char* base = arena->At(*off);
    absl::Status st = ReadAll(fd, base, o->loc.metadata_size, 0, path);
    if (st.ok()) {
      st = ReadAll(fd, base + o->loc.data_offset, o->loc.data_size, o->loc.metadata_size, path);
    }
    ::close(fd);
    if (!st.ok()) {
      alloc.Free(*off);
      return st;
    }
    ::unlink(path.c_str());
    o->loc.offset = *off;
    o->spilled = false;
    --spilled_objects;
    spilled_bytes -= o->file_size();
    ++in_memory;
    ++sealed_in_memory;
    ++restores;
    return absl::OkStatus();
  }

  void RunEvictedCallbacks() {
    std::vector<ObjectId> ids;
    ids.swap(evicted_pending);
    if (!on_evicted) return;
    for (auto& id : ids) on_evicted(id);
  }

  // Drops `n` references of `client` (all it holds if n == 0); frees the object if it
  // was deleted and nothing pins it any more. `o` is invalid afterwards if freed.
  void DropRefs(Object* o, ClientId client, uint64_t n) {
    auto it = o->refs.find(client);
    if (it == o->refs.end()) return;
    if (n == 0 || n >= it->second) {
      n = it->second;
      o->refs.erase(it);
    } else {
      it->second -= n;
    }
    o->total_refs -= n;
    if (o->total_refs == 0) --referenced;
    Unindex(o, client);
    if (o->delete_pending && !o->pinned()) {
      Erase(o);
      return;
    }
    UpdateLru(o);
  }

  absl::Status AlreadyExists(const Object* existing, const ObjectId& id) const {
    if (existing->delete_pending) {
      return absl::AlreadyExistsError(absl::StrCat(
          "object ", ShowId(id), " was deleted but is still in use by ",
          existing->refs.size(), " clients; create it again once they release it"));
    }
    return absl::AlreadyExistsError(absl::StrCat("object ", ShowId(id), " already exists"));
  }

  void AddPiece(ClientId client, uint64_t offset, uint64_t size) {
    leases.emplace(offset, LeasePiece{client, size});
    ClientLeases& cl = leases_by_client[client];
    cl.bytes += size;
    cl.offsets.insert(offset);
    leased_bytes += size;
  }

  void RemovePiece(std::map<uint64_t, LeasePiece>::iterator it) {
    auto cl = leases_by_client.find(it->second.client);
    cl->second.bytes -= it->second.size;
    cl->second.offsets.erase(it->first);
    if (cl->second.offsets.empty()) leases_by_client.erase(cl);
    leased_bytes -= it->second.size;
    leases.erase(it);
  }

  // Takes [offset, offset + size) out of the lease range of `client` that contains it:
  // afterwards it is an allocator block of its own, no longer leased; what is left of
  // the range on either side stays leased. `what` names the caller in errors.
  absl::Status Carve(ClientId client, uint64_t offset, uint64_t size, const char* what) {
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": [", offset, ", +", size, ") ", why,
          "; a client may only use ranges of the arena the store leased to it"));
    };
    if (offset % kAlignment != 0 || size % kAlignment != 0 || size == 0) {
      return bad("is not a non-empty range of 64-byte aligned offset and size");
    }
    auto it = leases.upper_bound(offset);
    if (it == leases.begin()) return bad("is not inside a lease of this client");
    --it;
    const uint64_t start = it->first;
    const uint64_t piece = it->second.size;
    if (it->second.client != client || offset - start >= piece ||
        size > piece - (offset - start)) {
      return bad("is not inside a lease of this client");
    }
    const bool left = offset > start;
    const bool right = size < piece - (offset - start);
    if (left && right && leases_by_client[client].offsets.size() >= kMaxLeasePieces) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": client ", client, " holds ", kMaxLeasePieces,
          " lease ranges already; carve from the start of a range or return the rest"));
    }
    if ((left && !alloc.Split(start, offset)) ||
        (right && !alloc.Split(offset, offset + size))) {
      // The table's own bookkeeping disagrees with the allocator: refuse, change nothing
      // more (the first split, if any, only divided a block the client still leases).
      DROVER_LOG(ERROR) << "object table: allocator refused to split lease at " << start
                        << " (bookkeeping bug)";
      return absl::InternalError(absl::StrCat(what, ": lease bookkeeping error"));
    }
    RemovePiece(it);
    if (left) AddPiece(client, start, offset - start);
    if (right) AddPiece(client, offset + size, piece - (offset - start) - size);
    return absl::OkStatus();
  }
};


namespace {

// Removes the spill files (named by their object's id in hex) an earlier table left in
// `dir`: a store killed by SIGKILL never removes them, and a new table cannot read them
// (it starts empty), so they only take the spill space.
void RemoveStaleSpillFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  int removed = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const bool spill_file =
        !name.empty() && name.size() % 2 == 0 &&
        std::all_of(name.begin(), name.end(),
                    [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
    if (spill_file && ::unlinkat(::dirfd(d), name.c_str(), 0) == 0) ++removed;
  }
  ::closedir(d);
  if (removed > 0) {
    DROVER_LOG(WARNING) << "object table: removed " << removed << " spill file(s) of an earlier "
                        << "store from " << dir << " (a new store starts empty)";
  }
}

}  // namespace

ObjectTable::ObjectTable(TableOptions options, ArenaIo* arena)
    : impl_(std::make_unique<Impl>(std::move(options), arena)) {
  if (!impl_->options.spill_dir.empty()) RemoveStaleSpillFiles(impl_->options.spill_dir);
}

ObjectTable::~ObjectTable() {
  // Spill files are only readable through this table: remove them with it.
  for (auto& [id, o] : impl_->objects) {
    if (o->spilled) ::unlink(impl_->SpillPath(id).c_str());
  }
}

absl::StatusOr<ObjectLocation> ObjectTable::Create(ClientId client, const ObjectId& id,
                                                   uint64_t data_size,
                                                   const std::string& metadata, bool primary,
                                                   bool mutable_object) {
  Impl& t = *impl_;
  if (id.empty() || id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("object id must be 1..", kMaxIdBytes,
                                                   " bytes, got ", id.size()));
  }
  const uint64_t capacity = t.alloc.capacity();
  const uint64_t metadata_size = metadata.size();
  const uint64_t data_offset = metadata_size == 0 ? 0 : Allocator::RoundUp(metadata_size);
  if (data_size > capacity || metadata_size > capacity || data_size + data_offset > capacity ||
      data_size + metadata_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object ", ShowId(id), " of ", data_size, " data bytes and ", metadata_size,
        " metadata bytes ", data_size + metadata_size == 0 ? "is empty" : "does not fit",
        " in the object store of ", capacity, " bytes (", Bytes(capacity), ")"));
  }
  if (mutable_object && !primary) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object ", ShowId(id), ": a mutable object lives on one node; it cannot be a secondary copy"));
  }
  if (const Impl::Object* existing = t.Find(id)) return t.AlreadyExists(existing, id);
  ObjectLocation loc;
  loc.metadata_size = metadata_size;
  loc.mutable_object = mutable_object;
  loc.data_offset = data_offset;
  loc.data_size = data_size;
  auto off = t.AllocateWithPressure(loc.data_offset + data_size, id, nullptr);
  if (!off.ok()) {
    t.RunEvictedCallbacks();
    return off.status();
  }
  loc.offset = *off;
  if (metadata_size > 0) std::memcpy(t.arena->At(loc.offset), metadata.data(), metadata_size);

  auto obj = std::make_unique<Impl::Object>();
  Impl::Object* o = obj.get();
  o->id = id;
  o->loc = loc;
  o->block_size = *t.alloc.BlockSize(loc.offset);
  o->creator = client;
  o->primary = primary;
  o->refs[client] = 1;
  o->total_refs = 1;
  o->lru_tick = ++t.tick;
  t.objects.emplace(id, std::move(obj));
  ++t.in_memory;
  ++t.referenced;
  t.by_client[client].insert(id);
  t.RunEvictedCallbacks();
  return loc;
}

absl::Status ObjectTable::Seal(ClientId client, const ObjectId& id) {
  Impl& t = *impl_;
  Impl::Object* o = t.Find(id);
  if (o == nullptr) return absl::NotFoundError(absl::StrCat("object ", ShowId(id), " not found"));
  if (o->sealed) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", ShowId(id), " is already sealed"));
  }
  if (o->creator != client) {
    return absl::FailedPreconditionError(absl::StrCat(
        "object ", ShowId(id), " can only be sealed by the client that created it"));
  }
  o->sealed = true;
  ++t.sealed_in_memory;
  t.Unindex(o, client);
  if (o->delete_pending && !o->pinned()) {
    t.Erase(o);
  } else {
    t.Touch(o);
  }
  if (t.on_sealed) t.on_sealed(id);
  return absl::OkStatus();
}

absl::Status ObjectTable::Abort(ClientId client, const ObjectId& id) {
  Impl& t = *impl_;
  Impl::Object* o = t.Find(id);
  if (o == nullptr) return absl::NotFoundError(absl::StrCat("object ", ShowId(id), " not found"));
  if (o->sealed) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", ShowId(id), " is sealed and cannot be aborted"));
  }
  if (o->creator != client) {
    return absl::FailedPreconditionError(absl::StrCat(
        "object ", ShowId(id), " can only be aborted by the client that created it"));
  }
  t.Erase(o);
  return absl::OkStatus();
}

absl::StatusOr<ObjectLocation> ObjectTable::Get(ClientId client, const ObjectId& id) {
  Impl& t = *impl_;
  Impl::Object* o = t.Find(id);
  if (o == nullptr || o->delete_pending) {
    return absl::NotFoundError(absl::StrCat("object ", ShowId(id), " not found"));
  }
  if (!o->sealed) {
    return absl::UnavailableError(absl::StrCat("object ", ShowId(id), " is not sealed yet"));
  }
  if (o->spilled) {
    absl::Status st = t.Restore(o);
    if (st.code() == absl::StatusCode::kDataLoss && o->total_refs == 0) {
      // The spill file is gone or short: the object cannot come back. Drop it rather
      // than report it present forever.
      DROVER_LOG(ERROR) << "object table: dropping spilled object " << ShowId(id) << ": " << st;
      // Gone like an evicted copy: subscribers (the agent, hence the scheduler's object
      // directory) hear of it through the same callback.
      t.evicted_pending.push_back(o->id);
      t.Erase(o);
    }
    t.RunEvictedCallbacks();
    if (!st.ok()) return st;
  }
  if (o->total_refs == 0) ++t.referenced;
  ++o->refs[client];
  ++o->total_refs;
  t.by_client[client].insert(id);
  t.Touch(o);
  return o->loc;
}

absl::Status ObjectTable::Release(ClientId client, const ObjectId& id) {
  Impl& t = *impl_;
  Impl::Object* o = t.Find(id);
  if (o == nullptr) return absl::NotFoundError(absl::StrCat("object ", ShowId(id), " not found"));
  if (o->refs.count(client) == 0) {
    return absl::NotFoundError(
        absl::StrCat("client ", client, " holds no reference to object ", ShowId(id)));
  }
  t.DropRefs(o, client, 1);
  return absl::OkStatus();
}

absl::Status ObjectTable::Delete(const ObjectId& id) {
  Impl& t = *impl_;
  Impl::Object* o = t.Find(id);
  if (o == nullptr || o->delete_pending) {
    return absl::NotFoundError(absl::StrCat("object ", ShowId(id), " not found"));
  }
  if (o->pinned()) {
    o->delete_pending = true;
    t.UnLru(o);
  } else {
    t.Erase(o);
  }
  return absl::OkStatus();
}

bool ObjectTable::Contains(const ObjectId& id) const {
  const Impl::Object* o = impl_->Find(id);
  return o != nullptr && o->visible();
}

absl::StatusOr<std::string> ObjectTable::Metadata(const ObjectId& id) const {
  const Impl& t = *impl_;
  const Impl::Object* o = t.Find(id);
  if (o == nullptr || o->delete_pending) {
    return absl::NotFoundError(absl::StrCat("object ", ShowId(id), " not found"));
  }
  if (!o->sealed) {
    return absl::UnavailableError(absl::StrCat("object ", ShowId(id), " is not sealed yet"));
  }
  std::string out(o->loc.metadata_size, '\0');
  if (!o->spilled) {
    if (!out.empty()) std::memcpy(out.data(), t.arena->At(o->loc.offset), out.size());
    return out;
  }
  std::string path = t.SpillPath(id);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::DataLossError(absl::StrCat("spilled object ", ShowId(id), ": open ", path, ": ",
                                            std::strerror(errno)));
  }
  absl::Status st = ReadAll(fd, out.data(), out.size(), 0, path);
  ::close(fd);
  if (!st.ok()) return st;
  return out;
}

std::vector<ObjectId> ObjectTable::DisconnectClient(ClientId client) {
  Impl& t = *impl_;
  std::vector<ObjectId> aborted;
  if (auto cl = t.leases_by_client.find(client); cl != t.leases_by_client.end()) {
    std::vector<uint64_t> offsets(cl->second.offsets.begin(), cl->second.offsets.end());
    for (uint64_t off : offsets) {
      t.RemovePiece(t.leases.find(off));
      if (!t.alloc.Free(off)) {
        DROVER_LOG(ERROR) << "object table: allocator refused to free lease at " << off
                          << " (bookkeeping bug)";
      }
    }
  }
  auto it = t.by_client.find(client);
  if (it == t.by_client.end()) return aborted;
  std::vector<ObjectId> ids(it->second.begin(), it->second.end());
  for (const ObjectId& id : ids) {
    Impl::Object* o = t.Find(id);
    if (o == nullptr) continue;
    if (!o->sealed && o->creator == client) {
      t.Erase(o);
      aborted.push_back(id);
    } else {
      t.DropRefs(o, client, 0);
    }
  }
  t.by_client.erase(client);
  return aborted;
}

TableStats ObjectTable::Stats() const {
  const Impl& t = *impl_;
  TableStats s;
  s.capacity = t.alloc.capacity();
  s.used = t.alloc.used();
  s.largest_free = t.alloc.largest_free();
  s.objects = t.in_memory;
  s.sealed = t.sealed_in_memory;
  s.referenced = t.referenced;
  s.spilled_objects = t.spilled_objects;
  s.spilled_bytes = t.spilled_bytes;
  s.evictions = t.evictions;
  s.spills = t.spills;
  s.restores = t.restores;
  s.leased_bytes = t.leased_bytes;
  s.lease_pieces = t.leases.size();
  return s;
}

absl::StatusOr<ObjectInfo> ObjectTable::Info(const ObjectId& id) const {
  const Impl::Object* o = impl_->Find(id);
  if (o == nullptr || !o->visible()) {
    return absl::NotFoundError(absl::StrCat("object ", ShowId(id), " not found"));
  }
  return ObjectInfo{o->id, o->loc.data_size, o->loc.metadata_size, o->primary};
}

std::vector<ObjectInfo> ObjectTable::List() const {
  std::vector<ObjectInfo> out;
  out.reserve(impl_->objects.size());
  for (const auto& [id, o] : impl_->objects) {
    if (o->visible()) out.push_back({id, o->loc.data_size, o->loc.metadata_size, o->primary});
  }
  return out;
}

absl::StatusOr<LeaseRange> ObjectTable::Lease(ClientId client, uint64_t bytes) {
  Impl& t = *impl_;
  const uint64_t rounded = bytes == 0 ? 0 : Allocator::RoundUp(bytes);
  if (rounded == 0 || rounded > t.alloc.capacity()) {
    return absl::InvalidArgumentError(absl::StrCat("lease of ", bytes, " bytes: must be 1..",
                                                   t.alloc.capacity(), " bytes"));
  }
  auto cl = t.leases_by_client.find(client);
  const uint64_t held = cl == t.leases_by_client.end() ? 0 : cl->second.bytes;
  const uint64_t pieces = cl == t.leases_by_client.end() ? 0 : cl->second.offsets.size();
  if (rounded > t.options.max_client_lease - std::min(held, t.options.max_client_lease) ||
      rounded > t.options.max_total_lease - std::min(t.leased_bytes, t.options.max_total_lease) ||
      pieces >= ObjectTable::kMaxLeasePieces) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot lease ", Bytes(rounded), " to client ", client, ": it holds ", Bytes(held), " in ",
        pieces, " ranges (at most ", Bytes(t.options.max_client_lease), " in ",
        ObjectTable::kMaxLeasePieces, "), all clients ", Bytes(t.leased_bytes), " (at most ",
        Bytes(t.options.max_total_lease), "); create objects one by one instead"));
  }
  std::optional<uint64_t> off = t.alloc.Allocate(rounded);
  if (!off) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot lease ", Bytes(rounded), ": ", Bytes(t.alloc.free_bytes()),
        " free, largest free block ", Bytes(t.alloc.largest_free()),
        " (a lease takes only free space and never evicts or spills; create objects one by "
        "one instead, which does)"));
  }
  t.AddPiece(client, *off, rounded);
  return LeaseRange{*off, rounded};
}

bool ObjectTable::HoldsLease(ClientId client, uint64_t offset, uint64_t size) const {
  const Impl& t = *impl_;
  auto it = t.leases.upper_bound(offset);
  if (it == t.leases.begin()) return false;
  --it;
  const uint64_t start = it->first, piece = it->second.size;
  return it->second.client == client && offset - start < piece &&
         size <= piece - (offset - start);
}

absl::StatusOr<ObjectLocation> ObjectTable::SealLeased(ClientId client, const ObjectId& id,
                                                       uint64_t offset, uint64_t data_size,
                                                       uint64_t metadata_size) {
  Impl& t = *impl_;
  if (id.empty() || id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("object id must be 1..", kMaxIdBytes,
                                                   " bytes, got ", id.size()));
  }
  const uint64_t capacity = t.alloc.capacity();
  if (data_size > capacity || metadata_size > capacity || data_size + metadata_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leased put of object ", ShowId(id), ": ", data_size, " data bytes and ", metadata_size,
        " metadata bytes ", data_size + metadata_size == 0 ? "is empty" : "does not fit",
        " in the object store of ", capacity, " bytes"));
  }
  ObjectLocation loc;
  loc.offset = offset;
  loc.metadata_size = metadata_size;
  loc.data_offset = metadata_size == 0 ? 0 : Allocator::RoundUp(metadata_size);
  loc.data_size = data_size;
  const uint64_t block = Allocator::RoundUp(loc.data_offset + data_size);
  if (block == 0 || block > capacity) {
    return absl::InvalidArgumentError(absl::StrCat("leased put of object ", ShowId(id), ": ",
                                                   data_size, " data bytes and ", metadata_size,
                                                   " metadata bytes do not fit the arena"));
  }
  DROVER_RETURN_IF_ERROR(t.Carve(client, offset, block, "leased put"));
  // From here the range is the put's own block: freed again if the put fails.
  if (const Impl::Object* existing = t.Find(id)) {
    t.alloc.Free(offset);
    return t.AlreadyExists(existing, id);
  }
  auto obj = std::make_unique<Impl::Object>();
  Impl::Object* o = obj.get();
  o->id = id;
  o->loc = loc;
  o->block_size = block;
  o->creator = client;
  o->primary = true;
  o->sealed = true;
  t.objects.emplace(id, std::move(obj));
  ++t.in_memory;
  ++t.sealed_in_memory;
  t.Touch(o);
  if (t.on_sealed) t.on_sealed(id);
  return loc;
}

absl::Status ObjectTable::ReturnLease(ClientId client, uint64_t offset, uint64_t size) {
  Impl& t = *impl_;
  DROVER_RETURN_IF_ERROR(t.Carve(client, offset, size, "return of a lease"));
  t.alloc.Free(offset);
  return absl::OkStatus();
}

void ObjectTable::set_on_sealed(std::function<void(const ObjectId&)> cb) {
  impl_->on_sealed = std::move(cb);
}

void ObjectTable::set_on_evicted(std::function<void(const ObjectId&)> cb) {
  impl_->on_evicted = std::move(cb);
}

}  // namespace drover::object_store
