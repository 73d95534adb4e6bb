// strata: run | tokenize | devices | bench | serve | convert | perplexity | quantize
#include <iostream>
#include <string>
#include <vector>

#include "apps/strata/commands.h"

namespace {
const char* kUsage =
    "usage: strata COMMAND [flags]\n\n"
    "commands:\n"
    "  run       generate text from a prompt\n"
    "  tokenize  print the token ids of a text\n"
    "  devices   list backend plugins, their devices and the plugins refused\n"
    "  bench     measure prefill and decode speed\n"
    "  serve     OpenAI-compatible HTTP server (completions, chat, streaming, /metrics)\n"
    "  convert   write a model as a GGUF file (for llama.cpp and strata)\n"
    "  perplexity  perplexity on a text file; KL divergence from a base model\n"
    "  quantize  int8, SmoothQuant W8A8, LLM.int8, GPTQ / RTN int4, FP8 (HF or GGUF output)\n\n"
    "MODEL is a .gguf file, a llama2.c .bin (with --tokenizer FILE) or a Hugging Face\n"
    "directory (config.json + model.safetensors). 'strata COMMAND --help' shows the flags.\n";
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "run") return strata::cli::RunCommand(args);
  if (cmd == "tokenize") return strata::cli::TokenizeCommand(args);
  if (cmd == "devices") return strata::cli::DevicesCommand(args);
  if (cmd == "bench") return strata::cli::BenchCommand(args);
  if (cmd == "serve") return strata::cli::ServeCommand(args);
  if (cmd == "convert") return strata::cli::ConvertCommand(args);
  if (cmd == "perplexity") return strata::cli::PerplexityCommand(args);
  if (cmd == "quantize") return strata::cli::QuantizeCommand(args);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << "strata: unknown command '" << cmd << "'\n\n" << kUsage;
  return 2;
}
