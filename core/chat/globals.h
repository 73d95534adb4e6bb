// Global functions visible to every template: range, namespace, dict and
// strftime_now (transformers, Llama 3.x). The renderer adds raise_exception.
#pragma once

#include "core/chat/value.h"

namespace strata::chat {

// Adds the globals to `scope` (names that the context may override).
void AddGlobals(ValueDict& scope);

}  // namespace strata::chat
