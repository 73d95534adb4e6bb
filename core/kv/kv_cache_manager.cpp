#include "core/kv/kv_cache_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/common/status_macros.h"

namespace strata {
namespace {

// Debian's Abseil keeps its own string_view type, so heterogeneous lookups in maps keyed by
// std::string need an absl::string_view.
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::StatusOr<std::unique_ptr<KvCacheManager>> KvCacheManager::Create(KvCacheConfig config) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<BlockPool> pool,
                          BlockPool::Create(config.num_blocks, config.block_size));
  PrefixCacheConfig prefix_config{config.enable_prefix_caching,
                                  std::move(config.model_identity)};
  return std::unique_ptr<KvCacheManager>(
      new KvCacheManager(std::move(pool), std::move(prefix_config)));
}

KvCacheManager::KvCacheManager(std::unique_ptr<BlockPool> pool, PrefixCacheConfig prefix_config)
    : pool_(std::move(pool)), prefix_cache_(std::move(prefix_config)) {}

int64_t KvCacheManager::BlocksFor(int64_t num_tokens) const {
  return (num_tokens + block_size() - 1) / block_size();
}

ComputedBlocks KvCacheManager::GetComputedBlocks(const KvRequest& request) const {
  ComputedBlocks result;
  if (!prefix_cache_.enabled() || request.token_ids.empty()) return result;
  // Leave the last token to compute: a full hit would produce no logits to sample from.
  const size_t max_blocks = (request.token_ids.size() - 1) / block_size();
  const PrefixCache::Namespace ns = prefix_cache_.Find(request.cache_salt);
  std::vector<BlockHash> hashes;
  // Hash block by block and stop at the first miss: a long unique prompt costs one lookup
  // past its shared prefix, not a hash of every block.
  for (size_t i = 0; i < max_blocks; ++i) {
    prefix_cache_.ExtendBlockHashes(request.token_ids, block_size(), request.cache_salt,
                                    ns.generation, i + 1, hashes);
    std::optional<BlockId> hit = pool_->GetCachedBlock(hashes[i]);
    if (!hit) break;
    result.block_ids.push_back(*hit);
  }
  result.num_computed_tokens = static_cast<int64_t>(result.block_ids.size()) * block_size();
  return result;
}

absl::Status KvCacheManager::AllocateSlots(const KvRequest& request, int64_t num_new_tokens,
                                           const ComputedBlocks& computed) {
  if (num_new_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache: request '", Key(request.request_id),
                                                   "' asks for ", num_new_tokens,
                                                   " new tokens"));
  }
  auto it = requests_.find(Key(request.request_id));
  if (it == requests_.end()) return AdmitRequest(request, num_new_tokens, computed);
  if (!computed.block_ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache: request '", Key(request.request_id),
        "' already holds blocks; computed blocks are only taken when it is admitted"));
  }
  return GrowRequest(it->second, request, num_new_tokens);
}

