#include "core/engine/generator.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/common/monotonic_seconds.h"
#include "core/common/status_macros.h"
#include "core/sampling/sampler.h"
#include "core/sampling/stop_checker.h"

namespace strata {
Generator::Generator(LlamaModel& model, const Tokenizer* tokenizer, AsyncScheduling async_scheduling)
    : model_(model), tokenizer_(tokenizer), async_scheduling_(async_scheduling) {}

std::vector<int32_t> Generator::StopTokens() const {
  std::vector<int32_t> stop = model_.config().eos_token_ids;
  int32_t bos = model_.config().bos_token_id;
  if (tokenizer_ != nullptr) {
    for (int32_t id : tokenizer_->eos_ids()) stop.push_back(id);
    if (bos < 0) bos = tokenizer_->bos_id();
  }
  if (bos >= 0) stop.push_back(bos);
  std::sort(stop.begin(), stop.end());
  stop.erase(std::unique(stop.begin(), stop.end()), stop.end());
  return stop;
}

// One sequence, `tokens` at positions start_pos.., block table = identity.
StepInput Generator::ChunkStep(const std::vector<int32_t>& tokens, int32_t start_pos) const {
  const int32_t n = static_cast<int32_t>(tokens.size());
  StepInput in;
  in.token_ids = tokens;
  in.positions.resize(n);
  in.slot_mapping.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    in.positions[i] = start_pos + i;
    in.slot_mapping[i] = start_pos + i;  // block b = b, so slot = position
  }
  in.query_start_loc = {0, n};
  in.seq_lens = {start_pos + n};
  in.block_tables.resize(model_.max_blocks_per_seq());
  for (int32_t b = 0; b < model_.max_blocks_per_seq(); ++b) in.block_tables[b] = b;
  in.logits_rows = {n - 1};
  return in;
}

namespace {

// The device sampler's parameters for one sequence, at its sampler's next draw, with the
// penalties over the tokens so far.
DeviceSampleRows OneRow(const Sampler& s, std::span<const int32_t> prompt_ids, std::span<const int32_t> generated_ids,
                        int64_t vocab) {
  DeviceSampleRows rows;
  rows.temperature = {s.DeviceTemperature()};
  rows.top_k = {s.params().top_k};
  rows.top_p = {s.params().top_p};
  rows.min_p = {s.params().min_p};
  rows.seed = {s.seed()};
  rows.step = {s.step()};
  if (s.HasPenalties()) {
    rows.AddPenalties(s.params().repetition_penalty, s.params().frequency_penalty, s.params().presence_penalty,
                      s.PenaltyTokens(prompt_ids, generated_ids, vocab));
  }
  return rows;
}

}  // namespace

absl::Status Generator::RunChunk(const std::vector<int32_t>& tokens, int32_t start_pos,
                                 std::vector<float>* logits, std::vector<int32_t>* picked_ids,
                                 Sampler* device_sampler, std::span<const int32_t> generated_ids) {
  const StepInput in = ChunkStep(tokens, start_pos);
  if (picked_ids == nullptr) return model_.Forward(in, logits);
  if (device_sampler == nullptr) return model_.ForwardGreedy(in, picked_ids);
  STRATA_RETURN_IF_ERROR(model_.ForwardSample(
      in, OneRow(*device_sampler, prompt_ids_, generated_ids, model_.config().vocab_size), picked_ids));
  device_sampler->SkipDraw();  // the device used this (seed, step)
  return absl::OkStatus();
}

