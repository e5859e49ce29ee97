// voltactl's default socket: the user's own daemon's, else the system
// service's (/run/voltad/voltad.sock) when only that one exists.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/voltactl_client.h"

namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/voltactl-socket-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

void touch(const fs::path& p) {
  std::ofstream(p).put('x');
}

}  // namespace

TEST_CASE("the user's own socket wins when it exists") {
  TempDir d;
  touch(d.path / "own.sock");
  touch(d.path / "system.sock");
  CHECK(voltad::ctl::pick_socket_path((d.path / "own.sock").string(),
                                      (d.path / "system.sock").string()) ==
        (d.path / "own.sock").string());
}

TEST_CASE("without a daemon of one's own, the system service's socket") {
  TempDir d;
  touch(d.path / "system.sock");
  CHECK(voltad::ctl::pick_socket_path((d.path / "own.sock").string(),
                                      (d.path / "system.sock").string()) ==
        (d.path / "system.sock").string());
}

TEST_CASE("with neither, the user's own path (the one an error message should name)") {
  TempDir d;
  CHECK(voltad::ctl::pick_socket_path((d.path / "own.sock").string(),
                                      (d.path / "system.sock").string()) ==
        (d.path / "own.sock").string());
}

TEST_CASE("VOLTAD_SOCKET overrides both") {
  ::setenv("VOLTAD_SOCKET", "/somewhere/else.sock", 1);
  CHECK(voltad::ctl::default_socket_path() == "/somewhere/else.sock");
  ::unsetenv("VOLTAD_SOCKET");
}
