// Command-line flags of one subcommand: each flag is declared once with its long name, its
// default and its help text (the one place of truth that --help prints).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::cli {

class FlagSet {
 public:
  FlagSet(std::string command, std::string usage) : command_(std::move(command)), usage_(std::move(usage)) {}

  // A flag taking a value; `short_name` may be empty ("-m" for "--model").
  void Value(const std::string& name, const std::string& short_name, const std::string& default_value,
             const std::string& help);
  // A boolean switch (present = true).
  void Switch(const std::string& name, const std::string& help);
  // A flag that may be given several times.
  void Repeated(const std::string& name, const std::string& help);

  // Parses argv (after the subcommand). Unknown flags and missing values are errors.
  absl::Status Parse(const std::vector<std::string>& args);

  std::string Help() const;
  bool help_requested() const { return help_; }

  const std::string& Get(const std::string& name) const;
  bool Has(const std::string& name) const;  // given on the command line
  bool Defines(const std::string& name) const;  // the command has this flag
  bool On(const std::string& name) const;   // a switch that was given
  const std::vector<std::string>& All(const std::string& name) const;
  absl::StatusOr<int64_t> Int(const std::string& name) const;
  absl::StatusOr<double> Double(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  struct Flag {
    std::string short_name, default_value, help;
    enum class Kind { kValue, kSwitch, kRepeated } kind;
    std::string value;
    std::vector<std::string> values;
    bool given = false;
  };
  std::string command_, usage_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

}  // namespace strata::cli
