// VOLTAD_HD marks a function of a plain C++ header that the kernels call
// too: __host__ __device__ under nvcc, nothing for the host's compiler
// (the engine includes such headers without CUDA).
#pragma once

#if defined(__CUDACC__)
#define VOLTAD_HD __host__ __device__
#else
#define VOLTAD_HD
#endif
