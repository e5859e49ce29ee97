# Test helpers. doctest comes from Debian's doctest-dev where it is installed;
# on the GPU machine (no Debian packages) tests/third_party has no copy, so
# VOLTAD_DOCTEST_DIR may point at an unpacked doctest-dev.
find_path(VOLTAD_DOCTEST_INCLUDE doctest/doctest.h
          HINTS ${VOLTAD_DOCTEST_DIR} ${VOLTAD_DOCTEST_DIR}/usr/include)
if(NOT VOLTAD_DOCTEST_INCLUDE)
  message(FATAL_ERROR "doctest not found: run scripts/install-deps.sh "
                      "(or pass -DVOLTAD_DOCTEST_DIR=<unpacked doctest-dev>)")
endif()
add_library(voltad_doctest_main STATIC ${CMAKE_SOURCE_DIR}/tests/doctest_main.cpp)
target_include_directories(voltad_doctest_main PUBLIC ${VOLTAD_DOCTEST_INCLUDE})

# Exit code 77 means "skipped": GPU tests return it where no CUDA device exists,
# and ctest reports them as skipped, never as passed.
set(VOLTAD_SKIP_CODE 77)

# voltad_test(NAME LABEL SOURCES... LIBS ...): one doctest executable, one ctest.
function(voltad_test name label)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE voltad_doctest_main voltad_warnings ${T_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS ${label}
    SKIP_RETURN_CODE ${VOLTAD_SKIP_CODE}
    ENVIRONMENT "VOLTAD_SOURCE_DIR=${CMAKE_SOURCE_DIR};VOLTAD_SHARED_DIR=${CMAKE_SOURCE_DIR}/../shared;VOLTAD_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
endfunction()
