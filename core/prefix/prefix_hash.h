// Chained block hashes for automatic prefix caching.
//
// A full KV block is identified by what determines its contents: every token before it
// (through the parent block's hash), its own token ids, and the extra keys that change
// the KV for the same tokens (the model's identity) or that must keep caches apart
// (a cache_salt namespace and its generation). Two blocks with equal hashes are treated
// as interchangeable, so the hash is 128 bits (XXH3_128): a collision would silently
// serve another prompt's KV, and at 2^-128 per pair that is negligible.
//
// Hashes live only in this process (they are never stored or sent), so the byte layout
// they are computed over may use the host's endianness.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace strata {

struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;

  friend bool operator==(const BlockHash&, const BlockHash&) = default;

  template <typename H>
  friend H AbslHashValue(H h, const BlockHash& b) {
    return H::combine(std::move(h), b.low, b.high);
  }
};

// 32 hex digits, high word first (for logs and test messages).
std::string BlockHashToString(const BlockHash& hash);

// What besides the tokens decides a block's identity.
struct BlockHashExtraKeys {
  std::string_view model_identity;  // e.g. the model file's path + digest
  std::string_view cache_salt;      // tenant / document namespace; "" = shared default
  uint64_t namespace_generation = 0;  // bumped by PrefixCache::InvalidateNamespace
};

// hash(parent, tokens, extra keys). `parent` is the previous block's hash, nullopt for the
// first block of a sequence. Every field is length-prefixed, so no two different inputs
// serialize to the same bytes (e.g. salt "ab" + model "c" vs salt "a" + model "bc").
BlockHash HashBlockTokens(const std::optional<BlockHash>& parent,
                          std::span<const int32_t> token_ids, const BlockHashExtraKeys& extra);

}  // namespace strata
