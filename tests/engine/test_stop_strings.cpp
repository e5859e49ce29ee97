#include <doctest/doctest.h>

#include "engine/stop_strings.h"

using voltad::StopStringFilter;

TEST_CASE("text before a stop string is released, the stop string never") {
  StopStringFilter f({"\nUser:"});
  std::string out;
  for (const char* piece : {"Paris is", " the capital.", "\nUs", "er:", " more"}) out += f.push(piece);
  CHECK(out == "Paris is the capital.");
  CHECK(f.stopped());
  CHECK(f.push("anything").empty());
}

TEST_CASE("a partial match is held back, then released when it turns out not to be one") {
  StopStringFilter f({"###"});
  CHECK(f.push("a #") == "a ");
  CHECK(f.push("#") == "");
  CHECK(f.push("b") == "##b");
  CHECK_FALSE(f.stopped());
  CHECK(f.push("c#") == "c");
  CHECK(f.flush() == "#");
}

TEST_CASE("the earliest of several stop strings wins") {
  StopStringFilter f({"STOP", "END"});
  CHECK(f.push("one END two STOP") == "one ");
  CHECK(f.stopped());
}

TEST_CASE("no stop strings: everything passes at once") {
  StopStringFilter f({});
  CHECK(f.push("abc") == "abc");
  CHECK(f.flush().empty());
}
