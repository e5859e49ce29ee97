// Reading what should be small (a config file, a topology's XML, a prompt)
// whole, with a ceiling: /dev/zero or a runaway pipe given by mistake would
// otherwise grow the process until the OOM killer came.
#pragma once

#include <cstddef>
#include <istream>
#include <string>

#include "engine/result.h"

namespace voltad {

// All of `in`, or an error: more than `limit` bytes ("WHAT is larger than
// 16 MiB, the most read"), or a read that failed (the system's reason, such
// as "Is a directory" for a directory on standard input). `what` names the
// source in the messages.
Result<std::string> read_limited(std::istream& in, size_t limit, const std::string& what);

}  // namespace voltad
