// Where the tokenizer tests find ../shared data and write scratch files.
#pragma once

#include <string>

namespace strata::testing {

inline std::string SharedPath(const std::string& rel) { return std::string(STRATA_SHARED_DIR) + "/" + rel; }
inline std::string TmpPath(const std::string& name) { return std::string(STRATA_TEST_TMP) + "/" + name; }

}  // namespace strata::testing
