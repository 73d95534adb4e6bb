#include "apps/strata/flag_set.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata::cli {

void FlagSet::Value(const std::string& name, const std::string& short_name,
                    const std::string& default_value, const std::string& help) {
  flags_[name] = Flag{short_name, default_value, help, Flag::Kind::kValue, default_value, {}, false};
  order_.push_back(name);
}

void FlagSet::Switch(const std::string& name, const std::string& help) {
  flags_[name] = Flag{"", "off", help, Flag::Kind::kSwitch, "", {}, false};
  order_.push_back(name);
}

void FlagSet::Repeated(const std::string& name, const std::string& help) {
  flags_[name] = Flag{"", "none", help, Flag::Kind::kRepeated, "", {}, false};
  order_.push_back(name);
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a.size() < 2 || a[0] != '-') {
      positional_.push_back(a);
      continue;
    }
    std::string name, value;
    bool has_value = false;
    if (a.rfind("--", 0) == 0) {
      name = a.substr(2);
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
    } else {
      for (const auto& [n, f] : flags_)
        if (!f.short_name.empty() && f.short_name == a) name = n;
      if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a, " (see ", command_, " --help)"));
    }
    auto it = flags_.find(name);
    if (it == flags_.end())
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see strata ", command_, " --help)"));
    Flag& f = it->second;
    f.given = true;
    if (f.kind == Flag::Kind::kSwitch) {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = args[++i];
    }
    if (f.kind == Flag::Kind::kRepeated) f.values.push_back(value);
    else f.value = value;
  }
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n\nflags:\n");
  for (const std::string& n : order_) {
    const Flag& f = flags_.at(n);
    std::string left = absl::StrCat("  --", n, f.kind == Flag::Kind::kSwitch ? "" : " VALUE");
    if (!f.short_name.empty()) left = absl::StrCat("  ", f.short_name, ", --", n, f.kind == Flag::Kind::kSwitch ? "" : " VALUE");
    if (left.size() < 30) left.resize(30, ' ');
    absl::StrAppend(&out, left, " ", f.help, " (default: ", f.default_value.empty() ? "\"\"" : f.default_value, ")\n");
  }
  absl::StrAppend(&out, "  -h, --help                   show this help\n");
  return out;
}

const std::string& FlagSet::Get(const std::string& name) const { return flags_.at(name).value; }
bool FlagSet::Has(const std::string& name) const { return flags_.at(name).given; }
bool FlagSet::On(const std::string& name) const { return flags_.at(name).given; }
bool FlagSet::Defines(const std::string& name) const { return flags_.count(name) > 0; }
const std::vector<std::string>& FlagSet::All(const std::string& name) const { return flags_.at(name).values; }

absl::StatusOr<int64_t> FlagSet::Int(const std::string& name) const {
  int64_t v;
  if (!absl::SimpleAtoi(Get(name), &v))
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": not an integer: '", Get(name), "'"));
  return v;
}

absl::StatusOr<double> FlagSet::Double(const std::string& name) const {
  double v;
  if (!absl::SimpleAtod(Get(name), &v))
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a number: '", Get(name), "'"));
  return v;
}

}  // namespace strata::cli
