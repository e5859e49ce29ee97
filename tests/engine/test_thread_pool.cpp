// ThreadPool: every index exactly once, in contiguous disjoint pieces, over
// many calls in a row (the workers polling between them) and over calls far
// apart (the workers asleep between them); pools made and dropped, busy or
// asleep; an exception in a piece reaches the caller after every piece ends;
// a pool with more threads than CPUs does not poll.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/thread_pool.h"

using voltad::ThreadPool;

namespace {

// Runs one parallel_for over n and returns the number of indices not
// visited exactly once plus the pieces that were empty or overlapped.
int faults_of_one_call(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> pieces;
  pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    {
      std::lock_guard<std::mutex> lock(mu);
      pieces.emplace_back(begin, end);
    }
    for (int64_t i = begin; i < end; ++i) visits[size_t(i)].fetch_add(1);
  });
  int faults = 0;
  for (auto& v : visits) faults += v.load() != 1;
  for (auto [begin, end] : pieces) faults += !(0 <= begin && begin < end && end <= n);
  return faults;
}

}  // namespace

TEST_CASE("every index once, call after call, for pools of 1, 2, 3 and 8 threads") {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    int faults = 0;
    for (int call = 0; call < 2000; ++call) {
      const int64_t n =
          int64_t(1) + (call * 37) % 257;  // 1 to 257: fewer and more than the threads
      faults += faults_of_one_call(pool, n);
    }
    CHECK_MESSAGE(faults == 0, threads << " threads");
  }
}

TEST_CASE("calls far apart: the threads sleep between them and still take part") {
  ThreadPool pool(3);
  for (int call = 0; call < 5; ++call) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the polling time
    std::atomic<int> distinct_threads{0};
    std::mutex mu;
    std::vector<std::thread::id> seen;
    int faults = 0;
    std::vector<std::atomic<int>> visits(300);
    pool.parallel_for(300, [&](int64_t begin, int64_t end) {
      {
        std::lock_guard<std::mutex> lock(mu);
        bool fresh = true;
        for (auto id : seen) fresh = fresh && id != std::this_thread::get_id();
        if (fresh) seen.push_back(std::this_thread::get_id()), ++distinct_threads;
      }
      for (int64_t i = begin; i < end; ++i) visits[size_t(i)].fetch_add(1);
    });
    for (auto& v : visits) faults += v.load() != 1;
    CHECK(faults == 0);
    CHECK(distinct_threads.load() == 3);  // three pieces of 100, one a thread
  }
}

TEST_CASE("pools made and dropped, idle or just after a call, do not hang") {
  for (int i = 0; i < 200; ++i) {
    auto pool = std::make_unique<ThreadPool>(1 + i % 4);
    if (i % 2) CHECK(faults_of_one_call(*pool, 10) == 0);
    // Some pools are dropped with their threads asleep (past the polling).
    if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    pool.reset();
  }
}

TEST_CASE("an exception in any piece reaches the caller once every piece has ended") {
  ThreadPool pool(4);
  for (int thrower = 0; thrower < 4; ++thrower) {  // the caller's piece (0) and each worker's
    std::atomic<int> ended{0};
    bool caught = false;
    try {
      pool.parallel_for(4, [&](int64_t begin, int64_t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(begin == 3 ? 2 : 0));
        ended.fetch_add(1);
        if (begin == thrower) throw std::runtime_error("piece " + std::to_string(begin));
      });
    } catch (const std::runtime_error& e) {
      caught = std::string(e.what()) == "piece " + std::to_string(thrower);
    }
    CHECK_MESSAGE(caught, "thrower " << thrower);
    CHECK(ended.load() == 4);  // the slowest piece (3) had ended before the rethrow
  }
  CHECK(faults_of_one_call(pool, 100) == 0);  // and the pool still works
}

TEST_CASE("a pool with more threads than CPUs sleeps at once and still does every index") {
  const int cpus = ThreadPool::usable_cpus();
  REQUIRE(cpus >= 1);
  CHECK(ThreadPool(cpus).spins());
  ThreadPool crowded(cpus * 4 + 1);
  CHECK_FALSE(crowded.spins());  // a polling thread would hold a CPU others wait for
  int faults = 0;
  for (int call = 0; call < 300; ++call) faults += faults_of_one_call(crowded, 1 + call % 97);
  CHECK(faults == 0);
}
