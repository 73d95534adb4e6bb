#include "core/parallel/runtime/step_channel.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace strata {
namespace {

enum : uint32_t { kStep = 1, kCopyBlocks = 2, kShutdown = 3 };

struct Header {
  uint32_t kind = 0;
  uint32_t words = 0;  // int32 words of payload that follow
};

// The step's arrays, each as its length then its values.
std::vector<int32_t> Encode(const StepInput& in) {
  std::vector<int32_t> w;
  for (const std::vector<int32_t>* v : {&in.token_ids, &in.positions, &in.slot_mapping, &in.query_start_loc,
                                        &in.seq_lens, &in.block_tables, &in.logits_rows}) {
    w.push_back(static_cast<int32_t>(v->size()));
    w.insert(w.end(), v->begin(), v->end());
  }
  return w;
}

absl::Status Decode(const std::vector<int32_t>& w, StepInput* in) {
  size_t at = 0;
  for (std::vector<int32_t>* v : {&in->token_ids, &in->positions, &in->slot_mapping, &in->query_start_loc,
                                  &in->seq_lens, &in->block_tables, &in->logits_rows}) {
    if (at >= w.size() || w[at] < 0 || static_cast<size_t>(w[at]) > w.size() - at - 1)
      return absl::InvalidArgumentError("control channel: malformed step message");
    v->assign(w.begin() + static_cast<ptrdiff_t>(at + 1), w.begin() + static_cast<ptrdiff_t>(at + 1 + w[at]));
    at += 1 + static_cast<size_t>(w[at]);
  }
  return at == w.size() ? absl::OkStatus() : absl::InvalidArgumentError("control channel: trailing words");
}

}  // namespace

absl::Status StepChannel::Send(uint32_t kind, const std::vector<int32_t>& payload) {
  Header h{kind, static_cast<uint32_t>(payload.size())};
  absl::Status st = group_.Broadcast(&h, sizeof(h), 0, "control channel");
  if (st.ok() && !payload.empty()) {
    std::vector<int32_t> copy = payload;
    st = group_.Broadcast(copy.data(), copy.size() * 4, 0, "control channel");
  }
  // The replica is down: say so to every rank (over MPI this ends the job).
  if (!st.ok()) group_.Abort(std::string(st.message()));
  return st;
}

absl::Status StepChannel::Step(const StepInput& in) { return Send(kStep, Encode(in)); }

absl::Status StepChannel::CopyBlocks(std::span<const strata_block_pair> pairs) {
  std::vector<int32_t> w;
  for (const strata_block_pair& p : pairs) {
    w.push_back(p.src);
    w.push_back(p.dst);
  }
  return Send(kCopyBlocks, w);
}

absl::Status StepChannel::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  return Send(kShutdown, {});
}

StepChannel::~StepChannel() {
  if (group_.failure().ok()) Shutdown().IgnoreError();
}

absl::Status RunRankWorker(LlamaModel& model, parallel::ProcessGroup& group) {
  for (;;) {
    Header h;
    // Idle until rank 0 has work: no deadline here, only rank 0's exit (or abort) ends the wait.
    absl::Status st = group.BroadcastNoTimeout(&h, sizeof(h), 0, "control channel");
    std::vector<int32_t> w(st.ok() ? h.words : 0);
    if (st.ok() && !w.empty()) st = group.Broadcast(w.data(), w.size() * 4, 0, "control channel");
    if (!st.ok()) {
      group.Abort(absl::StrCat("rank ", group.rank(), " failed: ", st.message()));
      return st;
    }
    switch (h.kind) {
      case kShutdown: return absl::OkStatus();
      case kStep: {
        StepInput in;
        st = Decode(w, &in);
        if (st.ok()) st = model.RunPeerStep(in);
        break;
      }
      case kCopyBlocks: {
        if (w.size() % 2 != 0) {
          st = absl::InvalidArgumentError("control channel: odd block-pair message");
          break;
        }
        std::vector<strata_block_pair> pairs(w.size() / 2);
        for (size_t i = 0; i < pairs.size(); ++i) pairs[i] = {w[2 * i], w[2 * i + 1]};
        st = model.CopyPeerKvBlocks(pairs);
        break;
      }
      default: st = absl::InvalidArgumentError(absl::StrCat("control channel: unknown message kind ", h.kind));
    }
    if (!st.ok()) {
      // Make rank 0 (and everyone) stop too, with this rank's reason.
      group.Abort(absl::StrCat("rank ", group.rank(), " failed: ", st.message()));
      return st;
    }
  }
}

}  // namespace strata
