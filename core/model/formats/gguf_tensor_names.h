// llama.cpp's tensor names ("blk.3.attn_q.weight") and strata's canonical ones
// ("layers.3.wq", model_file.h), both ways, from one table shared by the reader and the writer.
#pragma once

#include <string>

namespace strata {

// "" for names strata does not know.
std::string CanonicalFromGgufName(const std::string& gguf_name);
std::string GgufNameFromCanonical(const std::string& canonical);

}  // namespace strata
