// The D-Bus service against a real, private dbus-daemon: properties, their
// PropertiesChanged signals, the methods' replies and refusals, a taken
// name, and a bus that goes away. The daemon's wiring (lifecycle, /health)
// is tested end to end by tests/integration/dbus_interface.sh.
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config.h"
#include "daemon/dbus_service.h"

extern char** environ;

namespace voltad {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string find_in_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    fs::path candidate = fs::path(dirs.substr(start, end - start)) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return {};
}

// A dbus-daemon of the session kind on a socket in a temporary directory.
class PrivateBus {
 public:
  PrivateBus() {
    std::string program = find_in_path("dbus-daemon");
    REQUIRE_MESSAGE(!program.empty(),
                    "dbus-daemon is missing (Debian: dbus-daemon; scripts/install-deps.sh)");
    char tmpl[] = "/tmp/voltad-dbus-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/bus";
    address_ = "unix:path=" + socket_;
    std::string address_arg = "--address=" + address_;
    const char* argv[] = {program.c_str(), "--session",         "--nofork",
                          "--nopidfile",   address_arg.c_str(), nullptr};
    REQUIRE(::posix_spawn(&pid_, program.c_str(), nullptr, nullptr, const_cast<char**>(argv),
                          environ) == 0);
    // The socket file exists from bind(); connections succeed only from
    // listen() on (a connect in between is refused: seen once in CI).
    bool up = false;
    for (int i = 0; i < 500 && !(up = accepts_connections()); ++i)
      std::this_thread::sleep_for(10ms);
    REQUIRE_MESSAGE(up, "dbus-daemon does not accept connections on " << socket_);
  }
  bool accepts_connections() const {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
    const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
  }
  ~PrivateBus() {
    stop();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  const std::string& address() const { return address_; }

 private:
  std::string dir_, socket_, address_;
  pid_t pid_ = -1;
};

// What the provider shows, changed by the test thread, read on the strand.
struct FakeDaemon {
  std::mutex mu;
  DbusProperties props;
  std::vector<std::string> callers;

  DbusProvider provider() {
    DbusProvider p;
    p.properties = [this] {
      std::lock_guard lock(mu);
      return props;
    };
    p.drain = [this](const std::string& caller) {
      std::lock_guard lock(mu);
      callers.push_back(caller);
      props.state = "draining";
      return DbusOutcome{true, "draining: no new requests", {"2 requests still running"}};
    };
    p.resume = [this](const std::string& caller) {
      std::lock_guard lock(mu);
      callers.push_back(caller);
      if (props.state != "draining") return DbusOutcome{false, "not draining", {}};
      props.state = "ready";
      return DbusOutcome{true, "ready", {}};
    };
    p.reload = [](const std::string&) {
      return DbusOutcome{false,
                         "voltad.yaml is invalid; the old config stays",
                         {"voltad.yaml:3:5: unknown key 'modle'", "voltad.yaml:9:1: bad value"}};
    };
    return p;
  }
  void set(const std::function<void(DbusProperties&)>& change) {
    std::lock_guard lock(mu);
    change(props);
  }
};

// The client side: a plain sd-bus connection used from the test thread only.
class Client {
 public:
  Client() {
    REQUIRE(sd_bus_open_user(&bus_) >= 0);
    REQUIRE(sd_bus_match_signal(bus_, &match_, nullptr, kDbusPath,
                                "org.freedesktop.DBus.Properties", "PropertiesChanged",
                                &Client::on_changed, this) >= 0);
  }
  ~Client() {
    sd_bus_slot_unref(match_);
    sd_bus_flush_close_unref(bus_);
  }
  sd_bus* bus() { return bus_; }

  // Waits up to 5 s for a PropertiesChanged naming `property`; returns every
  // name that signal carried.
  std::vector<std::string> wait_for_change(const std::string& property) {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      for (auto& names : signals_)
        for (auto& n : names)
          if (n == property) return names;
      int r = sd_bus_process(bus_, nullptr);
      REQUIRE(r >= 0);
      if (r == 0) sd_bus_wait(bus_, 100000);
    }
    return {};
  }
  void forget_signals() { signals_.clear(); }

 private:
  static int on_changed(sd_bus_message* m, void* userdata, sd_bus_error*) {
    auto* self = static_cast<Client*>(userdata);
    const char* interface = nullptr;
    if (sd_bus_message_read(m, "s", &interface) < 0 || std::string(interface) != kDbusInterface)
      return 0;
    std::vector<std::string> names;
    sd_bus_message_enter_container(m, 'a', "{sv}");
    while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
      const char* name = nullptr;
      sd_bus_message_read(m, "s", &name);
      names.emplace_back(name);
      sd_bus_message_skip(m, "v");
      sd_bus_message_exit_container(m);
    }
    self->signals_.push_back(names);
    return 0;
  }

  sd_bus* bus_ = nullptr;
  sd_bus_slot* match_ = nullptr;
  std::vector<std::vector<std::string>> signals_;
};

