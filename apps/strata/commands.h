// The subcommands of the strata CLI. Each returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace strata::cli {

int RunCommand(const std::vector<std::string>& args);
int TokenizeCommand(const std::vector<std::string>& args);
int DevicesCommand(const std::vector<std::string>& args);
int BenchCommand(const std::vector<std::string>& args);
int ServeCommand(const std::vector<std::string>& args);
int ConvertCommand(const std::vector<std::string>& args);
int PerplexityCommand(const std::vector<std::string>& args);
int QuantizeCommand(const std::vector<std::string>& args);

}  // namespace strata::cli