absl::Status KvCacheManager::AdmitRequest(const KvRequest& request, int64_t num_new_tokens,
                                          const ComputedBlocks& computed) {
  const int64_t num_computed = static_cast<int64_t>(computed.block_ids.size()) * block_size();
  if (computed.num_computed_tokens != num_computed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache: request '", Key(request.request_id), "': computed blocks claim ",
        computed.num_computed_tokens, " tokens for ", computed.block_ids.size(),
        " blocks of ", block_size()));
  }
  if (!computed.block_ids.empty() && !prefix_cache_.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache: request '", Key(request.request_id),
        "' brings computed blocks but prefix caching is off"));
  }
  const int64_t total = num_computed + num_new_tokens;
  if (request.num_placeholder_tokens != 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache: request '", Key(request.request_id),
                                                   "' is admitted with tokens not sampled yet"));
  }
  if (total > static_cast<int64_t>(request.token_ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache: request '", Key(request.request_id), "' asks for slots up to token ", total,
        " but has only ", request.token_ids.size(), " tokens"));
  }

  RequestState state(block_size());
  state.cache_salt = std::string(request.cache_salt);
  if (prefix_cache_.enabled()) {
    state.ns = prefix_cache_.Register(request.cache_salt);
    // The computed blocks must still hold exactly this request's chain: they may have been
    // evicted (or the namespace invalidated) since GetComputedBlocks, or belong to another
    // request. Serving them anyway would attend to someone else's KV.
    prefix_cache_.ExtendBlockHashes(request.token_ids, block_size(), request.cache_salt,
                                    state.ns.generation, computed.block_ids.size(),
                                    state.block_hashes);
    for (size_t i = 0; i < computed.block_ids.size(); ++i) {
      const KvBlock* block = pool_->FindBlock(computed.block_ids[i]);
      if (block == nullptr || !block->block_hash ||
          !(*block->block_hash == state.block_hashes[i])) {
        return absl::FailedPreconditionError(absl::StrCat(
            "KV cache: request '", Key(request.request_id), "': computed block ",
            computed.block_ids[i], " (index ", i,
            ") no longer holds this request's tokens; call GetComputedBlocks again"));
      }
    }
  }

  // Cache hits on free blocks take them off the free queue: they no longer count as free.
  int64_t hits_on_free = 0;
  for (BlockId id : computed.block_ids) hits_on_free += pool_->FindBlock(id)->ref_count == 0;
  const int64_t new_blocks = BlocksFor(total) - static_cast<int64_t>(computed.block_ids.size());
  if (new_blocks + hits_on_free > pool_->num_free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache: request '", Key(request.request_id), "' needs ", new_blocks + hits_on_free,
        " free blocks, ", pool_->num_free_blocks(), " are free"));
  }

  STRATA_RETURN_IF_ERROR(pool_->Touch(computed.block_ids));
  absl::StatusOr<std::vector<BlockId>> fresh = pool_->Allocate(static_cast<int32_t>(new_blocks));
  if (!fresh.ok()) {  // cannot happen after the check above; undo the touch regardless
    pool_->Free(computed.block_ids).IgnoreError();
    return fresh.status();
  }
  state.table.Append(computed.block_ids);
  state.table.Append(*fresh);
  state.num_tokens = total;
  if (prefix_cache_.enabled()) {
    ++stats_.requests;
    stats_.queried_tokens += static_cast<int64_t>(request.token_ids.size());
    stats_.hit_tokens += num_computed;
  }
  auto [it, inserted] = requests_.try_emplace(std::string(request.request_id), std::move(state));
  CacheFullBlocks(it->second, request.token_ids);
  return absl::OkStatus();
}

absl::Status KvCacheManager::GrowRequest(RequestState& state, const KvRequest& request,
                                         int64_t num_new_tokens) {
  const int64_t total = state.num_tokens + num_new_tokens;
  if (request.num_placeholder_tokens < 0 ||
      total > static_cast<int64_t>(request.token_ids.size()) + request.num_placeholder_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache: request '", Key(request.request_id), "' asks for slots up to token ", total,
        " but has only ", request.token_ids.size(), " tokens and ", request.num_placeholder_tokens,
        " placeholders"));
  }
  if (num_new_tokens == 0) return absl::OkStatus();

  // The next token goes into the partly filled last block; if another sequence shares it
  // (a fork), writing would change that sequence's KV too, so write into a copy.
  const bool partial_last = state.num_tokens % block_size() != 0;
  const BlockId last = partial_last ? state.table.blocks().back() : -1;
  const bool copy_on_write = partial_last && pool_->FindBlock(last)->ref_count > 1;
  const int64_t new_blocks = BlocksFor(total) - state.table.num_blocks() + (copy_on_write ? 1 : 0);
  if (new_blocks > pool_->num_free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache: request '", Key(request.request_id), "' needs ", new_blocks,
        " free blocks, ", pool_->num_free_blocks(), " are free"));
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<BlockId> fresh,
                          pool_->Allocate(static_cast<int32_t>(new_blocks)));
  size_t next = 0;
  if (copy_on_write) {
    const BlockId copy = fresh[next++];
    pending_copies_.push_back(strata_block_pair{last, copy});
    ++num_copy_on_writes_;
    STRATA_RETURN_IF_ERROR(state.table.Replace(state.table.num_blocks() - 1, copy));
    const BlockId released[] = {last};
    STRATA_RETURN_IF_ERROR(pool_->Free(released));  // still owned by the other sharers
  }
  state.table.Append(std::span<const BlockId>(fresh).subspan(next));
  state.num_tokens = total;
  CacheFullBlocks(state, request.token_ids);
  return absl::OkStatus();
}

