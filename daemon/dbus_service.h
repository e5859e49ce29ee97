// voltad's D-Bus interface: the name org.voltad.Daemon1 (org.voltad.Daemon1.NAME
// for an instance), the object /org/voltad/Daemon1, the interface
// org.voltad.Daemon1 with read-only properties and the methods Reload, Drain
// and Resume. docs/DBUS.md describes it for users.
//
// sd-bus runs on the daemon's Asio loop, with no thread of its own: the bus
// socket is an Asio descriptor whose read/write readiness (sd_bus_get_events)
// and a timer (sd_bus_get_timeout) call sd_bus_process. An sd_bus is not
// thread-safe, and the loop runs on several threads, so every use of it sits
// on one strand.
//
// Property values are read from a provider function: at every poll (1 s), at
// refresh(), and before each batch of incoming messages (so a Get answers
// with the present value). PropertiesChanged names only what changed.
#pragma once

#include <sys/types.h>
#include <systemd/sd-bus.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace voltad {

inline constexpr const char* kDbusName = "org.voltad.Daemon1";
inline constexpr const char* kDbusPath = "/org/voltad/Daemon1";
inline constexpr const char* kDbusInterface = "org.voltad.Daemon1";

// The properties at one moment; each field is the property named beside it.
struct DbusProperties {
  std::string state;                    // State (s): loading, ready, draining, degraded, stopping
  std::string model;                    // Model (s): the served model's name
  std::string gpu_bus_id;               // GpuBusId (s): "0000:b7:00.0"; "" without a GPU
  int32_t numa_node = -1;               // NumaNode (i): the node bound to; -1: none
  uint64_t vram_budget_bytes = 0;       // VramBudgetBytes (t): 0 without a device budget
  uint64_t vram_used_bytes = 0;         // VramUsedBytes (t): weights + KV + workspace on the GPU
  uint64_t kv_blocks_free = 0;          // KvBlocksFree (t)
  uint32_t running_requests = 0;        // RunningRequests (u)
  uint32_t queued_requests = 0;         // QueuedRequests (u)
  double decode_tokens_per_second = 0;  // DecodeTokensPerSecond (d): all sequences together
};

// The names of the properties that differ between two snapshots.
std::vector<std::string> changed_dbus_properties(const DbusProperties& before,
                                                 const DbusProperties& after);

// A method's outcome: done, with a summary and notes for the caller (what a
// reload could not apply), or refused, with every problem. A done method
// replies (s summary, as notes); a refused one is the error
// org.voltad.Daemon1.Error.Refused whose message is the summary and the
// problems, one a line.
struct DbusOutcome {
  bool ok = true;
  std::string summary;
  std::vector<std::string> details;  // ok: notes; refused: problems
};

// What the interface shows and does. Each function is called on the
// service's strand, i.e. on an I/O thread beside the others: it must be
// thread-safe with respect to the rest of the daemon, and quick. `caller`
// names who asked, for the logs ("D-Bus :1.42 uid 1000").
struct DbusProvider {
  std::function<DbusProperties()> properties;
  std::function<DbusOutcome(const std::string& caller)> reload;  // Reload()
  std::function<DbusOutcome(const std::string& caller)> drain;   // Drain(): finish, take no more
  std::function<DbusOutcome(const std::string& caller)> resume;  // Resume(): take requests again
};

enum class DbusBus { System, User };

struct DbusOptions {
  std::string bus = "auto";  // server.dbus: auto, system, user or off
  std::string instance;      // server.instance: "gpu0" -> org.voltad.Daemon1.gpu0
  std::chrono::milliseconds poll_interval{1000};
};

// org.voltad.Daemon1, or org.voltad.Daemon1.INSTANCE.
std::string dbus_bus_name(const std::string& instance);

// The bus a setting means for this process; nullopt for "off". "auto" is the
// system bus for root or when no user session is visible (a system service),
// the user bus when $DBUS_SESSION_BUS_ADDRESS or $XDG_RUNTIME_DIR is set.
std::optional<DbusBus> choose_dbus_bus(const std::string& setting, uid_t euid,
                                       bool user_session_visible);

class DbusService : public std::enable_shared_from_this<DbusService> {
 public:
  // Connects, claims the name, exports the object and starts polling.
  // nullptr when the setting is off, or, after a warning, when the bus is
  // unreachable or the name is taken: voltad serves without D-Bus then.
  // Called before the loop runs (the name request waits for its reply).
  static std::shared_ptr<DbusService> start(boost::asio::io_context& ioc,
                                            const DbusOptions& options, DbusProvider provider);

  DbusService(boost::asio::io_context& ioc, DbusProvider provider,
              std::chrono::milliseconds poll_interval);
  ~DbusService();
  DbusService(const DbusService&) = delete;
  DbusService& operator=(const DbusService&) = delete;

  // Thread-safe: read the properties now (after a state change) rather than
  // at the next poll.
  void refresh();
  // After the loop has stopped (no handler running): sends the last
  // changes, flushes and leaves the bus.
  void close();

  const std::string& bus_name() const { return name_; }
  const char* bus_kind() const { return kind_ == DbusBus::System ? "system" : "user"; }

 private:
  // sd-bus callbacks (userdata is the service).
  static int get_property(sd_bus* bus, const char* path, const char* interface,
                          const char* property, sd_bus_message* reply, void* userdata,
                          sd_bus_error* error);
  static int on_reload(sd_bus_message* m, void* userdata, sd_bus_error* error);
  static int on_drain(sd_bus_message* m, void* userdata, sd_bus_error* error);
  static int on_resume(sd_bus_message* m, void* userdata, sd_bus_error* error);
  static std::string describe_caller(sd_bus_message* m);
  int call(sd_bus_message* m, const char* method,
           const std::function<DbusOutcome(const std::string&)>& action, sd_bus_error* error);

  int connect(DbusBus kind, const std::string& name);
  void run();                // first wait
  void process();            // on the strand: sd_bus_process until idle, then wait again
  void wait();               // arm the descriptor waits and the timeout timer
  void update_properties();  // read the provider, emit PropertiesChanged for what changed
  void poll();               // the poll timer
  void lost(int error);      // the connection broke: drop it, keep serving
  void drop();               // leave the bus (what is queued is sent first)

  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  boost::asio::posix::stream_descriptor socket_;
  boost::asio::steady_timer bus_timer_;
  boost::asio::steady_timer poll_timer_;
  DbusProvider provider_;
  std::chrono::milliseconds poll_interval_;
  sd_bus* bus_ = nullptr;
  sd_bus_slot* object_slot_ = nullptr;
  DbusBus kind_ = DbusBus::User;
  std::string name_;
  DbusProperties shown_;  // what the last PropertiesChanged (or the start) announced
  bool reading_ = false, writing_ = false;
};

}  // namespace voltad
