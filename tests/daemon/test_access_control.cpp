// Who may connect, and the per-user allowance.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/access_control.h"

using namespace voltad;

namespace {
PeerCredentials peer(uid_t uid, std::vector<gid_t> groups) {
  PeerCredentials p;
  p.uid = uid;
  p.gid = groups.empty() ? 0 : groups[0];
  p.groups = std::move(groups);
  p.user = "u" + std::to_string(uid);
  return p;
}
}  // namespace

TEST_CASE("root, the daemon's own user, listed users and group members are allowed") {
  std::vector<std::string> warnings;
  auto policy = AccessPolicy::create({"4242"}, {"5000"}, 100, 1000, warnings);
  CHECK(warnings.empty());
  CHECK(policy.check(peer(0, {0})).allowed);
  CHECK(policy.check(peer(1000, {1000})).allowed);
  CHECK(policy.check(peer(4242, {4242})).allowed);
  CHECK(policy.check(peer(7, {7, 5000})).allowed);
  CHECK(policy.check(peer(7, {7, 5000})).reason.find("group") != std::string::npos);
  auto refused = policy.check(
      peer(7, {7, 100}));  // the socket's group does not count when allow_groups is set
  CHECK_FALSE(refused.allowed);
  CHECK(refused.reason.find("u7") != std::string::npos);
}

TEST_CASE("empty allow_groups means the socket's group; unknown names warn") {
  std::vector<std::string> warnings;
  auto policy = AccessPolicy::create({"no-such-user-xyz"}, {}, 100, 1000, warnings);
  CHECK(policy.check(peer(7, {3, 100})).allowed);
  CHECK_FALSE(policy.check(peer(7, {3})).allowed);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("no-such-user-xyz") != std::string::npos);
  warnings.clear();
  AccessPolicy::create({}, {"no-such-group-xyz"}, 100, 1000, warnings);
  CHECK(warnings.size() == 1);
}

TEST_CASE("names resolve through the system databases") {
  CHECK(resolve_user("root") == uid_t(0));
  CHECK(resolve_user("123") == uid_t(123));
  CHECK_FALSE(resolve_user("no-such-user-xyz").has_value());
  CHECK(resolve_group("0") == gid_t(0));
  CHECK_FALSE(resolve_group("12ab").has_value());
}

TEST_CASE("peer credentials of a socketpair are our own") {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  auto creds = peer_credentials(fds[0]);
  REQUIRE(creds.ok());
  CHECK(creds->uid == getuid());
  CHECK(creds->pid == getpid());
  CHECK(std::find(creds->groups.begin(), creds->groups.end(), getgid()) != creds->groups.end());
  close(fds[0]);
  close(fds[1]);
  CHECK_FALSE(peer_credentials(-1).ok());
}

TEST_CASE("the per-user limit counts requests in flight and frees them with their slot") {
  auto limiter = std::make_shared<UserLimiter>(2);
  auto a = limiter->try_acquire(7);
  auto b = limiter->try_acquire(7);
  CHECK(a);
  CHECK(b);
  CHECK_FALSE(limiter->try_acquire(7));
  CHECK(limiter->try_acquire(8));  // another user has their own share
  CHECK(limiter->in_flight(7) == 2);
  a.reset();
  CHECK(limiter->in_flight(7) == 1);
  CHECK(limiter->try_acquire(7));
}

TEST_CASE("administrators: root, the daemon's own user and members of admin_groups") {
  std::vector<std::string> warnings;
  auto policy = AccessPolicy::create({"4242"}, {"5000"}, 100, 1000, warnings);
  policy.add_admin_groups({"6000", "no-such-group-xyz"}, warnings);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("server.admin_groups") != std::string::npos);
  CHECK(policy.check_admin(peer(0, {0})).allowed);
  CHECK(policy.check_admin(peer(1000, {1000})).allowed);
  CHECK(policy.check_admin(peer(7, {7, 6000})).allowed);
  auto user = policy.check_admin(peer(4242, {4242, 5000}));  // may use the API, not administer it
  CHECK(policy.check(peer(4242, {4242, 5000})).allowed);
  CHECK_FALSE(user.allowed);
  CHECK(user.reason.find("not an administrator") != std::string::npos);
}

TEST_CASE("a reload can change the per-user limit; slots already held stay valid") {
  auto limiter = std::make_shared<UserLimiter>(3);
  auto a = limiter->try_acquire(7);
  auto b = limiter->try_acquire(7);
  limiter->set_max_per_user(1);
  CHECK(limiter->max_per_user() == 1);
  CHECK_FALSE(limiter->try_acquire(7));
  a.reset();
  b.reset();
  CHECK(limiter->try_acquire(7));
}
