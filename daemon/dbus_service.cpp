#include "daemon/dbus_service.h"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <cstdlib>
#include <cstring>

#include "daemon/log.h"

namespace voltad {

namespace net = boost::asio;

namespace {

constexpr const char* kRefused = "org.voltad.Daemon1.Error.Refused";

// The vtable: sd-bus answers Get, GetAll, Introspect and Peer itself from it.
// The methods are marked unprivileged for sd-bus because who may call them
// is the bus policy's decision (packaging/dbus/org.voltad.Daemon1.conf), not
// a capability check: members of the admin group hold no capability.
#define VOLTAD_PROPERTY(name, signature)                         \
  SD_BUS_PROPERTY(name, signature, DbusService::get_property, 0, \
                  SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE)

// Takes ownership of an sd_bus_message.
struct MessageUnref {
  void operator()(sd_bus_message* m) const { sd_bus_message_unref(m); }
};
using MessagePtr = std::unique_ptr<sd_bus_message, MessageUnref>;

uint64_t monotonic_usec() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000u + uint64_t(ts.tv_nsec) / 1000u;
}

}  // namespace

std::vector<std::string> changed_dbus_properties(const DbusProperties& a, const DbusProperties& b) {
  std::vector<std::string> names;
  auto diff = [&](bool differs, const char* name) {
    if (differs) names.emplace_back(name);
  };
  diff(a.state != b.state, "State");
  diff(a.model != b.model, "Model");
  diff(a.gpu_bus_id != b.gpu_bus_id, "GpuBusId");
  diff(a.numa_node != b.numa_node, "NumaNode");
  diff(a.vram_budget_bytes != b.vram_budget_bytes, "VramBudgetBytes");
  diff(a.vram_used_bytes != b.vram_used_bytes, "VramUsedBytes");
  diff(a.kv_blocks_free != b.kv_blocks_free, "KvBlocksFree");
  diff(a.running_requests != b.running_requests, "RunningRequests");
  diff(a.queued_requests != b.queued_requests, "QueuedRequests");
  diff(a.decode_tokens_per_second != b.decode_tokens_per_second, "DecodeTokensPerSecond");
  return names;
}

std::string dbus_bus_name(const std::string& instance) {
  return instance.empty() ? std::string(kDbusName) : std::string(kDbusName) + "." + instance;
}

std::optional<DbusBus> choose_dbus_bus(const std::string& setting, uid_t euid,
                                       bool user_session_visible) {
  if (setting == "off") return std::nullopt;
  if (setting == "system") return DbusBus::System;
  if (setting == "user") return DbusBus::User;
  // auto: a system service (root, or a service user with no session) is
  // reached on the system bus; a user instance on its user's bus.
  return euid == 0 || !user_session_visible ? DbusBus::System : DbusBus::User;
}

DbusService::DbusService(net::io_context& ioc, DbusProvider provider,
                         std::chrono::milliseconds poll_interval)
    : strand_(net::make_strand(ioc)),
      socket_(strand_),
      bus_timer_(strand_),
      poll_timer_(strand_),
      provider_(std::move(provider)),
      poll_interval_(poll_interval) {}

DbusService::~DbusService() {
  drop();
}

std::shared_ptr<DbusService> DbusService::start(net::io_context& ioc, const DbusOptions& options,
                                                DbusProvider provider) {
  const char* session = std::getenv("DBUS_SESSION_BUS_ADDRESS");
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  bool user_session = (session && *session) || (runtime && *runtime);
  std::optional<DbusBus> kind = choose_dbus_bus(options.bus, ::geteuid(), user_session);
  if (!kind) {
    spdlog::info("D-Bus: off (server.dbus)");
    return nullptr;
  }
  auto service = std::make_shared<DbusService>(ioc, std::move(provider), options.poll_interval);
  if (service->connect(*kind, dbus_bus_name(options.instance)) < 0) return nullptr;
  service->run();
  return service;
}

