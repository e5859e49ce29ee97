# Where `cmake --install` puts voltad, and the Debian package CPack builds
# from it (scripts/build-deb.sh; docs/OPERATIONS.md lists the files).
#
# The layout is Debian 12's, fixed, because the units and the config name
# these paths (ExecStart=/usr/bin/voltad, /etc/voltad/voltad.yaml):
#
#   /usr/bin/voltad voltactl voltad-run voltad-bench
#   /etc/voltad/voltad.yaml                   conffile (etc/voltad.yaml)
#   /lib/systemd/system/voltad{,@}.{service,socket}
#   /usr/lib/sysusers.d/voltad.conf            user voltad, groups voltad-clients, voltad-admin
#   /usr/lib/tmpfiles.d/voltad.conf            /run/voltad, /var/lib/voltad/models
#   /usr/share/dbus-1/system.d/org.voltad.Daemon1.conf
#   /usr/share/doc/voltad/                     README, operator docs, copyright, changelog
#   /usr/share/man/man{1,5,8}/                 voltad(8) voltactl(1) voltad.yaml(5) ...
#
# Maintainer scripts and the package's own files: packaging/debian/.
# Units in /lib (not /usr/lib): Debian 12 packages still ship them there.

# A plain `cmake --install` gets that layout too: under /usr/local the units'
# ExecStart= would name no file, and the D-Bus policy would lie where the
# system bus does not look.
if(CMAKE_INSTALL_PREFIX_INITIALIZED_TO_DEFAULT)
  set(CMAKE_INSTALL_PREFIX /usr CACHE PATH "Install prefix (the units name /usr/bin)" FORCE)
endif()

