// Who may use the API, decided from the peer's kernel-verified credentials
// (SO_PEERCRED) and the groups its uid belongs to; and how many requests one
// user may have in flight, so people sharing a server get a fair share.
//
// Threads: AccessPolicy is immutable after construction (any thread).
// UserLimiter is thread-safe; a UserSlot may be released on any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/result.h"

namespace voltad {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string user;           // name from the password database; the uid as text when it has none
  std::vector<gid_t> groups;  // primary and supplementary groups
};

// SO_PEERCRED of a connected AF_UNIX socket, plus the peer's groups: the
// process's own (SO_PEERGROUPS), else the group database's for its user
// (getgrouplist; just the primary gid when the uid has no name).
Result<PeerCredentials> peer_credentials(int fd);

struct AccessDecision {
  bool allowed = false;
  std::string
      reason;  // why, for the log: "root", "the daemon's own user", "user alice", "group voltad"
};

// The config's account names that do not resolve on this machine, as the
// daemon would warn of them (it ignores them), and what that leaves where
// server.allow_groups resolves to nothing: for voltad --verify-config and a
// reload's reply, so that a misspelled name does not lock people out
// unseen.
std::vector<std::string> account_name_warnings(const std::vector<std::string>& allow_users,
                                               const std::vector<std::string>& allow_groups,
                                               const std::vector<std::string>& admin_groups);

class AccessPolicy {
 public:
  // allow_users: names or uids; allow_groups: names or gids. Empty
  // allow_groups means `default_group` (the socket's group). Root and the
  // daemon's own effective uid are always allowed. Names that do not resolve
  // are reported in `warnings` and ignored.
  static AccessPolicy create(const std::vector<std::string>& allow_users,
                             const std::vector<std::string>& allow_groups, gid_t default_group,
                             uid_t own_uid, std::vector<std::string>& warnings);

  // Before the policy is shared: groups whose members are administrators
  // (server.admin_groups); unknown names go to `warnings`.
  void add_admin_groups(const std::vector<std::string>& admin_groups,
                        std::vector<std::string>& warnings);

  AccessDecision check(const PeerCredentials& peer) const;
  // May the peer reload, drain and resume? Root, the daemon's own user and
  // members of the admin groups.
  AccessDecision check_admin(const PeerCredentials& peer) const;
  std::string describe() const;  // one line for the start-up log

 private:
  uid_t own_uid_ = 0;
  std::vector<uid_t> users_;
  std::vector<gid_t> groups_;
  std::vector<gid_t> admin_groups_;
};

class UserLimiter;

// One request's (or connection's) place in its user's allowance; released
// on destruction.
class UserSlot {
 public:
  UserSlot(std::shared_ptr<UserLimiter> limiter, uid_t uid)
      : limiter_(std::move(limiter)), uid_(uid) {}
  ~UserSlot();
  UserSlot(const UserSlot&) = delete;
  UserSlot& operator=(const UserSlot&) = delete;

 private:
  std::shared_ptr<UserLimiter> limiter_;
  uid_t uid_;
};

class UserLimiter : public std::enable_shared_from_this<UserLimiter> {
 public:
  explicit UserLimiter(int64_t max_per_user) : max_per_user_(max_per_user) {}
  // nullptr when the user already has max_per_user requests in flight.
  std::unique_ptr<UserSlot> try_acquire(uid_t uid);
  int64_t in_flight(uid_t uid) const;
  int64_t max_per_user() const { return max_per_user_.load(); }
  // A reload: users over a lowered limit keep what they have and wait to go under it.
  void set_max_per_user(int64_t max_per_user) { max_per_user_.store(max_per_user); }

 private:
  friend class UserSlot;
  void release(uid_t uid);

  std::atomic<int64_t> max_per_user_;
  mutable std::mutex mu_;
  std::unordered_map<uid_t, int64_t> counts_;
};

// Name -> id lookups that accept numeric text too ("1000" is uid 1000).
std::optional<uid_t> resolve_user(const std::string& name_or_uid);
std::optional<gid_t> resolve_group(const std::string& name_or_gid);
std::string group_name(gid_t gid);

}  // namespace voltad