int DbusService::connect(DbusBus kind, const std::string& name) {
  static const sd_bus_vtable vtable[] = {
      SD_BUS_VTABLE_START(0),
      VOLTAD_PROPERTY("State", "s"),
      VOLTAD_PROPERTY("Model", "s"),
      VOLTAD_PROPERTY("GpuBusId", "s"),
      VOLTAD_PROPERTY("NumaNode", "i"),
      VOLTAD_PROPERTY("VramBudgetBytes", "t"),
      VOLTAD_PROPERTY("VramUsedBytes", "t"),
      VOLTAD_PROPERTY("KvBlocksFree", "t"),
      VOLTAD_PROPERTY("RunningRequests", "u"),
      VOLTAD_PROPERTY("QueuedRequests", "u"),
      VOLTAD_PROPERTY("DecodeTokensPerSecond", "d"),
      SD_BUS_METHOD_WITH_NAMES("Reload", "", "", "sas", SD_BUS_PARAM(summary) SD_BUS_PARAM(notes),
                               DbusService::on_reload, SD_BUS_VTABLE_UNPRIVILEGED),
      SD_BUS_METHOD_WITH_NAMES("Drain", "", "", "sas", SD_BUS_PARAM(summary) SD_BUS_PARAM(notes),
                               DbusService::on_drain, SD_BUS_VTABLE_UNPRIVILEGED),
      SD_BUS_METHOD_WITH_NAMES("Resume", "", "", "sas", SD_BUS_PARAM(summary) SD_BUS_PARAM(notes),
                               DbusService::on_resume, SD_BUS_VTABLE_UNPRIVILEGED),
      SD_BUS_VTABLE_END};

  kind_ = kind;
  name_ = name;
  const char* which = bus_kind();
  int r = kind == DbusBus::System ? sd_bus_open_system_with_description(&bus_, "voltad")
                                  : sd_bus_open_user_with_description(&bus_, "voltad");
  if (r < 0) {
    spdlog::warn("D-Bus: cannot connect to the {} bus ({}); serving without the D-Bus interface",
                 which, std::strerror(-r));
    bus_ = nullptr;
    return r;
  }
  shown_ = provider_.properties();
  // The object first, so that a call arriving right after the name is ours finds it.
  r = sd_bus_add_object_vtable(bus_, &object_slot_, kDbusPath, kDbusInterface, vtable, this);
  if (r >= 0) r = sd_bus_request_name(bus_, name.c_str(), 0);
  if (r < 0) {
    std::string why = std::strerror(-r);
    if (r == -EEXIST)
      why = "another process owns it (a second voltad? give each instance its own server.instance)";
    else if (r == -EACCES || r == -EPERM)
      why =
          "the bus policy does not allow this user to own it (install "
          "packaging/dbus/org.voltad.Daemon1.conf in /usr/share/dbus-1/system.d and run voltad as "
          "the user voltad)";
    spdlog::warn(
        "D-Bus: cannot take the name {} on the {} bus: {}; serving without the D-Bus "
        "interface",
        name, which, why);
    drop();
    return r;
  }
  spdlog::info("D-Bus: {} on the {} bus", name, which);
  return 0;
}

void DbusService::run() {
  int fd = sd_bus_get_fd(bus_);
  boost::system::error_code ec;
  socket_.assign(fd, ec);
  if (ec) return lost(-ec.value());
  net::dispatch(strand_, [self = shared_from_this()] {
    self->process();
    self->poll();
  });
}

void DbusService::refresh() {
  net::post(strand_, [self = shared_from_this()] {
    if (!self->bus_) return;
    self->update_properties();
    self->process();
  });
}

void DbusService::process() {
  if (!bus_) return;
  for (;;) {
    // Each message (a Get among them) is answered with the present values:
    // read before every one, not once per batch (a Get that arrived while
    // the batch ran was answered from before a change; seen once in CI).
    update_properties();
    int r = sd_bus_process(bus_, nullptr);
    if (r < 0) return lost(r);
    if (r == 0) break;
  }
  wait();
}

void DbusService::wait() {
  int events = sd_bus_get_events(bus_);
  if (events < 0) return lost(events);
  auto self = shared_from_this();
  if ((events & POLLIN) && !reading_) {
    reading_ = true;
    socket_.async_wait(net::posix::stream_descriptor::wait_read,
                       [self](boost::system::error_code ec) {
                         self->reading_ = false;
                         if (!ec) self->process();
                       });
  }
  if ((events & POLLOUT) && !writing_) {
    writing_ = true;
    socket_.async_wait(net::posix::stream_descriptor::wait_write,
                       [self](boost::system::error_code ec) {
                         self->writing_ = false;
                         if (!ec) self->process();
                       });
  }
  // sd-bus's own deadlines (method call timeouts, the connection set-up),
  // absolute on CLOCK_MONOTONIC, which is steady_clock on Linux.
  uint64_t deadline = 0;
  if (sd_bus_get_timeout(bus_, &deadline) < 0 || deadline == UINT64_MAX) {
    bus_timer_.cancel();
    return;
  }
  uint64_t now = monotonic_usec();
  bus_timer_.expires_after(std::chrono::microseconds(deadline > now ? deadline - now : 0));
  bus_timer_.async_wait([self](boost::system::error_code ec) {
    if (!ec) self->process();
  });
}

void DbusService::update_properties() {
  DbusProperties now = provider_.properties();
  std::vector<std::string> changed = changed_dbus_properties(shown_, now);
  if (changed.empty()) return;
  shown_ = std::move(now);
  std::vector<char*> names;
  for (std::string& n : changed) names.push_back(n.data());
  names.push_back(nullptr);
  // sd-bus reads the new values through get_property, i.e. from shown_.
  int r = sd_bus_emit_properties_changed_strv(bus_, kDbusPath, kDbusInterface, names.data());
  if (r < 0) spdlog::debug("D-Bus: PropertiesChanged not sent: {}", std::strerror(-r));
}

void DbusService::poll() {
  poll_timer_.expires_after(poll_interval_);
  poll_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || !self->bus_) return;
    self->process();  // reads the properties first
    self->poll();
  });
}

