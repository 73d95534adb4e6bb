// The corpus replayer: the same LLVMFuzzerTestOneInput a libFuzzer build fuzzes with, linked
// with this main instead, so CI (gcc, no libFuzzer) runs every checked-in input and past crash
// of a target. Arguments are files or directories (read recursively, in sorted order), as for
// a libFuzzer binary; an input that crashes aborts the run like any failing test.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// Sanitizer runtimes call this before they exit with a report (absent without one).
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {

// The input being replayed, named when the run dies on it (sanitizer report or signal).
char g_current[4096];

void NameCurrentInput() {
  const char* pre = "\n*** fuzz replay: the failing input is ";
  (void)!write(STDERR_FILENO, pre, std::strlen(pre));
  (void)!write(STDERR_FILENO, g_current, std::strlen(g_current));
  (void)!write(STDERR_FILENO, "\n", 1);
}

void OnFatalSignal(int sig) {
  NameCurrentInput();
  raise(sig);  // SA_RESETHAND: the default action now
}

std::vector<std::filesystem::path> InputsOf(const std::filesystem::path& arg) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(arg)) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(arg))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(arg);
  }
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(NameCurrentInput);
  // On a stack of its own, so that a stack overflow is reported too.
  static char alt_stack[1 << 16];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) {
    struct sigaction sa {};
    sa.sa_handler = OnFatalSignal;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
    sigaction(sig, &sa, nullptr);
  }
  size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::filesystem::exists(argv[i])) {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 2;
    }
    for (const std::filesystem::path& f : InputsOf(argv[i])) {
      std::ifstream in(f, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::snprintf(g_current, sizeof g_current, "%s (%zu bytes)", f.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++count;
    }
  }
  if (count == 0) {
    std::fprintf(stderr, "no inputs found\n");
    return 1;
  }
  std::printf("replayed %zu inputs without a crash\n", count);
  return 0;
}