std::string get_string(sd_bus* bus, const std::string& name, const char* property) {
  char* value = nullptr;
  sd_bus_error error = SD_BUS_ERROR_NULL;
  int r = sd_bus_get_property_string(bus, name.c_str(), kDbusPath, kDbusInterface, property, &error,
                                     &value);
  INFO(property << ": " << (error.message ? error.message : ""));
  sd_bus_error_free(&error);
  REQUIRE(r >= 0);
  std::string out = value;
  free(value);
  return out;
}

template <class T>
T get_trivial(sd_bus* bus, const std::string& name, const char* property, char type) {
  T value{};
  sd_bus_error error = SD_BUS_ERROR_NULL;
  int r = sd_bus_get_property_trivial(bus, name.c_str(), kDbusPath, kDbusInterface, property,
                                      &error, type, &value);
  INFO(property << ": " << (error.message ? error.message : ""));
  sd_bus_error_free(&error);
  REQUIRE(r >= 0);
  return value;
}

// The io_context on two threads, as the daemon runs it.
struct Loop {
  boost::asio::io_context ioc{2};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{ioc.get_executor()};
  std::vector<std::thread> threads;
  void run() {
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { ioc.run(); });
  }
  ~Loop() { stop(); }
  void stop() {
    ioc.stop();
    for (auto& t : threads) t.join();
    threads.clear();
  }
};

TEST_CASE("a private bus: properties, PropertiesChanged, methods, a taken name, a lost bus") {
  PrivateBus bus;
  ::setenv("DBUS_SESSION_BUS_ADDRESS", bus.address().c_str(), 1);

  FakeDaemon daemon;
  daemon.set([](DbusProperties& p) {
    p.state = "ready";
    p.model = "SmolLM2-135M";
    p.gpu_bus_id = "0000:b7:00.0";
    p.numa_node = 1;
    p.vram_budget_bytes = 29ull << 30;
    p.vram_used_bytes = 7ull << 30;
    p.kv_blocks_free = 4000;
    p.running_requests = 2;
    p.queued_requests = 1;
    p.decode_tokens_per_second = 123.5;
  });
  Loop loop;
  DbusOptions options;
  options.bus = "user";
  options.instance = "test0";
  options.poll_interval = 50ms;
  auto service = DbusService::start(loop.ioc, options, daemon.provider());
  REQUIRE(service);
  CHECK(service->bus_name() == "org.voltad.Daemon1.test0");
  loop.run();

  const std::string name = "org.voltad.Daemon1.test0";
  Client client;
  sd_bus* c = client.bus();

  SUBCASE("every property reads back with its type") {
    CHECK(get_string(c, name, "State") == "ready");
    CHECK(get_string(c, name, "Model") == "SmolLM2-135M");
    CHECK(get_string(c, name, "GpuBusId") == "0000:b7:00.0");
    CHECK(get_trivial<int32_t>(c, name, "NumaNode", 'i') == 1);
    CHECK(get_trivial<uint64_t>(c, name, "VramBudgetBytes", 't') == (29ull << 30));
    CHECK(get_trivial<uint64_t>(c, name, "VramUsedBytes", 't') == (7ull << 30));
    CHECK(get_trivial<uint64_t>(c, name, "KvBlocksFree", 't') == 4000);
    CHECK(get_trivial<uint32_t>(c, name, "RunningRequests", 'u') == 2);
    CHECK(get_trivial<uint32_t>(c, name, "QueuedRequests", 'u') == 1);
    CHECK(get_trivial<double>(c, name, "DecodeTokensPerSecond", 'd') == 123.5);
    // A Get sees a change at once, before the next poll could announce it.
    daemon.set([](DbusProperties& p) { p.kv_blocks_free = 3999; });
    CHECK(get_trivial<uint64_t>(c, name, "KvBlocksFree", 't') == 3999);
  }

  SUBCASE("a changed counter is announced, and only what changed") {
    daemon.set([](DbusProperties& p) {
      p.running_requests = 5;
      p.decode_tokens_per_second = 250;
    });
    std::vector<std::string> names = client.wait_for_change("RunningRequests");
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"DecodeTokensPerSecond", "RunningRequests"});
    CHECK(get_trivial<uint32_t>(c, name, "RunningRequests", 'u') == 5);
  }

  SUBCASE("Drain replies with its summary and notes, then State changes; Resume undoes it") {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_message* reply = nullptr;
    int r =
        sd_bus_call_method(c, name.c_str(), kDbusPath, kDbusInterface, "Drain", &error, &reply, "");
    INFO((error.message ? error.message : ""));
    REQUIRE(r >= 0);
    const char* summary = nullptr;
    char** notes = nullptr;
    REQUIRE(sd_bus_message_read(reply, "s", &summary) >= 0);
    CHECK(std::string(summary) == "draining: no new requests");
    REQUIRE(sd_bus_message_read_strv(reply, &notes) >= 0);
    REQUIRE(notes != nullptr);
    CHECK(std::string(notes[0]) == "2 requests still running");
    CHECK(notes[1] == nullptr);
    for (char** n = notes; *n; ++n) free(*n);
    free(notes);
    sd_bus_message_unref(reply);
    CHECK(client.wait_for_change("State") == std::vector<std::string>{"State"});
    CHECK(get_string(c, name, "State") == "draining");
    {
      std::lock_guard lock(daemon.mu);
      REQUIRE(daemon.callers.size() == 1);
      CHECK(daemon.callers[0].rfind("D-Bus :", 0) == 0);
      CHECK(daemon.callers[0].find(" uid " + std::to_string(::geteuid())) != std::string::npos);
    }

    client.forget_signals();
    r = sd_bus_call_method(c, name.c_str(), kDbusPath, kDbusInterface, "Resume", &error, &reply,
                           "");
    REQUIRE(r >= 0);
    sd_bus_message_unref(reply);
    CHECK(!client.wait_for_change("State").empty());
    CHECK(get_string(c, name, "State") == "ready");

    // A second Resume is refused by the provider: an error, no change.
    r = sd_bus_call_method(c, name.c_str(), kDbusPath, kDbusInterface, "Resume", &error, &reply,
                           "");
    CHECK(r < 0);
    CHECK(sd_bus_error_has_name(&error, "org.voltad.Daemon1.Error.Refused"));
    CHECK(std::string(error.message) == "not draining");
    sd_bus_error_free(&error);
  }

  SUBCASE("a refused Reload is an error carrying every problem") {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_message* reply = nullptr;
    int r = sd_bus_call_method(c, name.c_str(), kDbusPath, kDbusInterface, "Reload", &error, &reply,
                               "");
    CHECK(r < 0);
    CHECK(sd_bus_error_has_name(&error, "org.voltad.Daemon1.Error.Refused"));
    CHECK(std::string(error.message) ==
          "voltad.yaml is invalid; the old config stays\n"
          "voltad.yaml:3:5: unknown key 'modle'\n"
          "voltad.yaml:9:1: bad value");
    sd_bus_error_free(&error);
  }

  SUBCASE("a second daemon with the same instance name serves without D-Bus") {
    FakeDaemon other;
    CHECK(DbusService::start(loop.ioc, options, other.provider()) == nullptr);
    // The first still answers.
    CHECK(get_string(c, name, "State") == "ready");
  }

  SUBCASE("a bus that goes away is dropped; the loop goes on") {
    bus.stop();
    std::this_thread::sleep_for(200ms);
    std::promise<void> ran;
    boost::asio::post(loop.ioc, [&] { ran.set_value(); });
    CHECK(ran.get_future().wait_for(2s) == std::future_status::ready);
  }

  loop.stop();
  service->close();
}

