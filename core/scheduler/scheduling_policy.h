// Which waiting requests a step admits first, and which running request gives back its
// blocks when the KV pool runs out.
//
//  fcfs      first come, first served; the newest running request is preempted.
//  priority  lowest `priority` value first (ties: arrival); the least urgent (then
//            newest) running request is preempted.
//  buckets   prefills grouped by remaining prompt length (buckets of `bucket_width`
//            tokens, shortest bucket first, arrival order inside a bucket), so short
//            prompts are not stuck behind long ones and a step's prefill chunks are of
//            similar size. A request that has waited `bucket_max_wait_steps` steps goes
//            first regardless, so long prompts cannot starve.
//  static    the baseline of benchmarks: a batch is admitted only when the previous one
//            has completely finished (a batch runs until its longest member ends; nobody
//            joins in between). Admission order inside is fcfs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/scheduler/sequence.h"

namespace strata {

enum class SchedulingPolicy { kFcfs, kPriority, kBuckets, kStatic };

struct SchedulingPolicyConfig {
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  int32_t bucket_width = 128;          // tokens per length bucket (buckets policy)
  int64_t bucket_max_wait_steps = 256;  // aging: after this many steps, fcfs order
};

// "fcfs" | "priority" | "buckets" | "static"; InvalidArgument naming the choices otherwise.
absl::StatusOr<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name);
std::string_view SchedulingPolicyName(SchedulingPolicy policy);

// Sorts `waiting` into admission order (stable; preempted requests keep their place by
// arrival order, so they come back before newer ones under fcfs).
void OrderWaiting(const SchedulingPolicyConfig& config, int64_t current_step,
                  std::vector<Sequence*>& waiting);

// Index in `running` (admission order) of the request to preempt: the newest (fcfs,
// buckets, static), or the least urgent then newest (priority). -1 when empty.
int PickPreemptionVictim(SchedulingPolicy policy, const std::vector<Sequence*>& running);

}  // namespace strata
