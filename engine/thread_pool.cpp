#include "engine/thread_pool.h"

#include <sched.h>

#include <algorithm>

namespace voltad {

int ThreadPool::usable_cpus() {
  cpu_set_t mask;
  if (::sched_getaffinity(0, sizeof(mask), &mask) == 0 && CPU_COUNT(&mask) > 0)
    return CPU_COUNT(&mask);
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = usable_cpus();
  n_threads_ = n_threads;
  spin_ = n_threads_ <= usable_cpus() ? kSpin : std::chrono::microseconds(0);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_piece(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int index) {
  int64_t begin = n * index / n_threads_, end = n * (index + 1) / n_threads_;
  if (begin >= end) return;
  try {
    fn(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

// Polls `done` until it holds or `limit` has passed; true if it holds.
template <typename Done>
static bool spin_until(Done done, std::chrono::microseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= end) return done();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) return fn(0, n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  run_piece(fn, n, 0);
  auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(all_done, spin_)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, all_done);
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = nullptr;
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  auto has_news = [&] {
    return stop_.load(std::memory_order_acquire) ||
           generation_.load(std::memory_order_acquire) != seen;
  };
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    if (!spin_until(has_news, spin_)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, has_news);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
      n = job_n_;
    }
    run_piece(*job, n, index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the lock: the caller, between its check and its wait, holds it.
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace voltad
