#include "engine/read_limited.h"

#include <cerrno>
#include <cstring>

namespace voltad {

namespace {

std::string mib(size_t bytes) {
  return bytes % (1u << 20) == 0 ? std::to_string(bytes >> 20) + " MiB"
                                 : std::to_string(bytes) + " bytes";
}

}  // namespace

Result<std::string> read_limited(std::istream& in, size_t limit, const std::string& what) {
  std::string out;
  char buffer[1 << 16];
  errno = 0;
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    out.append(buffer, size_t(in.gcount()));
    if (out.size() > limit)
      return make_error(what + " is larger than " + mib(limit) + ", the most read");
    if (!in) break;
  }
  if (in.bad() || (!in.eof() && in.fail()))
    return make_error("cannot read " + what + ": " +
                      (errno ? std::strerror(errno) : "the read failed"));
  return out;
}

}  // namespace voltad
