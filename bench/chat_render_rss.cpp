// Peak memory of one chat-template render over a long string variable: prints the peak RSS
// after setting up the context (the string in JSON and as a template value) and after the
// render, so the difference is what the render itself added at its peak. Not a test (no
// assertions); used for the figures in docs/benchmarks.md (chat template string helpers).
//
//   chat_render_rss TEMPLATE BYTES [PATTERN [--print]]
//     e.g. chat_render_rss '{{ s.strip() }}' 33554432 'ab '
// The variable `s` is PATTERN (default "a") repeated up to BYTES bytes (whole patterns).
// --print: print the rendered text (or the error) instead of the figures.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

double PeakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TEMPLATE BYTES [PATTERN]\n", argv[0]);
    return 2;
  }
  const std::string source = argv[1];
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const std::string pattern = argc > 3 ? argv[3] : "a";
  if (pattern.empty()) return 2;
  absl::StatusOr<strata::ChatTemplate> t = strata::ChatTemplate::Parse(source);
  if (!t.ok()) {
    std::fprintf(stderr, "parse: %s\n", std::string(t.status().message()).c_str());
    return 1;
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  {
    std::string s;
    s.reserve(bytes);
    while (s.size() + pattern.size() <= bytes) s += pattern;
    context["s"] = std::move(s);
  }
  const double before = PeakRssMiB();
  absl::StatusOr<std::string> out = t->Render(context);
  const double after = PeakRssMiB();
  if (argc > 4 && std::string(argv[4]) == "--print") {
    std::printf("%s\n", out.ok() ? out->c_str() : out.status().ToString().c_str());
    return 0;
  }
  std::printf("template=%s bytes=%zu pattern=\"%s\" status=%s output_bytes=%zu peak_rss_setup_mib=%.1f "
              "peak_rss_after_render_mib=%.1f render_added_mib=%.1f\n",
              source.c_str(), context["s"].get_ref<const std::string&>().size(), pattern.c_str(),
              out.ok() ? "OK" : std::string(out.status().ToString()).substr(0, 120).c_str(),
              out.ok() ? out->size() : size_t{0}, before, after, after - before);
  return 0;
}
