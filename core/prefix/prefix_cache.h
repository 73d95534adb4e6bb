// Automatic prefix caching: the request-side half (hash chains and namespaces).
//
// The other half, the map from a full block's hash to the KV block that holds it, lives
// in the KV block pool (core/kv/block_pool.h), because a cached block's life (kept on the
// free queue with its hash, evicted when reallocated) is the pool's business. This class
// decides what a block's hash is and which hashes may still be hit:
//
//  - a chain of 128-bit block hashes per sequence (prefix_hash.h), with the model identity
//    and the request's cache_salt as extra keys, so a tenant or a document version can be
//    kept apart from everyone else;
//  - namespaces: each cache_salt has a generation number mixed into every hash. Bumping it
//    (InvalidateNamespace) makes every hash computed before unreachable at once: no new
//    request can ever compute them again. The caller then drops the blocks of that
//    namespace from the pool's map eagerly (KvCacheManager does), so they are evicted
//    first instead of aging out.
//  - on by default; when disabled nothing is hashed, cached or looked up.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/prefix/prefix_hash.h"

namespace strata {

struct PrefixCacheConfig {
  bool enabled = true;         // --no-prefix-cache turns it off
  std::string model_identity;  // anything that changes the KV for the same tokens
  // Namespaces kept; beyond it the least recently registered ones that were never
  // invalidated are forgotten (clients choose salts, so their number is unbounded).
  size_t max_namespaces = 65536;
};

class PrefixCache {
 public:
  // A namespace's small integer id (stable for the process; stored on cached blocks so
  // they can be found again on invalidation) and its current generation.
  struct Namespace {
    int32_t id = kUnregistered;
    uint64_t generation = 0;
  };
  static constexpr int32_t kUnregistered = -1;

  explicit PrefixCache(PrefixCacheConfig config);

  bool enabled() const { return config_.enabled; }
  const std::string& model_identity() const { return config_.model_identity; }

  // The salt's namespace, registering it on first use (and marking it recently used).
  // A forgotten namespace comes back with generation 0 and a new id: its hashes are the
  // same as before, so its blocks can still be hit, which is right since it was never
  // invalidated (invalidated namespaces are never forgotten).
  Namespace Register(std::string_view cache_salt);
  // The salt's namespace without registering it (id kUnregistered, generation 0 if new).
  Namespace Find(std::string_view cache_salt) const;
  // Whether hashes computed with `generation` can still be hit.
  bool IsCurrent(std::string_view cache_salt, uint64_t generation) const;

  // Makes every block hash of this namespace computed so far unreachable. Returns the
  // namespace (with its new generation) so the caller can drop its cached blocks.
  Namespace InvalidateNamespace(std::string_view cache_salt);

  size_t num_namespaces() const { return namespaces_.size(); }

  // Appends to `hashes` the chained hashes of the full blocks of `token_ids` that it does
  // not hold yet, up to `max_blocks` blocks in all. `hashes` must be this sequence's chain
  // so far (computed with the same salt and generation).
  void ExtendBlockHashes(std::span<const int32_t> token_ids, int32_t block_size,
                         std::string_view cache_salt, uint64_t generation, size_t max_blocks,
                         std::vector<BlockHash>& hashes) const;

 private:
  struct Entry {
    Namespace ns;
    uint64_t last_used = 0;
  };
  // Forgets the least recently used eighth of the never-invalidated namespaces.
  void Evict();

  PrefixCacheConfig config_;
  absl::flat_hash_map<std::string, Entry> namespaces_;
  int32_t next_id_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace strata