void KvCacheManager::CacheFullBlocks(RequestState& state, std::span<const int32_t> token_ids) {
  // After InvalidateNamespace a running request's chain belongs to the old generation:
  // nobody can hit those hashes, so caching them would only hold map entries.
  if (!prefix_cache_.enabled() ||
      !prefix_cache_.IsCurrent(state.cache_salt, state.ns.generation)) {
    return;
  }
  // Only blocks whose tokens are all known: a placeholder's id is still being sampled.
  const size_t full_blocks =
      static_cast<size_t>(std::min<int64_t>(state.num_tokens, static_cast<int64_t>(token_ids.size())) / block_size());
  const size_t before = state.block_hashes.size();
  prefix_cache_.ExtendBlockHashes(token_ids, block_size(), state.cache_salt,
                                  state.ns.generation, full_blocks, state.block_hashes);
  for (size_t i = before; i < state.block_hashes.size(); ++i) {
    // False when the block is a cache hit already holding this hash, or when another
    // block already caches it (both computed the same prefix): either way one copy is
    // reachable, which is all that matters.
    pool_->CacheFullBlock(state.table.blocks()[i], state.block_hashes[i], state.ns.id);
  }
}

absl::Status KvCacheManager::Free(std::string_view request_id) {
  auto it = requests_.find(Key(request_id));
  if (it == requests_.end()) {
    return absl::NotFoundError(
        absl::StrCat("KV cache: free of unknown request '", Key(request_id), "'"));
  }
  STRATA_RETURN_IF_ERROR(pool_->Free(it->second.table.blocks()));
  requests_.erase(it);
  return absl::OkStatus();
}

absl::Status KvCacheManager::Fork(std::string_view parent_id, std::string_view child_id) {
  auto parent = requests_.find(Key(parent_id));
  if (parent == requests_.end()) {
    return absl::NotFoundError(
        absl::StrCat("KV cache: fork of unknown request '", Key(parent_id), "'"));
  }
  if (requests_.contains(Key(child_id))) {
    return absl::AlreadyExistsError(
        absl::StrCat("KV cache: fork target '", Key(child_id), "' already holds blocks"));
  }
  STRATA_RETURN_IF_ERROR(pool_->Touch(parent->second.table.blocks()));
  RequestState child = parent->second;
  requests_.try_emplace(std::string(child_id), std::move(child));
  return absl::OkStatus();
}

std::vector<strata_block_pair> KvCacheManager::TakePendingCopies() {
  std::vector<strata_block_pair> copies;
  copies.swap(pending_copies_);
  return copies;
}

int32_t KvCacheManager::InvalidateNamespace(std::string_view cache_salt) {
  const PrefixCache::Namespace ns = prefix_cache_.InvalidateNamespace(cache_salt);
  return pool_->DropNamespace(ns.id);
}

bool KvCacheManager::HasRequest(std::string_view request_id) const {
  return requests_.contains(Key(request_id));
}

const BlockTable* KvCacheManager::GetBlockTable(std::string_view request_id) const {
  auto it = requests_.find(Key(request_id));
  return it == requests_.end() ? nullptr : &it->second.table;
}

int64_t KvCacheManager::NumTokens(std::string_view request_id) const {
  auto it = requests_.find(Key(request_id));
  return it == requests_.end() ? -1 : it->second.num_tokens;
}

absl::Status KvCacheManager::CheckInvariants() const {
  STRATA_RETURN_IF_ERROR(pool_->CheckInvariants());
  auto broken = [](auto&&... parts) {
    return absl::InternalError(absl::StrCat("KV cache invariant: ", parts...));
  };
  std::vector<int32_t> owners(pool_->num_blocks(), 0);
  for (const auto& [id, state] : requests_) {
    if (state.num_tokens < 0) return broken("request '", id, "' has ", state.num_tokens, " tokens");
    if (state.table.num_blocks() != BlocksFor(state.num_tokens)) {
      return broken("request '", id, "' has ", state.num_tokens, " tokens in ",
                    state.table.num_blocks(), " blocks of ", block_size());
    }
    if (static_cast<int64_t>(state.block_hashes.size()) > state.num_tokens / block_size()) {
      return broken("request '", id, "' has more block hashes than full blocks");
    }
    for (BlockId b : state.table.blocks()) {
      if (pool_->FindBlock(b) == nullptr) return broken("request '", id, "' lists unknown block ", b);
      ++owners[b];
    }
  }
  for (BlockId b = 0; b < pool_->num_blocks(); ++b) {
    if (owners[b] != pool_->FindBlock(b)->ref_count) {
      return broken("block ", b, " is listed by ", owners[b], " block tables but has ref_count ",
                    pool_->FindBlock(b)->ref_count);
    }
  }
  for (const strata_block_pair& copy : pending_copies_) {
    if (pool_->FindBlock(copy.src) == nullptr || pool_->FindBlock(copy.dst) == nullptr) {
      return broken("pending copy ", copy.src, " -> ", copy.dst, " names an unknown block");
    }
  }
  return absl::OkStatus();
}

}  // namespace strata
