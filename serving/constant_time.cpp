#include "serving/constant_time.h"

#include <cstddef>

namespace strata::serving {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Walk the longer input completely; a volatile accumulator keeps the compiler from
  // turning the loop into an early-exit memcmp.
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace strata::serving
