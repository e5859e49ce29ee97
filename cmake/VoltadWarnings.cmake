# Warnings on, for host code and for the host side of .cu files. The build
# stays warning-free; CI builds with VOLTAD_WERROR=ON.
option(VOLTAD_WERROR "Treat warnings as errors" OFF)

add_library(voltad_warnings INTERFACE)
target_compile_options(voltad_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow=local -Wnon-virtual-dtor>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${VOLTAD_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${VOLTAD_WERROR}>>:-Werror=all-warnings>)
