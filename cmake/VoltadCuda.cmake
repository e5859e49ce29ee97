# CUDA is optional. AUTO enables it when a CUDA compiler is found.
# Default architectures: every card from the V100 (sm_70) up where the
# toolkit still targets it; CUDA 13 dropped sm_70, so there it starts at sm_75.
set(VOLTAD_CUDA_ENABLED OFF)
if(NOT VOLTAD_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(VOLTAD_CUDA_ENABLED ON)
  elseif(VOLTAD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "VOLTAD_CUDA=ON but no CUDA compiler was found "
                        "(set CMAKE_CUDA_COMPILER or put nvcc on PATH)")
  else()
    message(STATUS "voltad: no CUDA compiler found; building without the CUDA backend")
  endif()
endif()

if(VOLTAD_CUDA_ENABLED)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    # The compiler version is known only after enable_language; ask nvcc first.
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --version
                    OUTPUT_VARIABLE _nvcc_version_text ERROR_QUIET)
    string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" _ "${_nvcc_version_text}")
    set(_cuda_major "${CMAKE_MATCH_1}")
    if(_cuda_major AND _cuda_major LESS 13)
      set(CMAKE_CUDA_ARCHITECTURES "70;75;80;86;89;90")
    else()
      set(CMAKE_CUDA_ARCHITECTURES "75;80;86;89;90")
      message(NOTICE "voltad: CUDA ${_cuda_major} cannot build for the V100 (sm_70); "
                     "build with CUDA <= 12.9 and -DCMAKE_CUDA_ARCHITECTURES=70 for it "
                     "(see docs/V100.md)")
    endif()
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "voltad: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()
