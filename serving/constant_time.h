// Secret comparison whose running time does not depend on where the inputs differ, so an
// attacker cannot find an API key byte by byte by timing 401 answers.
#pragma once

#include <string_view>

namespace strata::serving {

// True when a == b. Time depends only on the lengths (the key's length is not secret
// enough to matter; its bytes are).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace strata::serving