absl::StatusOr<GenerationResult> Generator::Generate(const GenerationRequest& req,
                                                     const std::function<void(std::string_view)>& on_text) {
  STRATA_RETURN_IF_ERROR(req.sampling.Validate());
  const int64_t ctx = model_.max_context();
  const int64_t prompt_len = static_cast<int64_t>(req.prompt_ids.size());
  if (prompt_len == 0) return absl::InvalidArgumentError("the prompt is empty");
  if (prompt_len > ctx)
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt has ", prompt_len, " tokens, the context holds ", ctx));
  if (static_cast<int64_t>(model_.max_blocks_per_seq()) * model_.options().block_size >
      static_cast<int64_t>(model_.options().num_blocks) * model_.options().block_size)
    return absl::ResourceExhaustedError("the KV cache is smaller than one full context");

  GenerationResult res;
  Sampler sampler(req.sampling);
  StopChecker stops(req.sampling.stop);
  const std::vector<int32_t> stop_tokens = req.sampling.ignore_eos ? std::vector<int32_t>{} : StopTokens();
  std::unique_ptr<StreamingDetokenizer> detok;
  if (tokenizer_ != nullptr) {
    // Primed with the prompt so the first generated piece keeps its leading space.
    detok = std::make_unique<StreamingDetokenizer>(*tokenizer_);
    for (int32_t id : req.prompt_ids) detok->Push(id);
  }
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    res.text += piece;
    if (on_text) on_text(piece);
  };

  // Prefill in chunks of at most max_batch_tokens.
  const double t0 = MonotonicSeconds();
  std::vector<float> logits;
  // The device picks the tokens where it can: plain greedy decoding takes its argmax (the
  // same first-maximum rule as the host sampler), sampling without penalties its seeded
  // sampler. One id per step comes back instead of the whole logits row, and the host
  // does not sort a 128,256-entry vocabulary per token (~12 ms for a wide nucleus).
  const bool device_argmax = sampler.IsPlainArgmax() && model_.device().Supports(STRATA_OP_ARGMAX, STRATA_DTYPE_F32);
  const bool device_sample = !sampler.IsPlainArgmax() &&
                             sampler.IsDeviceSamplable(model_.device().SupportsPenalties()) &&
                             model_.device().Supports(STRATA_OP_SAMPLE, STRATA_DTYPE_F32);
  prompt_ids_ = req.prompt_ids;
  const bool device_picks = device_argmax || device_sample;
  Sampler* const device_sampler = device_sample ? &sampler : nullptr;
  std::vector<int32_t> argmax_ids;  // the device's pick for the last step
  const int32_t chunk = model_.options().max_batch_tokens;
  for (int64_t start = 0; start < prompt_len; start += chunk) {
    const int64_t end = std::min(prompt_len, start + chunk);
    std::vector<int32_t> part(req.prompt_ids.begin() + start, req.prompt_ids.begin() + end);
    const bool last = end == prompt_len;
    const bool pick_here = device_picks && !(last && req.want_prompt_logits);
    argmax_ids.clear();
    // Only the last chunk's token is kept, so only it draws; earlier chunks take the
    // argmax, the cheapest way not to bring their logits back.
    STRATA_RETURN_IF_ERROR(RunChunk(part, static_cast<int32_t>(start), &logits, pick_here ? &argmax_ids : nullptr,
                                    last ? device_sampler : nullptr));
  }
  res.prefill_seconds = MonotonicSeconds() - t0;
  if (req.want_prompt_logits) res.prompt_logits = logits;

  // The last generated token is never fed back, so the context bounds tokens at ctx + 1.
  const int64_t budget = std::min<int64_t>(req.sampling.max_new_tokens, ctx - prompt_len + 1);
  const double t1 = MonotonicSeconds();
  res.stop_reason = "length";
  // Takes a generated token; false when the request ends with it (or before it).
  auto accept = [&](int32_t tok) {
    if (std::find(stop_tokens.begin(), stop_tokens.end(), tok) != stop_tokens.end()) {
      res.stop_reason = "eos";
      return false;
    }
    res.generated_ids.push_back(tok);
    if (detok) {
      StopChecker::Result r = stops.Feed(detok->Push(tok));
      emit(r.text);
      if (r.stopped) {
        res.stop_reason = "stop_string";
        return false;
      }
    }
    return static_cast<int64_t>(res.generated_ids.size()) < budget;
  };
  // Position of the last accepted token (the input of the next decode step).
  auto last_pos = [&] { return static_cast<int32_t>(prompt_len + res.generated_ids.size() - 1); };
  // Penalties count the tokens sampled before, so their steps wait for each token.
  const bool overlap = device_picks && !sampler.HasPenalties() && !argmax_ids.empty() && budget > 0 &&
                       OverlapsSteps(async_scheduling_, model_.CanLaunchSampled(1), model_.device());
  // Launches a decode step whose token the device picks (a draw each, in launch order).
  auto launch = [&](const StepInput& step) -> absl::StatusOr<PendingSample> {
    if (device_sampler == nullptr) return model_.LaunchGreedy(step);
    absl::StatusOr<PendingSample> p =
        model_.LaunchSample(step, OneRow(*device_sampler, prompt_ids_, {}, model_.config().vocab_size));
    if (p.ok()) device_sampler->SkipDraw();
    return p;
  };
  if (overlap) {
    // Step k + 1 is launched with token k still on the device: its id is -1, row 0 of the
    // step that samples it. The step after a stop token or string is computed and dropped.
    if (accept(argmax_ids[0])) {
      STRATA_ASSIGN_OR_RETURN(PendingSample pending, launch(ChunkStep({argmax_ids[0]}, last_pos())));
      while (true) {
        std::optional<PendingSample> next;
        if (static_cast<int64_t>(res.generated_ids.size()) + 1 < budget) {
          STRATA_ASSIGN_OR_RETURN(next, launch(ChunkStep({-1}, last_pos() + 1)));
        }
        STRATA_RETURN_IF_ERROR(model_.FinishSample(pending, &argmax_ids));
        ++res.decode_steps;
        if (!accept(argmax_ids[0])) break;
        pending = *std::move(next);  // launched: the budget allows another token
      }
    }
  } else {
    while (static_cast<int64_t>(res.generated_ids.size()) < budget) {
      const int32_t tok = !argmax_ids.empty() ? argmax_ids[0] : sampler.Sample(logits, req.prompt_ids, res.generated_ids);
      if (tok < 0) return absl::InternalError("sampling failed: the logits row has no finite value");
      if (!accept(tok)) break;
      argmax_ids.clear();
      STRATA_RETURN_IF_ERROR(
          RunChunk({tok}, last_pos(), &logits, device_picks ? &argmax_ids : nullptr, device_sampler, res.generated_ids));
      ++res.decode_steps;
    }
  }
  if (detok && !stops.stopped()) {
    StopChecker::Result r = stops.Feed(detok->Flush());
    emit(r.text);
    if (r.stopped) res.stop_reason = "stop_string";
    else emit(stops.Flush());
  }
  res.decode_seconds = MonotonicSeconds() - t1;
  return res;
}

}  // namespace strata
