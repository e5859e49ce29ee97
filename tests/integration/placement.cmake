# Placement on this machine (issue 6): the probe applies a plan to itself and
# checks /proc; placement_cli.sh drives voltad --print-placement and the
# probe's --pid mode. Included from tests.cmake. Label: integration.
add_executable(placement_probe ${CMAKE_SOURCE_DIR}/tests/daemon/placement_probe.cpp)
target_link_libraries(placement_probe PRIVATE voltad_daemon voltad_warnings)

# Each run is its own process: a placement is applied once, before threads.
function(voltad_placement_probe name)
  add_test(NAME ${name} COMMAND placement_probe ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS integration ENVIRONMENT "${VOLTAD_INTEGRATION_ENV}"
                       TIMEOUT 60)
endfunction()

voltad_placement_probe(placement_apply_node0 numa=0)
voltad_placement_probe(placement_apply_narrow numa=0 cpus=narrow threads=3)
voltad_placement_probe(placement_apply_preferred numa=0 cpus=all-threads membind=preferred)
voltad_placement_probe(placement_apply_interleave numa=0 membind=interleave threads=2)
voltad_placement_probe(placement_apply_membind_off numa=0 membind=off)
voltad_placement_probe(placement_apply_numa_off numa=off threads=2)
voltad_placement_probe(placement_apply_auto numa=auto cpus=narrow)
# hwloc's process-wide CPU binding reaches a thread that already runs; the
# memory policy cannot, which is warned about, or refused under strict.
voltad_placement_probe(placement_apply_late numa=0 cpus=narrow early_thread=true)
voltad_placement_probe(placement_strict_refuses numa=0 early_thread=true strict=true expect=refused)

voltad_integration_test(placement_cli placement_cli.sh)

# The daemon applies its placement at start: every thread of a running voltad
# on the planned CPUs, /health, /metrics and voltactl status report it.
voltad_integration_test(placement_daemon placement_daemon.sh)

# On a GPU machine: after the start-up placement CUDA sees exactly the
# planned GPU, for each GPU in turn. Needs no CUDA toolkit (the driver is
# opened at run time); skipped (77) where there is no NVIDIA GPU or driver.
add_executable(placement_gpu_check ${CMAKE_SOURCE_DIR}/tests/daemon/placement_gpu_check.cpp)
target_link_libraries(placement_gpu_check PRIVATE voltad_daemon voltad_warnings ${CMAKE_DL_LIBS})
add_test(NAME placement_gpu_check COMMAND placement_gpu_check --each)
set_tests_properties(placement_gpu_check PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 120)
