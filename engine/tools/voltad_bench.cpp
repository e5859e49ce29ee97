// voltad-bench: engine benchmark.
#include <cstdio>

int main(int, char**) {
  std::fprintf(stderr, "voltad-bench: no engine in this build yet: nothing can be measured\n");
  return 64;
}
