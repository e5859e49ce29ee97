// voltad-run: offline generation with the engine alone.
#include <cstdio>

int main(int, char**) {
  std::fprintf(stderr, "voltad-run: no engine in this build yet: nothing can be generated\n");
  return 64;
}
