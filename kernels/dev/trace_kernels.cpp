// Kernel timeline of a running program, inside its CUDA graphs too (not part
// of the build; scripts/device-trace.sh builds and uses it). Nsight Systems
// makes no report on the GPU machine (its .qdstrm is not converted), so this
// takes the same records from CUPTI's activity API itself: a library the
// CUDA driver loads into the program through CUDA_INJECTION64_PATH, which
// enables concurrent-kernel records (one per kernel launch, graph nodes
// included: start and end on the GPU's clock) and at exit writes them to
// VOLTAD_TRACE_OUT as CSV: start_ns,end_ns,stream,grid,name (the mangled
// name). Under programmatic launch a kernel's start is when its first block
// began, before its wait; its end is exact, so the difference between
// successive ends is what each kernel adds to a chain.
//   g++ -std=c++17 -O2 -shared -fPIC kernels/dev/trace_kernels.cpp
//     -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcupti -o /tmp/libtrace.so
// (one command; scripts/device-trace.sh adds the rpath)
//   CUDA_INJECTION64_PATH=/tmp/libtrace.so VOLTAD_TRACE_OUT=/tmp/trace.csv PROGRAM ...
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
  uint64_t start, end;
  uint32_t stream, grid;
  std::string name;
};

std::mutex g_mutex;
std::vector<Record> g_records;
bool g_written = false;   // under g_mutex: buffers completed after the write are dropped
size_t g_unfinished = 0;  // records delivered without an end (a forced flush)
// Small buffers, flushed every few milliseconds as well as at exit: what
// the program's last steps launched is delivered even if the CUDA runtime
// has gone by the time the exit handler runs.
constexpr size_t kBufferBytes = size_t(256) << 10;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  std::fprintf(stderr, "trace_kernels: %s: %s\n", what, text ? text : "unknown CUPTI error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // none: CUPTI drops the records (counted at exit)
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (!g_written && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    // The kernel record of the CUPTI these headers are: the one the library
    // writes when the program was built against them.
    // (CUpti_ActivityKernel10: CUDA 13's CUPTI; older headers name an
    // older record.)
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    if (k->end <= k->start) {
      ++g_unfinished;
      continue;
    }
    g_records.push_back({k->start, k->end, k->streamId, uint32_t(k->gridId), k->name ? k->name : "?"});
  }
  std::free(buffer);
}

void write_records() {
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disabling kernel records");
  check(cuptiActivityFlushAll(1), "flushing the records");
  size_t dropped = 0;
  (void)cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  const char* path = std::getenv("VOLTAD_TRACE_OUT");
  FILE* f = std::fopen(path ? path : "trace.csv", "w");
  if (!f) {
    std::perror("trace_kernels: VOLTAD_TRACE_OUT");
    return;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(f, "start_ns,end_ns,stream,grid,name\n");
  for (const Record& r : g_records)
    std::fprintf(f, "%llu,%llu,%u,%u,%s\n", (unsigned long long)r.start, (unsigned long long)r.end, r.stream,
                 r.grid, r.name.c_str());
  std::fclose(f);
  g_written = true;
  std::fprintf(stderr, "trace_kernels: %zu kernel records (%zu without an end, %zu dropped)\n",
               g_records.size(), g_unfinished, dropped);
}

}  // namespace

extern "C" int InitializeInjection() {
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "registering the buffers");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records");
  check(cuptiActivityFlushPeriod(5), "setting the flush period");
  std::atexit(write_records);
  return 1;
}