TEST_CASE("no bus to reach is not an error") {
  ::setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/voltad-test-bus", 1);
  boost::asio::io_context ioc;
  FakeDaemon daemon;
  DbusOptions options;
  options.bus = "user";
  CHECK(DbusService::start(ioc, options, daemon.provider()) == nullptr);
  options.bus = "off";
  CHECK(DbusService::start(ioc, options, daemon.provider()) == nullptr);
}

TEST_CASE("which bus auto means") {
  CHECK(choose_dbus_bus("off", 1000, true) == std::nullopt);
  CHECK(choose_dbus_bus("system", 1000, true) == DbusBus::System);
  CHECK(choose_dbus_bus("user", 0, false) == DbusBus::User);
  CHECK(choose_dbus_bus("auto", 0, true) == DbusBus::System);     // root
  CHECK(choose_dbus_bus("auto", 998, false) == DbusBus::System);  // a service user, no session
  CHECK(choose_dbus_bus("auto", 1000, true) == DbusBus::User);    // a user instance
}

TEST_CASE("bus names and instance names") {
  CHECK(dbus_bus_name("") == "org.voltad.Daemon1");
  CHECK(dbus_bus_name("gpu1") == "org.voltad.Daemon1.gpu1");
  CHECK(config::check_instance_name("").empty());
  CHECK(config::check_instance_name("gpu0").empty());
  CHECK(config::check_instance_name("_a1").empty());
  CHECK(!config::check_instance_name("0").empty());  // an element cannot start with a digit
  CHECK(!config::check_instance_name("gpu-0").empty());
  CHECK(!config::check_instance_name("gpu.0").empty());  // would be two elements
}

TEST_CASE("only the properties that differ are named") {
  DbusProperties a;
  a.state = "ready";
  DbusProperties b = a;
  CHECK(changed_dbus_properties(a, b).empty());
  b.state = "draining";
  b.numa_node = 0;
  b.kv_blocks_free = 7;
  CHECK(changed_dbus_properties(a, b) ==
        std::vector<std::string>{"State", "NumaNode", "KvBlocksFree"});
}

}  // namespace
}  // namespace voltad
