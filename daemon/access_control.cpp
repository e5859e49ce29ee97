#include "daemon/access_control.h"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace voltad {

namespace {

template <class Id>
std::optional<Id> parse_id(const std::string& text) {
  unsigned long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return static_cast<Id>(value);
}

// getpw*_r / getgr*_r want a caller buffer; sysconf's hint may be -1.
size_t lookup_buffer_size(int name) {
  long n = sysconf(name);
  return n > 0 ? size_t(n) : 16384;
}

std::optional<std::string> user_name(uid_t uid) {
  std::vector<char> buf(lookup_buffer_size(_SC_GETPW_R_SIZE_MAX));
  passwd pw{}, *found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found) return std::nullopt;
  return std::string(pw.pw_name);
}

std::vector<gid_t> groups_of(const std::string& user, gid_t primary) {
  int n = 32;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  // getgrouplist reports the size it needs when the buffer is short.
  for (int attempt = 0; attempt < 4; ++attempt) {
    int count = n;
    if (getgrouplist(user.c_str(), primary, groups.data(), &count) >= 0) {
      groups.resize(size_t(count));
      return groups;
    }
    n = std::max(count, n * 2);
    groups.resize(size_t(n));
  }
  return {primary};
}

}  // namespace

std::optional<uid_t> resolve_user(const std::string& name_or_uid) {
  if (auto id = parse_id<uid_t>(name_or_uid)) return id;
  std::vector<char> buf(lookup_buffer_size(_SC_GETPW_R_SIZE_MAX));
  passwd pw{}, *found = nullptr;
  if (getpwnam_r(name_or_uid.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found)
    return std::nullopt;
  return pw.pw_uid;
}

std::optional<gid_t> resolve_group(const std::string& name_or_gid) {
  if (auto id = parse_id<gid_t>(name_or_gid)) return id;
  std::vector<char> buf(lookup_buffer_size(_SC_GETGR_R_SIZE_MAX));
  group gr{}, *found = nullptr;
  if (getgrnam_r(name_or_gid.c_str(), &gr, buf.data(), buf.size(), &found) != 0 || !found)
    return std::nullopt;
  return gr.gr_gid;
}

std::string group_name(gid_t gid) {
  std::vector<char> buf(lookup_buffer_size(_SC_GETGR_R_SIZE_MAX));
  group gr{}, *found = nullptr;
  if (getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) != 0 || !found)
    return std::to_string(gid);
  return gr.gr_name;
}

Result<PeerCredentials> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return make_error(std::string("SO_PEERCRED failed: ") + std::strerror(errno));
  PeerCredentials p;
  p.pid = cred.pid;
  p.uid = cred.uid;
  p.gid = cred.gid;
  auto name = user_name(cred.uid);
  p.user = name ? *name : std::to_string(cred.uid);
  // The groups the peer process really has (SO_PEERGROUPS, Linux 4.13+), as
  // the kernel would use them for file access; on older kernels, what the
  // group database says about its user.
  std::vector<gid_t> groups(64);
  socklen_t glen = socklen_t(groups.size() * sizeof(gid_t));
  int rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen);
  if (rc != 0 && errno == ERANGE) {
    groups.resize(glen / sizeof(gid_t));
    rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen);
  }
  if (rc == 0) {
    groups.resize(glen / sizeof(gid_t));
    groups.push_back(cred.gid);
    p.groups = std::move(groups);
  } else {
    p.groups = name ? groups_of(*name, cred.gid) : std::vector<gid_t>{cred.gid};
  }
  return p;
}

