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

// The end of a generation: the decoder's last text (U+FFFD for a cut
// character) comes after what the filter holds, and with it may complete a
// stop string. (The callers once wrote push(last) + flush(), whose order
// of evaluation C++ leaves open: GCC flushed first, so the held text came
// out before the last, or the last was held and lost.)
TEST_CASE("finish: the last text after the held one, checked with it") {
  const std::string cut = "\xEF\xBF\xBD";  // U+FFFD
  StopStringFilter a({" X"});
  CHECK(a.push("\xF0\x9F\x98\x8A ") == "\xF0\x9F\x98\x8A");  // the space held
  CHECK(a.finish(cut) == " " + cut);
  CHECK_FALSE(a.stopped());

  StopStringFilter b({"\xF0\x9F\x98\x8A " + cut});
  CHECK(b.push("ok \xF0\x9F\x98\x8A ") == "ok ");
  CHECK(b.finish(cut).empty());  // completes the stop string
  CHECK(b.stopped());

  StopStringFilter c({cut + "X"});
  CHECK(c.push("ab") == "ab");
  CHECK(c.finish(cut) == cut);  // held as a possible start, then released
}

TEST_CASE("a marker a stop string names ends the stream: held text, then the decoder's last") {
  StopStringFilter f({"<|im_start|>", "ab!"});
  CHECK(f.push("xab") == "x");  // "ab" held: a possible start of "ab!"
  CHECK_FALSE(f.names_marker("<|fim_pad|>"));
  CHECK(f.names_marker("<|im_start|>"));
  const std::string cut = "\xEF\xBF\xBD";  // the decoder's flushed half character
  CHECK(f.stop_at_marker(cut) == "ab" + cut);
  CHECK(f.stopped());
  CHECK(f.push("more").empty());
  CHECK(f.stop_at_marker("z").empty());
  StopStringFilter part({"<|im_start|>x"});  // only whole stop strings name a marker
  CHECK_FALSE(part.names_marker("<|im_start|>"));
  // The last text may itself complete a stop string: cut there.
  StopStringFilter g({"a" + cut});
  CHECK(g.push("ba") == "b");
  CHECK(g.stop_at_marker(cut).empty());
  CHECK(g.stopped());
}
