# VOLTAD_SANITIZE=thread builds every C and C++ file with ThreadSanitizer
# (scripts/tsan.sh), at the build type's optimisation (RelWithDebInfo: -O2
# -g; the reports' stacks name inlined frames from the debug info). Not -O1:
# GCC vectorizes only from -O2, and at -O1 the CPU backend's inner loops
# (left uninstrumented, engine/cpu_clones.h) made prefill 1.7 times slower.
# CUDA code cannot be instrumented: configure with -DVOLTAD_CUDA=OFF.
set(VOLTAD_SANITIZE "" CACHE STRING "Sanitizer for the whole build: thread, or empty for none")
set_property(CACHE VOLTAD_SANITIZE PROPERTY STRINGS "" thread)

if(VOLTAD_SANITIZE STREQUAL "thread")
  if(VOLTAD_CUDA_ENABLED)
    message(FATAL_ERROR "VOLTAD_SANITIZE=thread needs -DVOLTAD_CUDA=OFF")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=thread>)
  add_link_options(-fsanitize=thread)
  # ThreadSanitizer does not model std::atomic_thread_fence, and GCC warns
  # (-Wtsan, an error with VOLTAD_WERROR) at each one. Asio's only fences in
  # this build are the extra ones around each handler it runs; its queues
  # hand handlers over under a mutex, which the sanitizer does see. Without
  # them the sanitizer's view is the same and the warning stays an error for
  # any fence in voltad's own code.
  add_compile_definitions(BOOST_ASIO_DISABLE_FENCED_BLOCK)
elseif(NOT VOLTAD_SANITIZE STREQUAL "")
  message(FATAL_ERROR "VOLTAD_SANITIZE: '${VOLTAD_SANITIZE}' is not one of: thread")
endif()