set(CMAKE_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(VOLTAD_DEB_DIR ${CMAKE_SOURCE_DIR}/packaging/debian)
set(VOLTAD_MAN_DIR ${CMAKE_SOURCE_DIR}/packaging/man)
set(VOLTAD_DOC_DEST share/doc/voltad)

install(TARGETS voltad voltactl voltad-run voltad-bench RUNTIME DESTINATION bin)
# A stripped install (CPack's) also drops .comment, the compilers' version
# strings, as Debian's own dh_strip does: of no use at run time.
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP)
    foreach(b voltad voltactl voltad-run voltad-bench)
      execute_process(COMMAND \"${CMAKE_OBJCOPY}\" --remove-section=.comment
                              \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/bin/\${b}\")
    endforeach()
  endif()")
install(FILES ${CMAKE_SOURCE_DIR}/etc/voltad.yaml DESTINATION /etc/voltad)

file(GLOB VOLTAD_UNITS ${CMAKE_SOURCE_DIR}/systemd/*.service ${CMAKE_SOURCE_DIR}/systemd/*.socket)
install(FILES ${VOLTAD_UNITS} DESTINATION /lib/systemd/system)
install(FILES ${CMAKE_SOURCE_DIR}/systemd/sysusers.d/voltad.conf DESTINATION lib/sysusers.d)
install(FILES ${CMAKE_SOURCE_DIR}/systemd/tmpfiles.d/voltad.conf DESTINATION lib/tmpfiles.d)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/dbus/org.voltad.Daemon1.conf
        DESTINATION share/dbus-1/system.d)
# The CUDA runtime's overrides only where it is linked (an unused override
# is itself a lintian warning).
file(READ ${VOLTAD_DEB_DIR}/lintian-overrides VOLTAD_LINTIAN_OVERRIDES)
if(VOLTAD_CUDA_ENABLED)
  file(READ ${VOLTAD_DEB_DIR}/lintian-overrides-cuda VOLTAD_LINTIAN_CUDA)
  string(APPEND VOLTAD_LINTIAN_OVERRIDES "\n${VOLTAD_LINTIAN_CUDA}")
endif()
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/packaging/lintian-overrides
     CONTENT "${VOLTAD_LINTIAN_OVERRIDES}" @ONLY)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${VOLTAD_DEB_DIR}/lintian-overrides ${VOLTAD_DEB_DIR}/lintian-overrides-cuda)
install(FILES ${CMAKE_BINARY_DIR}/packaging/lintian-overrides DESTINATION share/lintian/overrides
        RENAME voltad)

# Documentation an operator reads on the machine. The units' Documentation=
# point at SYSTEMD.md here, so the Markdown stays uncompressed.
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${VOLTAD_DEB_DIR}/copyright
        ${CMAKE_SOURCE_DIR}/docs/OPERATIONS.md ${CMAKE_SOURCE_DIR}/docs/TROUBLESHOOTING.md
        ${CMAKE_SOURCE_DIR}/docs/V100.md ${CMAKE_SOURCE_DIR}/docs/CONFIG.md
        ${CMAKE_SOURCE_DIR}/docs/SYSTEMD.md ${CMAKE_SOURCE_DIR}/docs/DBUS.md
        ${CMAKE_SOURCE_DIR}/docs/PLANNING.md ${CMAKE_SOURCE_DIR}/docs/PERFORMANCE.md
        ${CMAKE_SOURCE_DIR}/docs/PLACEMENT.md ${CMAKE_SOURCE_DIR}/docs/API.md
        DESTINATION ${VOLTAD_DOC_DEST})

# Man pages and the changelog, gzipped as Debian wants them (-n: no name or
# time stamp inside, so the package is reproducible). voltad.yaml(5) takes
# its key list from `voltad --config-reference`, the same declarations
# docs/CONFIG.md comes from, so it cannot miss a key.
set(VOLTAD_MAN_OUT ${CMAKE_BINARY_DIR}/man)
set(VOLTAD_MAN_PAGES voltad.8 voltactl.1 voltad-run.1 voltad-bench.1)
set(VOLTAD_MAN_GZ)
foreach(page ${VOLTAD_MAN_PAGES})
  configure_file(${VOLTAD_MAN_DIR}/${page}.in ${VOLTAD_MAN_OUT}/${page} @ONLY)
  add_custom_command(OUTPUT ${VOLTAD_MAN_OUT}/${page}.gz
                     COMMAND gzip -9nf -k ${VOLTAD_MAN_OUT}/${page}
                     DEPENDS ${VOLTAD_MAN_DIR}/${page}.in ${VOLTAD_MAN_OUT}/${page} VERBATIM)
  list(APPEND VOLTAD_MAN_GZ ${VOLTAD_MAN_OUT}/${page}.gz)
endforeach()
add_custom_command(
  OUTPUT ${VOLTAD_MAN_OUT}/voltad.yaml.5 ${VOLTAD_MAN_OUT}/voltad.yaml.5.gz
  COMMAND sh ${VOLTAD_MAN_DIR}/gen-config-man.sh $<TARGET_FILE:voltad> ${VOLTAD_MAN_DIR}/voltad.yaml.5.in
          ${PROJECT_VERSION} ${VOLTAD_MAN_OUT}/voltad.yaml.5
  COMMAND gzip -9nf -k ${VOLTAD_MAN_OUT}/voltad.yaml.5
  DEPENDS voltad ${VOLTAD_MAN_DIR}/gen-config-man.sh ${VOLTAD_MAN_DIR}/voltad.yaml.5.in VERBATIM)
list(APPEND VOLTAD_MAN_GZ ${VOLTAD_MAN_OUT}/voltad.yaml.5.gz)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/changelog.Debian.gz
                   COMMAND gzip -9n -c ${VOLTAD_DEB_DIR}/changelog > ${CMAKE_BINARY_DIR}/changelog.Debian.gz
                   DEPENDS ${VOLTAD_DEB_DIR}/changelog)
add_custom_target(voltad_man ALL DEPENDS ${VOLTAD_MAN_GZ} ${CMAKE_BINARY_DIR}/changelog.Debian.gz)

foreach(gz ${VOLTAD_MAN_GZ})
  string(REGEX MATCH "\\.([0-9])\\.gz$" _ "${gz}")
  install(FILES ${gz} DESTINATION share/man/man${CMAKE_MATCH_1})
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/changelog.Debian.gz DESTINATION ${VOLTAD_DOC_DEST})

# --- The package.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME voltad)
set(CPACK_PACKAGE_VENDOR "voltad")
set(CPACK_PACKAGE_CONTACT "voltad maintainers <maintainers@users.noreply.a-seed-3311cc0e.example>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "private LLM inference service for a shared GPU server")
# The synopsis is the summary above; this is the long description only.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "voltad serves a GGUF language model (Llama, Qwen) to the users of one
machine over a Unix socket, with an OpenAI-compatible HTTP API. It runs its
own INT4 CUDA engine for NVIDIA GPUs from the V100 (sm_70) up, binds itself
to the GPU's own CPU socket, keeps the card under a memory budget it can
explain, and runs as a systemd service with a D-Bus interface.

This package holds the daemon, the voltactl client, the offline tools
voltad-run and voltad-bench, the systemd units (one daemon, or one per GPU
with voltad@.service), and the D-Bus policy. The NVIDIA driver is not a
dependency: install the one that supports your card.")
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
# Library dependencies come from dpkg-shlibdeps on the binaries; the rest are
# what the maintainer scripts run (systemd-sysusers, systemd-tmpfiles) and
# what the units run: ExecReload=/bin/kill, which is procps's and missing
# from a minimal Debian 12 (tests/packaging/deb_package.sh found it so).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "systemd | systemd-sysusers, systemd | systemd-tmpfiles, procps")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nvidia-smi")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${VOLTAD_DEB_DIR}/conffiles ${VOLTAD_DEB_DIR}/postinst ${VOLTAD_DEB_DIR}/prerm
    ${VOLTAD_DEB_DIR}/postrm)
include(CPack)
