#include "object_store/parallel_copy.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace drover::object_store {
namespace {

// What one thread copies at a time: large enough that taking a piece costs nothing,
// small enough that the threads finish together.
constexpr size_t kPiece = 2u << 20;

int ThreadsFromEnvironment() {
  if (const char* v = std::getenv("DROVER_COPY_THREADS"); v != nullptr && *v != '\0') {
    return std::clamp(std::atoi(v), 1, 64);
  }
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cpus, 1, 4);
}

class CopyPool {
 public:
  // Starts `helpers` threads; they live as long as the process (never joined).
  CopyPool(pid_t pid, int helpers) : pid_(pid) {
    for (int i = 0; i < helpers; ++i) std::thread([this] { Run(); }).detach();
  }

  // The process that made the pool (its helpers run there only).
  pid_t pid() const { return pid_; }

  // False if another copy holds the pool (the caller then copies alone).
  bool Copy(char* dst, const char* src, size_t n) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    const Job job{dst, src, n, (n + kPiece - 1) / kPiece};
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A helper still inside an earlier job holds a copy of it: the counters may be
      // reset only once it has left, or it would copy this job's pieces with the
      // earlier job's buffers.
      idle_.wait(lock, [&] { return active_ == 0; });
      job_ = job;
      next_.store(0, std::memory_order_relaxed);
      done_.store(0, std::memory_order_relaxed);
      ++generation_;
    }
    work_.notify_all();
    Work(job);
    std::unique_lock<std::mutex> lock(mu_);
    finished_.wait(lock, [&] { return done_.load(std::memory_order_acquire) == job.pieces; });
    return true;
  }

 private:
  struct Job {
    char* dst = nullptr;
    const char* src = nullptr;
    size_t n = 0;
    size_t pieces = 0;
  };

  // Takes pieces of `job` until none is left.
  void Work(const Job& job) {
    for (;;) {
      const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= job.pieces) return;
      const size_t off = i * kPiece;
      std::memcpy(job.dst + off, job.src + off, std::min(kPiece, job.n - off));
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == job.pieces) {
        std::lock_guard<std::mutex> lock(mu_);
        finished_.notify_all();
      }
    }
  }

  void Run() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      const Job job = job_;
      ++active_;
      lock.unlock();
      Work(job);
      lock.lock();
      if (--active_ == 0) idle_.notify_all();
    }
  }

  const pid_t pid_;
  std::mutex busy_;  // held by the copy using the pool
  std::mutex mu_;
  std::condition_variable work_;      // a new job (generation_ moved)
  std::condition_variable finished_;  // done_ reached the job's pieces
  std::condition_variable idle_;      // active_ reached 0
  Job job_;
  uint64_t generation_ = 0;
  int active_ = 0;  // helpers inside Work
  std::atomic<size_t> next_{0};
  std::atomic<size_t> done_{0};
};

std::atomic<CopyPool*> g_pool{nullptr};
// The pid of the thread making the pool; 0 when none is (a stale pid after fork()).
std::atomic<pid_t> g_creator{0};

// The pool of this process, or null while another thread of it is making one. A child
// after fork() makes its own: the parent's helpers do not exist there, and the parent's
// pool (its locks and counters copied mid-use, perhaps) is never touched again.
CopyPool* Pool(int threads) {
  const pid_t pid = ::getpid();
  CopyPool* pool = g_pool.load(std::memory_order_acquire);
  if (pool != nullptr && pool->pid() == pid) return pool;
  pid_t owner = g_creator.load(std::memory_order_acquire);
  do {
    if (owner == pid) return nullptr;  // a thread of ours is making it right now
  } while (!g_creator.compare_exchange_weak(owner, pid, std::memory_order_acq_rel));
  pool = g_pool.load(std::memory_order_acquire);
  if (pool == nullptr || pool->pid() != pid) {
    pool = new CopyPool(pid, threads - 1);  // a parent's pool is left behind, unused
    g_pool.store(pool, std::memory_order_release);
  }
  g_creator.store(0, std::memory_order_release);
  return pool;
}

}  // namespace

int ParallelCopyThreads() {
  static const int threads = ThreadsFromEnvironment();
  return threads;
}

void ParallelCopy(void* dst, const void* src, size_t n) {
  const int threads = ParallelCopyThreads();
  if (n >= kMinParallelCopyBytes && threads > 1) {
    CopyPool* pool = Pool(threads);
    if (pool != nullptr &&
        pool->Copy(static_cast<char*>(dst), static_cast<const char*>(src), n)) {
      return;
    }
  }
  std::memcpy(dst, src, n);
}

}  // namespace drover::object_store