std::vector<std::string> account_name_warnings(const std::vector<std::string>& allow_users,
                                               const std::vector<std::string>& allow_groups,
                                               const std::vector<std::string>& admin_groups) {
  std::vector<std::string> warnings;
  AccessPolicy::create(allow_users, allow_groups, 0, ::geteuid(), warnings);
  AccessPolicy policy;
  policy.add_admin_groups(admin_groups, warnings);
  const bool any_group =
      std::any_of(allow_groups.begin(), allow_groups.end(),
                  [](const std::string& g) { return resolve_group(g).has_value(); });
  if (!allow_groups.empty() && !any_group)
    warnings.push_back(
        "server.allow_groups names no group on this system: it replaces the socket's group, so "
        "only root, the daemon's own user" +
        std::string(allow_users.empty() ? "" : " and server.allow_users") + " may connect");
  return warnings;
}

AccessPolicy AccessPolicy::create(const std::vector<std::string>& allow_users,
                                  const std::vector<std::string>& allow_groups, gid_t default_group,
                                  uid_t own_uid, std::vector<std::string>& warnings) {
  AccessPolicy policy;
  policy.own_uid_ = own_uid;
  for (const auto& u : allow_users) {
    if (auto uid = resolve_user(u))
      policy.users_.push_back(*uid);
    else
      warnings.push_back("server.allow_users: no user '" + u + "' on this system; ignored");
  }
  for (const auto& g : allow_groups) {
    if (auto gid = resolve_group(g))
      policy.groups_.push_back(*gid);
    else
      warnings.push_back("server.allow_groups: no group '" + g + "' on this system; ignored");
  }
  if (allow_groups.empty()) policy.groups_.push_back(default_group);
  return policy;
}

AccessDecision AccessPolicy::check(const PeerCredentials& peer) const {
  if (peer.uid == 0) return {true, "root"};
  if (peer.uid == own_uid_) return {true, "the daemon's own user"};
  if (std::find(users_.begin(), users_.end(), peer.uid) != users_.end())
    return {true, "user " + peer.user};
  for (gid_t g : peer.groups)
    if (std::find(groups_.begin(), groups_.end(), g) != groups_.end())
      return {true, "group " + group_name(g)};
  return {false,
          "user " + peer.user + " is not in server.allow_users and in none of server.allow_groups"};
}

void AccessPolicy::add_admin_groups(const std::vector<std::string>& admin_groups,
                                    std::vector<std::string>& warnings) {
  for (const auto& g : admin_groups) {
    if (auto gid = resolve_group(g))
      admin_groups_.push_back(*gid);
    else
      warnings.push_back("server.admin_groups: no group '" + g + "' on this system; ignored");
  }
}

AccessDecision AccessPolicy::check_admin(const PeerCredentials& peer) const {
  if (peer.uid == 0) return {true, "root"};
  if (peer.uid == own_uid_) return {true, "the daemon's own user"};
  for (gid_t g : peer.groups)
    if (std::find(admin_groups_.begin(), admin_groups_.end(), g) != admin_groups_.end())
      return {true, "group " + group_name(g)};
  return {false, "user " + peer.user +
                     " is not an administrator (root, the daemon's user, or a member of "
                     "server.admin_groups)"};
}

std::string AccessPolicy::describe() const {
  std::string s = "root, uid " + std::to_string(own_uid_);
  for (uid_t u : users_) s += ", uid " + std::to_string(u);
  for (gid_t g : groups_) s += ", group " + group_name(g);
  return s;
}

UserSlot::~UserSlot() {
  limiter_->release(uid_);
}

std::unique_ptr<UserSlot> UserLimiter::try_acquire(uid_t uid) {
  std::lock_guard lock(mu_);
  int64_t& n = counts_[uid];
  if (n >= max_per_user_) return nullptr;
  ++n;
  return std::make_unique<UserSlot>(shared_from_this(), uid);
}

int64_t UserLimiter::in_flight(uid_t uid) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find(uid);
  return it == counts_.end() ? 0 : it->second;
}

void UserLimiter::release(uid_t uid) {
  std::lock_guard lock(mu_);
  auto it = counts_.find(uid);
  if (it != counts_.end() && --it->second <= 0) counts_.erase(it);
}

}  // namespace voltad
