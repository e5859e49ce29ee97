#pragma once

#include <cstddef>  // defines __GLIBC__ where glibc is the C library

// VOLTAD_CPU_CLONES on a function: GCC builds it twice on x86-64, for the
// baseline and for x86-64-v3 (AVX2, FMA, F16C: Haswell and later), and the
// loader picks one for the CPU it runs on (an ifunc). The CPU backend's
// inner loops (decoding a row, the dot products) vectorize 8 floats wide in
// the second. Elsewhere it is nothing.
// VOLTAD_CPU_INLINE: a helper always inlined into its caller, so that each
// clone gets its own copy, compiled for the clone's target.
// Only where it can pay and work: GCC on x86-64 with glibc (ifuncs), in a
// build for the baseline (a -march=native build has AVX2 everywhere already,
// and the clones would replace its wider code with x86-64-v3's).
// Not under ThreadSanitizer either: the loader runs an ifunc's resolver
// before the sanitizer's runtime has started, and the instrumented
// resolver crashes there (seen with GCC 12's -fsanitize=thread).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) && \
    !defined(__AVX2__) && !defined(__SANITIZE_THREAD__)
#define VOLTAD_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VOLTAD_CPU_CLONES
#endif
#define VOLTAD_CPU_INLINE [[gnu::always_inline]] inline

// VOLTAD_CPU_NO_TSAN on the CPU backend's inner loops (the dot product,
// decoding a weight row, attention's weighted sum): under ThreadSanitizer
// (VOLTAD_SANITIZE=thread, scripts/tsan.sh) their own loads and stores are
// not instrumented. The integration tests serve from the CPU backend:
// SmolLM2 on two cores prefills 451 tokens in 290 s and decodes 0.5 tok/s
// with these loops instrumented, 17 s and 12 tok/s without (4.6 s and
// 33 tok/s in the normal build).
// No false report can come of it: a report needs two recorded accesses with
// no synchronisation seen between them, and these functions record no
// access and synchronise nothing (no atomics, no locks; a function they
// call is instrumented as usual). What it costs: a race on the weights, the
// activations or a decoded row inside these loops goes unseen.
// Only these functions, not their files (-fno-sanitize=thread on a file):
// an inline function of a library header that such a file also compiled,
// shared_ptr's atomic reference count say, could then be linked in
// uninstrumented for the whole program and hide its synchronisation.
#if defined(__SANITIZE_THREAD__)
#define VOLTAD_CPU_NO_TSAN __attribute__((no_sanitize("thread")))
#else
#define VOLTAD_CPU_NO_TSAN
#endif
