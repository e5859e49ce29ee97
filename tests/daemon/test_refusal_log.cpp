// Which refused connections the listener logs (daemon/server_listener.h):
// the first of a uid, then one a uid every period, each saying how many of
// that uid's went unlogged since the one before; and, once a period is
// over, the counts still left out (due, which the listener's timer calls).
#include <doctest/doctest.h>

#include <algorithm>

#include "daemon/server_listener.h"

using namespace voltad;
using std::chrono::seconds;

TEST_CASE("refusals are logged once a uid a period, with the count left out") {
  RefusalLog log(seconds(10));
  const RefusalLog::Clock::time_point t0{};
  CHECK(log.admit(1000, t0) == 0);               // the first: logged
  CHECK(log.admit(1000, t0 + seconds(1)) == -1);  // within the period: not
  CHECK(log.admit(1000, t0 + seconds(9)) == -1);
  CHECK(log.admit(1001, t0 + seconds(9)) == 0);   // another uid: its own first
  CHECK(log.admit(1000, t0 + seconds(10)) == 2);  // a period on: logged, 2 left out
  CHECK(log.admit(1000, t0 + seconds(11)) == -1);
  CHECK(log.admit(1000, t0 + seconds(60)) == 1);  // long after: logged, 1 left out
  CHECK(log.admit(1000, t0 + seconds(80)) == 0);  // nothing left out since
}

TEST_CASE("a flood of uids does not grow the log without bound") {
  RefusalLog log(seconds(10));
  const RefusalLog::Clock::time_point t0{};
  for (uid_t u = 0; u < 5000; ++u) CHECK(log.admit(u, t0) == 0);
  CHECK(log.uids() == 5000);
  CHECK(log.admit(7, t0 + seconds(5)) == -1);  // one left out, to be told
  // Past 4,096 uids, those quiet for a period with nothing left out are
  // forgotten; uid 7 is kept for its count.
  CHECK(log.admit(100000, t0 + seconds(30)) == 0);
  CHECK(log.uids() == 2);
  CHECK(log.admit(7, t0 + seconds(31)) == 1);
}

TEST_CASE("refusals left out are due once their uid's period is over") {
  RefusalLog log(seconds(10));
  const RefusalLog::Clock::time_point t0{};
  CHECK_FALSE(log.next_due().has_value());
  CHECK(log.admit(1000, t0) == 0);
  CHECK_FALSE(log.next_due().has_value());  // nothing left out yet
  CHECK(log.admit(1000, t0 + seconds(2)) == -1);
  CHECK(log.admit(1000, t0 + seconds(3)) == -1);
  CHECK(log.admit(2000, t0 + seconds(4)) == 0);
  CHECK(log.admit(2000, t0 + seconds(5)) == -1);
  REQUIRE(log.next_due().has_value());
  CHECK(*log.next_due() == t0 + seconds(10));  // uid 1000's period, the first to end
  CHECK(log.due(t0 + seconds(9)).empty());     // not yet
  const auto first = log.due(t0 + seconds(10));
  REQUIRE(first.size() == 1);
  CHECK(first[0] == std::pair<uid_t, int64_t>{1000, 2});
  CHECK(*log.next_due() == t0 + seconds(14));  // uid 2000's
  const auto second = log.due(t0 + seconds(14));
  REQUIRE(second.size() == 1);
  CHECK(second[0] == std::pair<uid_t, int64_t>{2000, 1});
  CHECK_FALSE(log.next_due().has_value());
  // Told by due(), they count as logged: the next refusal within the
  // period is left out, the one after it says 1, not 3.
  CHECK(log.admit(1000, t0 + seconds(15)) == -1);
  CHECK(log.admit(1000, t0 + seconds(20)) == 1);
  // That refusal's count was told by the logged line: due() finds nothing
  // at its time, and nothing is left.
  CHECK(log.due(t0 + seconds(20)).empty());
  CHECK_FALSE(log.next_due().has_value());
}

TEST_CASE("as the daemon stops, every count left out is told, due or not") {
  RefusalLog log(seconds(10));
  const RefusalLog::Clock::time_point t0{};
  CHECK(log.admit(1, t0) == 0);
  CHECK(log.admit(2, t0) == 0);
  CHECK(log.admit(3, t0) == 0);
  CHECK(log.admit(1, t0 + seconds(1)) == -1);
  CHECK(log.admit(1, t0 + seconds(2)) == -1);
  CHECK(log.admit(3, t0 + seconds(2)) == -1);
  auto all = log.left_out();
  std::sort(all.begin(), all.end());
  CHECK(all == std::vector<std::pair<uid_t, int64_t>>{{1, 2}, {3, 1}});
  CHECK(log.left_out().empty());
  CHECK_FALSE(log.next_due().has_value());
  // After due() told one and another was logged since (a stale heap
  // entry): only what is still left out.
  CHECK(log.admit(1, t0 + seconds(12)) == 0);  // logged: nothing left out since left_out()
  CHECK(log.admit(1, t0 + seconds(13)) == -1);
  CHECK(log.admit(2, t0 + seconds(13)) == 0);
  CHECK(log.admit(2, t0 + seconds(14)) == -1);
  CHECK(log.admit(1, t0 + seconds(22)) == 1);  // logged, saying 1: its entry is stale
  CHECK(log.due(t0 + seconds(23)) == std::vector<std::pair<uid_t, int64_t>>{{2, 1}});
  CHECK(log.admit(1, t0 + seconds(24)) == -1);
  CHECK(log.left_out() == std::vector<std::pair<uid_t, int64_t>>{{1, 1}});
}

TEST_CASE("a uid left out later may fall due first") {
  RefusalLog log(seconds(10));
  const RefusalLog::Clock::time_point t0{};
  CHECK(log.admit(1, t0) == 0);
  CHECK(log.admit(2, t0 + seconds(6)) == 0);
  CHECK(log.admit(2, t0 + seconds(7)) == -1);  // due at 16
  CHECK(log.admit(1, t0 + seconds(8)) == -1);  // due at 10: earlier
  CHECK(*log.next_due() == t0 + seconds(10));
  CHECK(log.due(t0 + seconds(10)) == std::vector<std::pair<uid_t, int64_t>>{{1, 1}});
  CHECK(*log.next_due() == t0 + seconds(16));
  CHECK(log.due(t0 + seconds(30)) == std::vector<std::pair<uid_t, int64_t>>{{2, 1}});
}
