# Packaging tests (label integration): the man pages against the binaries,
# and the .deb built from this tree, linted, and installed into a fresh
# Debian 12 root. Included from tests/CMakeLists.txt with the daemon.
set(VOLTAD_PACKAGING_ENV
  "VOLTAD_SOURCE_DIR=${CMAKE_SOURCE_DIR};VOLTAD_BUILD_DIR=${CMAKE_BINARY_DIR};VOLTAD_BIN_DIR=${CMAKE_BINARY_DIR}/bin")

add_test(NAME man_pages COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/man_pages.sh)
set_tests_properties(man_pages PROPERTIES LABELS integration SKIP_RETURN_CODE 77
                     ENVIRONMENT "${VOLTAD_PACKAGING_ENV}" TIMEOUT 120)

# Mostly waiting for the mirror and dpkg: about 3-5 minutes, most of it
# debootstrap (less with its download cache warm).
add_test(NAME deb_package COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/deb_package.sh)
set_tests_properties(deb_package PROPERTIES LABELS integration SKIP_RETURN_CODE 77
                     ENVIRONMENT "${VOLTAD_PACKAGING_ENV}" TIMEOUT 1500)
