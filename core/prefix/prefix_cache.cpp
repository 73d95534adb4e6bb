#include "core/prefix/prefix_cache.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/string_view.h"

namespace strata {
namespace {

// Debian's Abseil keeps its own string_view type, so heterogeneous lookups in maps keyed by
// std::string need an absl::string_view.
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

PrefixCache::PrefixCache(PrefixCacheConfig config) : config_(std::move(config)) {}

PrefixCache::Namespace PrefixCache::Register(std::string_view cache_salt) {
  auto it = namespaces_.find(Key(cache_salt));
  if (it == namespaces_.end()) {
    if (namespaces_.size() >= std::max<size_t>(1, config_.max_namespaces)) Evict();
    it = namespaces_.try_emplace(std::string(cache_salt)).first;
    it->second.ns.id = next_id_;
    // Ids stay unique for the process (cached blocks name theirs); wrapping takes 2^31
    // distinct salts.
    next_id_ = next_id_ == std::numeric_limits<int32_t>::max() ? 0 : next_id_ + 1;
  }
  it->second.last_used = ++clock_;
  return it->second.ns;
}

void PrefixCache::Evict() {
  std::vector<std::pair<uint64_t, std::string>> candidates;
  for (const auto& [salt, e] : namespaces_)
    if (e.ns.generation == 0 && !salt.empty()) candidates.emplace_back(e.last_used, salt);
  if (candidates.empty()) return;
  const size_t n = std::max<size_t>(1, candidates.size() / 8);
  std::nth_element(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(n - 1), candidates.end());
  for (size_t i = 0; i < n; ++i) namespaces_.erase(candidates[i].second);
}

PrefixCache::Namespace PrefixCache::Find(std::string_view cache_salt) const {
  auto it = namespaces_.find(Key(cache_salt));
  return it == namespaces_.end() ? Namespace{} : it->second.ns;
}

bool PrefixCache::IsCurrent(std::string_view cache_salt, uint64_t generation) const {
  return Find(cache_salt).generation == generation;
}

PrefixCache::Namespace PrefixCache::InvalidateNamespace(std::string_view cache_salt) {
  Register(cache_salt);
  Namespace& ns = namespaces_.find(Key(cache_salt))->second.ns;
  ++ns.generation;
  return ns;
}

void PrefixCache::ExtendBlockHashes(std::span<const int32_t> token_ids, int32_t block_size,
                                    std::string_view cache_salt, uint64_t generation,
                                    size_t max_blocks, std::vector<BlockHash>& hashes) const {
  if (block_size <= 0) return;
  const size_t full_blocks =
      std::min(max_blocks, token_ids.size() / static_cast<size_t>(block_size));
  const BlockHashExtraKeys extra{config_.model_identity, cache_salt, generation};
  for (size_t i = hashes.size(); i < full_blocks; ++i) {
    std::optional<BlockHash> parent;
    if (i > 0) parent = hashes[i - 1];
    hashes.push_back(
        HashBlockTokens(parent, token_ids.subspan(i * block_size, block_size), extra));
  }
}

}  // namespace strata
