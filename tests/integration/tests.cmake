# Integration tests: they drive the real binaries. Included from
# tests/CMakeLists.txt when the daemon is built. Label: integration.
set(VOLTAD_INTEGRATION_ENV
  "VOLTAD_SOURCE_DIR=${CMAKE_SOURCE_DIR};VOLTAD_SHARED_DIR=${CMAKE_SOURCE_DIR}/../shared;VOLTAD_BIN_DIR=${CMAKE_BINARY_DIR}/bin")

# Under ThreadSanitizer (VOLTAD_SANITIZE=thread, scripts/tsan.sh) the CPU
# backend generates about four times slower: serve_api takes about 4 minutes
# there on a 2-core machine.
set(VOLTAD_INTEGRATION_TIMEOUT 300)
if(VOLTAD_SANITIZE STREQUAL "thread")
  set(VOLTAD_INTEGRATION_TIMEOUT 900)
endif()

function(voltad_integration_test name script)
  add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/${script})
  set_tests_properties(${name} PROPERTIES LABELS integration SKIP_RETURN_CODE 77
                       ENVIRONMENT "${VOLTAD_INTEGRATION_ENV}" TIMEOUT ${VOLTAD_INTEGRATION_TIMEOUT})
endfunction()

voltad_integration_test(cli_config cli_config.sh)
include(${CMAKE_CURRENT_LIST_DIR}/placement.cmake)
voltad_integration_test(plan_command plan_command.sh)
voltad_integration_test(serve_api serve_api.sh)
voltad_integration_test(serve_concurrency serve_concurrency.sh)
voltad_integration_test(serve_robustness serve_robustness.sh)
voltad_integration_test(serve_keepalive serve_keepalive.sh)
voltad_integration_test(serve_socket serve_socket.sh)
voltad_integration_test(serve_openai_sdk serve_openai_sdk.sh)
voltad_integration_test(vram_guard vram_guard.sh)
# The VRAM guard on a real GPU (scripts/device-vram-guard.sh runs it there):
# skipped without an NVIDIA GPU or PyTorch on CUDA.
if(VOLTAD_CUDA_ENABLED)
  add_test(NAME vram_guard_gpu COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/vram_guard_gpu.sh)
  set_tests_properties(vram_guard_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
                       ENVIRONMENT "${VOLTAD_INTEGRATION_ENV}" TIMEOUT 1500)
endif()
voltad_integration_test(dbus_interface dbus_interface.sh)
voltad_integration_test(systemd_notify systemd_notify.sh)
voltad_integration_test(systemd_socket_activation systemd_socket_activation.sh)
voltad_integration_test(systemd_units systemd_units.sh)
