// A fixed set of worker threads for data-parallel loops (the CPU backend's
// matrix products and attention). parallel_for blocks until every index is
// done; it is called from one thread at a time (the engine thread).
// A decode step makes hundreds of short calls (a small model's product
// takes ~0.1 ms), so waking a sleeping thread for each cost as much as the
// work: the threads spin for up to kSpin after a call before they sleep,
// and the caller spins for its workers before it does. Spinning pays only
// while each thread has a CPU of its own: with more threads than the CPUs
// the process may use, a spinning thread holds the CPU that a thread with
// work is waiting for (16 threads on 2 CPUs made voltad-run 14x slower), so
// such a pool sleeps at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace voltad {

class ThreadPool {
 public:
  // n_threads <= 0: std::thread::hardware_concurrency(). The calling thread
  // works too, so n_threads - 1 workers are started.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Whether threads poll between calls (size() is at most the CPUs).
  bool spins() const { return spin_.count() > 0; }

  // The CPUs this process may run on (its affinity mask: taskset, a
  // cgroup's cpuset), at least 1.
  static int usable_cpus();

  // Calls fn(begin, end) on disjoint ranges covering [0, n), split into
  // about `size()` contiguous pieces. If fn throws (std::bad_alloc, say),
  // every piece still ends before parallel_for rethrows the first exception.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  // How long a thread polls before it sleeps on a condition variable.
  static constexpr std::chrono::microseconds kSpin{200};

  void worker(int index);
  // Piece `index` of n (of size() pieces); an exception is kept in error_.
  void run_piece(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int index);

  int n_threads_;
  std::chrono::microseconds spin_;  // kSpin, or 0 when oversubscribed
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  std::exception_ptr error_;  // the job's first exception (under mu_)
  // Written under mu_, read by polling threads without it: generation_
  // is stored after job_ and job_n_ (release), so a thread that sees the
  // new generation sees the job.
  std::atomic<uint64_t> generation_ = 0;
  std::atomic<int> pending_ = 0;
  std::atomic<bool> stop_ = false;
};

}  // namespace voltad
