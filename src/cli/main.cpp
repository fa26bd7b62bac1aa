// Placeholder entry point while the CLI is being written (replaced in the CLI commit).
#include <cstdio>
int main() {
    std::fprintf(stderr, "mpistage: CLI not built yet\n");
    return 1;
}
