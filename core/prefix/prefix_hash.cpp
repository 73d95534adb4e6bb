#include "core/prefix/prefix_hash.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "xxhash.h"

namespace strata {
namespace {

void AppendBytes(std::vector<unsigned char>& out, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  out.insert(out.end(), p, p + size);
}

void AppendU64(std::vector<unsigned char>& out, uint64_t v) { AppendBytes(out, &v, sizeof v); }

void AppendString(std::vector<unsigned char>& out, std::string_view s) {
  AppendU64(out, s.size());
  AppendBytes(out, s.data(), s.size());
}

}  // namespace

std::string BlockHashToString(const BlockHash& hash) {
  return absl::StrFormat("%016x%016x", hash.high, hash.low);
}

BlockHash HashBlockTokens(const std::optional<BlockHash>& parent,
                          std::span<const int32_t> token_ids, const BlockHashExtraKeys& extra) {
  // One contiguous buffer and one XXH3 call: blocks are small (16 tokens by default), so
  // this is cheaper and simpler than the streaming API.
  std::vector<unsigned char> bytes;
  bytes.reserve(64 + token_ids.size_bytes() + extra.model_identity.size() +
                extra.cache_salt.size());
  const unsigned char has_parent = parent.has_value() ? 1 : 0;
  AppendBytes(bytes, &has_parent, 1);
  AppendU64(bytes, parent ? parent->low : 0);
  AppendU64(bytes, parent ? parent->high : 0);
  AppendU64(bytes, token_ids.size());
  AppendBytes(bytes, token_ids.data(), token_ids.size_bytes());
  AppendString(bytes, extra.model_identity);
  AppendString(bytes, extra.cache_salt);
  AppendU64(bytes, extra.namespace_generation);
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return BlockHash{h.low64, h.high64};
}

}  // namespace strata
