// A store client that skips object_store::Client and speaks frames directly: tests use
// it to send what the library never would (forged offsets, secondary copies, raw bytes)
// and check the store's answers. Failures are reported as gtest expectations.
#ifndef DROVER_OBJECT_STORE_TESTING_RAW_CLIENT_H_
#define DROVER_OBJECT_STORE_TESTING_RAW_CLIENT_H_

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "object_store/protocol.h"
#include "proto/object_store.pb.h"

namespace drover::object_store::testing {

class RawClient {
 public:
  // Connects to the store's socket and reads its hello. The arena is mapped only with
  // `map_arena` (to write and read words in it, e.g. an overlapped seal's ready and
  // ack words); otherwise its descriptor is closed.
  explicit RawClient(const std::string& path, bool map_arena = false) {
    proto::StoreHello hello;
    absl::StatusOr<StoreGreeting> g = ConnectAndReceiveHello(path, absl::Seconds(10), &hello);
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) return;
    fd_ = g->fd;
    capacity_ = hello.arena_capacity();
    if (map_arena) {
      void* p = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_SHARED, g->arena_fd, 0);
      EXPECT_NE(p, MAP_FAILED) << strerror(errno);
      if (p != MAP_FAILED) arena_ = static_cast<uint8_t*>(p);
    }
    close(g->arena_fd);
  }
  ~RawClient() {
    if (arena_ != nullptr) munmap(arena_, capacity_);
    close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // Sends `req` with the next request id and returns the next reply.
  proto::StoreReply Call(proto::StoreRequest req) {
    req.set_request_id(++next_id_);
    std::string scratch;
    EXPECT_TRUE(WriteFrame(fd_, req, &scratch).ok());
    return Read();
  }
  proto::StoreReply Read() {
    proto::StoreReply reply;
    std::string scratch;
    absl::Status s = ReadFrame(fd_, &reply, &scratch);
    EXPECT_TRUE(s.ok()) << s;
    return reply;
  }
  void SendBytes(const std::string& bytes) { EXPECT_TRUE(WriteAll(fd_, bytes).ok()); }
  // True if the store closed the connection (EOF).
  bool Closed() {
    char c;
    return read(fd_, &c, 1) == 0;
  }
  uint64_t capacity() const { return capacity_; }
  // The 8-byte word at `offset` of the arena. REQUIRES: constructed with map_arena,
  // offset 8-aligned and inside the arena.
  std::atomic<uint64_t>& Word(uint64_t offset) {
    return *reinterpret_cast<std::atomic<uint64_t>*>(arena_ + offset);
  }

 private:
  uint8_t* arena_ = nullptr;
  int fd_ = -1;
  uint64_t next_id_ = 0;
  uint64_t capacity_ = 0;
};

}  // namespace drover::object_store::testing

#endif  // DROVER_OBJECT_STORE_TESTING_RAW_CLIENT_H_
