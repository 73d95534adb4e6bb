#include "core/scheduler/scheduling_policy.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name) {
  if (name == "fcfs") return SchedulingPolicy::kFcfs;
  if (name == "priority") return SchedulingPolicy::kPriority;
  if (name == "buckets") return SchedulingPolicy::kBuckets;
  if (name == "static") return SchedulingPolicy::kStatic;
  return absl::InvalidArgumentError(absl::StrCat("unknown scheduling policy '",
                                                 absl::string_view(name.data(), name.size()),
                                                 "' (fcfs, priority, buckets, static)"));
}

std::string_view SchedulingPolicyName(SchedulingPolicy policy) {
  switch (policy) {
    case SchedulingPolicy::kFcfs: return "fcfs";
    case SchedulingPolicy::kPriority: return "priority";
    case SchedulingPolicy::kBuckets: return "buckets";
    case SchedulingPolicy::kStatic: return "static";
  }
  return "unknown";
}

void OrderWaiting(const SchedulingPolicyConfig& config, int64_t current_step,
                  std::vector<Sequence*>& waiting) {
  switch (config.policy) {
    case SchedulingPolicy::kFcfs:
    case SchedulingPolicy::kStatic:
      std::stable_sort(waiting.begin(), waiting.end(), [](const Sequence* a, const Sequence* b) {
        return a->arrival_order < b->arrival_order;
      });
      return;
    case SchedulingPolicy::kPriority:
      std::stable_sort(waiting.begin(), waiting.end(), [](const Sequence* a, const Sequence* b) {
        return std::tie(a->priority, a->arrival_order) < std::tie(b->priority, b->arrival_order);
      });
      return;
    case SchedulingPolicy::kBuckets: {
      const int64_t width = std::max<int32_t>(1, config.bucket_width);
      auto key = [&](const Sequence* s) {
        // Aged requests form bucket -1, ahead of every length bucket, in arrival order.
        const bool aged = current_step - s->enqueued_step >= config.bucket_max_wait_steps;
        const int64_t bucket = aged ? -1 : (s->num_uncomputed_tokens() - 1) / width;
        return std::make_tuple(bucket, s->arrival_order);
      };
      std::stable_sort(waiting.begin(), waiting.end(),
                       [&](const Sequence* a, const Sequence* b) { return key(a) < key(b); });
      return;
    }
  }
}

int PickPreemptionVictim(SchedulingPolicy policy, const std::vector<Sequence*>& running) {
  if (running.empty()) return -1;
  int best = static_cast<int>(running.size()) - 1;
  if (policy != SchedulingPolicy::kPriority) return best;
  for (int i = best - 1; i >= 0; --i) {
    // Larger priority value = less urgent; among equals the newest (latest index) wins.
    if (running[i]->priority > running[best]->priority) best = i;
  }
  return best;
}

}  // namespace strata