void DbusService::lost(int error) {
  spdlog::warn(
      "D-Bus: the connection to the {} bus is lost ({}); serving without the D-Bus "
      "interface",
      bus_kind(), std::strerror(-error));
  drop();
}

void DbusService::close() {
  if (bus_ && sd_bus_is_open(bus_) > 0) update_properties();  // the last state reaches watchers
  drop();
}

void DbusService::drop() {
  if (!bus_) return;
  bus_timer_.cancel();
  poll_timer_.cancel();
  // sd-bus owns the fd and closes it; Asio only forgets it.
  if (socket_.is_open()) socket_.release();
  object_slot_ = sd_bus_slot_unref(object_slot_);
  bus_ = sd_bus_flush_close_unref(bus_);  // sends what is queued first
}

int DbusService::get_property(sd_bus*, const char*, const char*, const char* property,
                              sd_bus_message* reply, void* userdata, sd_bus_error* error) {
  const DbusProperties& p = static_cast<DbusService*>(userdata)->shown_;
  const std::string_view name = property;
  if (name == "State") return sd_bus_message_append(reply, "s", p.state.c_str());
  if (name == "Model") return sd_bus_message_append(reply, "s", p.model.c_str());
  if (name == "GpuBusId") return sd_bus_message_append(reply, "s", p.gpu_bus_id.c_str());
  if (name == "NumaNode") return sd_bus_message_append(reply, "i", p.numa_node);
  if (name == "VramBudgetBytes") return sd_bus_message_append(reply, "t", p.vram_budget_bytes);
  if (name == "VramUsedBytes") return sd_bus_message_append(reply, "t", p.vram_used_bytes);
  if (name == "KvBlocksFree") return sd_bus_message_append(reply, "t", p.kv_blocks_free);
  if (name == "RunningRequests") return sd_bus_message_append(reply, "u", p.running_requests);
  if (name == "QueuedRequests") return sd_bus_message_append(reply, "u", p.queued_requests);
  if (name == "DecodeTokensPerSecond")
    return sd_bus_message_append(reply, "d", p.decode_tokens_per_second);
  return sd_bus_error_setf(error, SD_BUS_ERROR_UNKNOWN_PROPERTY, "no property %s", property);
}

// "D-Bus :1.42 uid 1000": the caller, for the logs and the lifecycle.
std::string DbusService::describe_caller(sd_bus_message* m) {
  const char* sender = sd_bus_message_get_sender(m);
  std::string who = std::string("D-Bus ") + (sender ? sender : "?");
  sd_bus_creds* creds = nullptr;
  uid_t uid = 0;
  if (sd_bus_query_sender_creds(m, SD_BUS_CREDS_EUID, &creds) >= 0 &&
      sd_bus_creds_get_euid(creds, &uid) >= 0)
    who += " uid " + std::to_string(uid);
  sd_bus_creds_unref(creds);
  return who;
}

int DbusService::call(sd_bus_message* m, const char* method,
                      const std::function<DbusOutcome(const std::string&)>& action,
                      sd_bus_error* error) {
  const std::string caller = describe_caller(m);
  const DbusOutcome outcome = action(caller);
  spdlog::info("D-Bus: {} from {}: {}{}", method, caller, outcome.ok ? "done" : "refused",
               outcome.summary.empty() ? "" : ": " + outcome.summary);
  if (!outcome.ok) {
    std::string text = outcome.summary.empty() ? std::string(method) + " refused" : outcome.summary;
    for (const std::string& p : outcome.details) text += "\n" + p;
    return sd_bus_error_set(error, kRefused, text.c_str());
  }
  sd_bus_message* raw = nullptr;
  int r = sd_bus_message_new_method_return(m, &raw);
  if (r < 0) return r;
  MessagePtr reply(raw);
  std::vector<std::string> notes = outcome.details;
  std::vector<char*> strv;
  for (std::string& n : notes) strv.push_back(n.data());
  strv.push_back(nullptr);
  r = sd_bus_message_append(reply.get(), "s", outcome.summary.c_str());
  if (r >= 0) r = sd_bus_message_append_strv(reply.get(), strv.data());
  if (r >= 0) r = sd_bus_send(nullptr, reply.get(), nullptr);
  // The method's effect (State and the rest) is announced right after its reply.
  update_properties();
  return r;
}

int DbusService::on_reload(sd_bus_message* m, void* userdata, sd_bus_error* error) {
  auto* self = static_cast<DbusService*>(userdata);
  return self->call(m, "Reload", self->provider_.reload, error);
}

int DbusService::on_drain(sd_bus_message* m, void* userdata, sd_bus_error* error) {
  auto* self = static_cast<DbusService*>(userdata);
  return self->call(m, "Drain", self->provider_.drain, error);
}

int DbusService::on_resume(sd_bus_message* m, void* userdata, sd_bus_error* error) {
  auto* self = static_cast<DbusService*>(userdata);
  return self->call(m, "Resume", self->provider_.resume, error);
}

}  // namespace voltad
