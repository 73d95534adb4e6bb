// The per-request face of the paged KV cache, for the scheduler.
//
// One engine step, for each request the scheduler picks:
//   1. a new request: blocks = GetComputedBlocks(request) (the longest run of cached full
//      blocks of its tokens; their prefill is skipped), then
//      AllocateSlots(request, tokens_to_compute, blocks);
//   2. a running request: AllocateSlots(request, new_tokens) (1 for a decode);
//   3. if AllocateSlots answers ResourceExhausted nothing changed: preempt someone
//      (Free(victim)) and retry, or leave the request waiting;
//   4. finished / aborted requests: Free(id) in the same step.
// Then the engine applies TakePendingCopies() with the backend's copy_blocks BEFORE it runs
// the step's forward pass (a copy's source block may be reused by another sequence in
// the same step; the copy must read it first), and builds the slot mapping and block
// tables from GetBlockTable().
//
// Full blocks are hashed and cached as soon as the step that fills them is scheduled, so a
// request scheduled later in the same step can already hit them: the forward pass writes
// every layer's KV before that layer's attention reads it.
//
// Sharing: Fork(parent, child) (parallel sampling, beam search) shares every block. A
// sequence that must write into a shared, partly filled last block first gets a private
// copy (copy-on-write): a new block, and a (src, dst) pair in the pending copies.
//
// Backend-agnostic (no device calls), not thread-safe (the step loop owns it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv/block_pool.h"
#include "core/kv/block_table.h"
#include "core/prefix/prefix_cache.h"
#include "strata/device.h"

namespace strata {

struct KvCacheConfig {
  int32_t num_blocks = 0;                              // sized from the backend's memory
  int32_t block_size = BlockPool::kDefaultBlockSize;   // --block-size
  bool enable_prefix_caching = true;                   // --no-prefix-cache
  std::string model_identity;                          // mixed into every block hash
};

// What the KV manager needs to know of a request; the caller owns the data.
struct KvRequest {
  std::string_view request_id;
  // Every token known so far: the prompt, then the generated tokens. Together with the
  // placeholders below, must cover every slot allocated (the tokens being computed this
  // step included).
  std::span<const int32_t> token_ids;
  std::string_view cache_salt;
  // Tokens after token_ids that a step still in flight is sampling (overlapped steps): a
  // running request may get slots for them, but a block holding one is hashed and cached
  // only once its tokens are known (a later AllocateSlots). Admission needs none.
  int64_t num_placeholder_tokens = 0;
};

// A prefix-cache hit: the first block_ids.size() full blocks of a request, already
// computed by someone, i.e. num_computed_tokens = block_ids.size() * block_size tokens.
struct ComputedBlocks {
  std::vector<BlockId> block_ids;
  int64_t num_computed_tokens = 0;
};

// Prefix-cache hit rate = hit_tokens / queried_tokens (for /metrics), counted once per
// admitted request.
struct PrefixCacheStats {
  int64_t requests = 0;
  int64_t queried_tokens = 0;
  int64_t hit_tokens = 0;
};

class KvCacheManager {
 public:
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(KvCacheConfig config);

  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  int32_t block_size() const { return pool_->block_size(); }
  bool prefix_caching_enabled() const { return prefix_cache_.enabled(); }

  // The longest run of cached full blocks at the start of the request's tokens. Never the
  // whole prompt: at least one token is left to compute, so the step yields logits.
  // Changes nothing (the blocks are claimed by AllocateSlots). Empty when prefix caching
  // is off.
  ComputedBlocks GetComputedBlocks(const KvRequest& request) const;

  // Makes room for `num_new_tokens` more tokens of the request. The first call for a
  // request admits it, taking `computed` (from GetComputedBlocks just before, with no
  // other allocation in between); later calls must pass no computed blocks.
  //   OK                 the slots exist; newly full blocks are cached.
  //   ResourceExhausted  not enough free blocks; nothing changed (preempt and retry).
  //   InvalidArgument / FailedPrecondition  misuse (named in the message); nothing changed.
  absl::Status AllocateSlots(const KvRequest& request, int64_t num_new_tokens,
                             const ComputedBlocks& computed = {});

  // Releases all blocks of the request (finished, aborted or preempted). NotFound if the
  // request holds no blocks.
  absl::Status Free(std::string_view request_id);

  // `child` shares every block of `parent` (ref counts +1) and continues from the same
  // tokens. NotFound / AlreadyExists on unknown parent / existing child.
  absl::Status Fork(std::string_view parent_id, std::string_view child_id);

  // Block copies the engine must apply (copy_blocks) before the next forward pass; the list
  // is emptied.
  std::vector<strata_block_pair> TakePendingCopies();
  const std::vector<strata_block_pair>& pending_copies() const { return pending_copies_; }

  // The document behind this cache_salt changed (or the tenant's cache is revoked): no
  // request can hit the blocks cached so far in this namespace any more. Running requests
  // keep their blocks. Returns how many cached blocks were dropped.
  int32_t InvalidateNamespace(std::string_view cache_salt);

  bool HasRequest(std::string_view request_id) const;
  // Null for an unknown request.
  const BlockTable* GetBlockTable(std::string_view request_id) const;
  // Tokens with allocated slots; -1 for an unknown request.
  int64_t NumTokens(std::string_view request_id) const;
  int32_t num_requests() const { return static_cast<int32_t>(requests_.size()); }

  const BlockPool& pool() const { return *pool_; }
  const PrefixCache& prefix_cache() const { return prefix_cache_; }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  int64_t num_copy_on_writes() const { return num_copy_on_writes_; }

  // The pool's invariants, plus: every block's ref_count equals the number of block tables
  // listing it; every table holds exactly ceil(tokens / block_size) blocks; pending copies
  // name real blocks.
  absl::Status CheckInvariants() const;

 private:
  struct RequestState {
    explicit RequestState(int32_t block_size) : table(block_size) {}
    BlockTable table;
    int64_t num_tokens = 0;
    std::string cache_salt;
    PrefixCache::Namespace ns;
    // Chained hashes of the request's first full blocks (cached or not: a later block's
    // hash needs them all).
    std::vector<BlockHash> block_hashes;
  };

  KvCacheManager(std::unique_ptr<BlockPool> pool, PrefixCacheConfig prefix_config);
  absl::Status AdmitRequest(const KvRequest& request, int64_t num_new_tokens,
                            const ComputedBlocks& computed);
  absl::Status GrowRequest(RequestState& state, const KvRequest& request,
                           int64_t num_new_tokens);
  // Hashes and caches the request's blocks that are full and not cached yet.
  void CacheFullBlocks(RequestState& state, std::span<const int32_t> token_ids);
  int64_t BlocksFor(int64_t num_tokens) const;

  std::unique_ptr<BlockPool> pool_;
  PrefixCache prefix_cache_;
  absl::flat_hash_map<std::string, RequestState> requests_;
  std::vector<strata_block_pair> pending_copies_;
  PrefixCacheStats stats_;
  int64_t num_copy_on_writes_ = 0;
};

}  // namespace strata
