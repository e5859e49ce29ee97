// Start-up checks on the engine thread, between loading and READY=1.
//
// warm_up: one forward pass of one token through the backend, so that
// "ready" means the weights, the KV cache and the kernels have all worked
// once (a CUDA backend also builds its lazily made state here), and the
// first client does not pay for it.
//
// Test only: with $VOLTAD_TEST_HANG_FILE set, the backend is wrapped so that
// a forward pass blocks while that file exists -- an engine stuck the way a
// hung GPU kernel leaves it -- so tests can show the watchdog pings stop.
// Never set it in production; voltad logs a warning when it is set.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/backend.h"
#include "engine/result.h"

namespace voltad {

// One token (`token`, e.g. BOS) at position 0 in a KV slot no request uses
// yet; frees the slot afterwards.
Status warm_up(Backend& backend, int32_t token);

// $VOLTAD_TEST_HANG_FILE, if set (test only).
std::optional<std::string> hang_file_for_tests();
std::unique_ptr<Backend> make_hanging_backend_for_tests(std::unique_ptr<Backend> inner,
                                                        std::string hang_file);

}  // namespace voltad
