#include "core/parallel/shm_group.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <new>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace strata::parallel {

namespace {
constexpr uint64_t kMagic = 0x7374726174617368ull;  // "stratash"

struct RankState {
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> arrived;  // barriers passed
  char pad[48];
};

struct MailboxState {
  std::atomic<uint64_t> sent;   // chunks posted
  std::atomic<uint64_t> taken;  // chunks consumed
  std::atomic<uint64_t> len;    // bytes of the posted chunk
  char pad[40];
};

std::string Hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s.push_back(d[c >> 4]);
    s.push_back(d[c & 15]);
  }
  return s;
}

// Whether process `pid` is gone (or a zombie nobody reaped yet: it will never answer).
bool ProcessGone(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;  // no /proc: trust kill()
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

size_t SlotBytes() { return ShmGroup::kSlotBytes; }
}  // namespace

struct ShmSegment {
  std::atomic<uint64_t> magic;
  std::atomic<int32_t> init;  // 0: fresh, 1: being set up, 2: ready
  int32_t nranks;
  std::atomic<int32_t> joined;
  std::atomic<int32_t> aborted;
  char abort_msg[512];
  RankState ranks[ShmGroup::kMaxRanks];
  MailboxState mail[ShmGroup::kMaxRanks * ShmGroup::kMaxRanks];

  static size_t HeaderBytes() { return (sizeof(ShmSegment) + 4095) / 4096 * 4096; }
  static size_t TotalBytes(int32_t n) {
    return HeaderBytes() + static_cast<size_t>(n) * SlotBytes() + static_cast<size_t>(n) * n * ShmGroup::kMailboxBytes;
  }
  char* Slot(int32_t r) { return reinterpret_cast<char*>(this) + HeaderBytes() + static_cast<size_t>(r) * SlotBytes(); }
  char* MailData(int32_t src, int32_t dst) {
    return reinterpret_cast<char*>(this) + HeaderBytes() + static_cast<size_t>(nranks) * SlotBytes() +
           (static_cast<size_t>(src) * nranks + dst) * ShmGroup::kMailboxBytes;
  }
  MailboxState& Mail(int32_t src, int32_t dst) { return mail[src * ShmGroup::kMaxRanks + dst]; }
};

absl::StatusOr<std::string> ShmGroup::NewId() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  std::string id(kIdBytes, '\0');
  if (!in.read(id.data(), static_cast<std::streamsize>(id.size())))
    return absl::InternalError("shm group: cannot read /dev/urandom for a group id");
  return id;
}

absl::StatusOr<std::unique_ptr<ShmGroup>> ShmGroup::Join(const std::string& id, int32_t nranks, int32_t rank,
                                                         int32_t timeout_ms) {
  if (id.size() != kIdBytes) return absl::InvalidArgumentError(absl::StrCat("shm group: id of ", id.size(), " bytes, expected ", kIdBytes));
  if (nranks < 1 || nranks > kMaxRanks)
    return absl::InvalidArgumentError(absl::StrCat("shm group: ", nranks, " ranks (1..", kMaxRanks, " allowed)"));
  if (rank < 0 || rank >= nranks)
    return absl::InvalidArgumentError(absl::StrCat("shm group: rank ", rank, " outside [0, ", nranks, ")"));
  if (timeout_ms <= 0) timeout_ms = 60000;
  const std::string name = "/strata-" + Hex(id);
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("shm group: shm_open(", name, "): ", std::strerror(errno)));
  const size_t bytes = ShmSegment::TotalBytes(nranks);
  struct stat st {};
  if (fstat(fd, &st) != 0 || (static_cast<size_t>(st.st_size) != bytes && st.st_size != 0) ||
      (st.st_size == 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0)) {
    const std::string why = st.st_size != 0 && static_cast<size_t>(st.st_size) != bytes
                                ? "the segment was created for another number of ranks"
                                : std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("shm group: cannot size ", name, " to ", bytes, " bytes: ", why,
                                               " (is /dev/shm large enough?)"));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return absl::UnavailableError(absl::StrCat("shm group: mmap of ", bytes, " bytes: ", std::strerror(errno)));
  }
  std::unique_ptr<ShmGroup> g(new ShmGroup());
  g->seg_ = static_cast<ShmSegment*>(p);
  g->seg_bytes_ = bytes;
  g->rank_ = rank;
  g->nranks_ = nranks;
  g->timeout_ms_ = timeout_ms;
  ShmSegment* s = g->seg_;
  // The first rank here sets the header up; the zero-filled segment is a valid fresh state.
  int32_t expected = 0;
  if (s->init.compare_exchange_strong(expected, 1)) {
    s->nranks = nranks;
    s->magic.store(kMagic);
    s->init.store(2, std::memory_order_release);
  }
  absl::Status ready = g->WaitFor([s] { return s->init.load(std::memory_order_acquire) == 2; }, timeout_ms,
                                  "joining", [] { return std::string("the rank setting the group up"); });
  if (ready.ok() && (s->magic.load() != kMagic || s->nranks != nranks))
    ready = absl::InvalidArgumentError(absl::StrCat("shm group ", name, ": set up for ", s->nranks,
                                                    " ranks, this rank expects ", nranks));
  int32_t no_pid = 0;
  if (ready.ok() && !s->ranks[rank].pid.compare_exchange_strong(no_pid, static_cast<int32_t>(getpid())))
    ready = absl::InvalidArgumentError(absl::StrCat("shm group ", name, ": rank ", rank, " joined twice"));
  if (!ready.ok()) {
    shm_unlink(name.c_str());
    return ready;
  }
  if (s->joined.fetch_add(1) + 1 == nranks) shm_unlink(name.c_str());  // everyone has it mapped
  absl::Status all = g->WaitFor([s, nranks] { return s->joined.load() >= nranks; }, timeout_ms, "joining",
                                [s, nranks] {
                                  std::vector<int> missing;
                                  for (int r = 0; r < nranks; ++r)
                                    if (s->ranks[r].pid.load() == 0) missing.push_back(r);
                                  return absl::StrCat("rank(s) ", absl::StrJoin(missing, ", "), " to join");
                                });
  if (!all.ok()) {
    shm_unlink(name.c_str());
    return all;
  }
  return g;
}

ShmGroup::~ShmGroup() {
  if (seg_ != nullptr) munmap(seg_, seg_bytes_);
}

void ShmGroup::Abort(const std::string& why) {
  if (seg_ == nullptr) return;
  int32_t was = 0;
  if (seg_->aborted.compare_exchange_strong(was, 1)) {
    const std::string msg = absl::StrCat("rank ", rank_, ": ", why);
    std::strncpy(seg_->abort_msg, msg.c_str(), sizeof(seg_->abort_msg) - 1);
    seg_->aborted.store(2, std::memory_order_release);
  }
  if (failure_.ok()) failure_ = absl::AbortedError(why);
}

absl::Status ShmGroup::Fail(absl::Status st) {
  if (failure_.ok()) {
    failure_ = st;
    Abort(std::string(st.message()));
  }
  return st;
}

absl::Status ShmGroup::WaitFor(const std::function<bool()>& ready, int32_t timeout_ms, const char* what,
                               const std::function<std::string()>& waiting_on) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_check = start;
  for (uint64_t spin = 0;; ++spin) {
    if (ready()) return absl::OkStatus();
    if ((spin & 63) != 0) {
      sched_yield();
      continue;
    }
    const auto now = Clock::now();
    const auto waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
    if (seg_->aborted.load(std::memory_order_acquire) == 2 && !ready())
      return absl::AbortedError(absl::StrCat(what, ": the group was aborted (", seg_->abort_msg, ")"));
    if (now - last_check > std::chrono::milliseconds(10)) {
      last_check = now;
      for (int32_t r = 0; r < nranks_; ++r) {
        const int32_t pid = seg_->ranks[r].pid.load();
        if (r != rank_ && ProcessGone(pid) && !ready())
          return absl::UnavailableError(
              absl::StrCat(what, ": rank ", r, " (pid ", pid, ") exited while rank ", rank_, " waited for ", waiting_on()));
      }
    }
    if (timeout_ms >= 0 && waited_ms > timeout_ms && !ready())
      return absl::DeadlineExceededError(absl::StrCat(what, ": rank ", rank_, " timed out after ", timeout_ms,
                                                      " ms waiting for ", waiting_on()));
    // Yield first (a step's collectives follow each other closely), then sleep longer the
    // longer the wait, so an idle rank costs little CPU.
    if (waited_ms >= 50) {
      std::this_thread::sleep_for(std::chrono::microseconds(waited_ms >= 1000 ? 1000 : 100));
    } else if (waited_ms >= 1) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else {
      sched_yield();
    }
  }
}

absl::Status ShmGroup::Barrier(uint64_t* counter_self, const char* what, int32_t timeout_ms) {
  const uint64_t phase = ++*counter_self;
  seg_->ranks[rank_].arrived.store(phase, std::memory_order_release);
  ShmSegment* s = seg_;
  const int32_t n = nranks_;
  return WaitFor(
      [s, n, phase] {
        for (int32_t r = 0; r < n; ++r)
          if (s->ranks[r].arrived.load(std::memory_order_acquire) < phase) return false;
        return true;
      },
      timeout_ms, what,
      [s, n, phase] {
        std::vector<int> late;
        for (int32_t r = 0; r < n; ++r)
          if (s->ranks[r].arrived.load() < phase) late.push_back(r);
        return absl::StrCat("rank(s) ", absl::StrJoin(late, ", "));
      });
}

absl::Status ShmGroup::Exchange(size_t bytes, const PutFn& put, const TakeFn& take, const char* what) {
  if (!failure_.ok()) return failure_;
  std::vector<const char*> slots(static_cast<size_t>(nranks_));
  for (int32_t r = 0; r < nranks_; ++r) slots[r] = seg_->Slot(r);
  size_t offset = 0;
  do {
    const size_t len = std::min(kSlotBytes, bytes - offset);
    if (put) put(seg_->Slot(rank_), offset, len);
    if (absl::Status st = Barrier(&phase_, what, timeout_ms_); !st.ok()) return Fail(st);
    if (take) take(slots.data(), offset, len);
    if (absl::Status st = Barrier(&phase_, what, timeout_ms_); !st.ok()) return Fail(st);
    offset += len;
  } while (offset < bytes);
  return absl::OkStatus();
}

absl::Status ShmGroup::BroadcastImpl(void* data, size_t bytes, int32_t root, const char* what, int32_t timeout_ms) {
  if (!failure_.ok()) return failure_;
  if (root < 0 || root >= nranks_) return absl::InvalidArgumentError(absl::StrCat(what, ": root ", root, " is no rank"));
  char* d = static_cast<char*>(data);
  size_t offset = 0;
  bool first = true;
  do {
    const size_t len = std::min(kSlotBytes, bytes - offset);
    if (rank_ == root) std::memcpy(seg_->Slot(rank_), d + offset, len);
    // Only the first wait of a broadcast may be unbounded: once the root has started, the
    // rest follows at once.
    if (absl::Status st = Barrier(&phase_, what, first ? timeout_ms : timeout_ms_); !st.ok()) return Fail(st);
    if (rank_ != root) std::memcpy(d + offset, seg_->Slot(root), len);
    if (absl::Status st = Barrier(&phase_, what, timeout_ms_); !st.ok()) return Fail(st);
    offset += len;
    first = false;
  } while (offset < bytes);
  return absl::OkStatus();
}

absl::Status ShmGroup::Broadcast(void* data, size_t bytes, int32_t root, const char* what) {
  return BroadcastImpl(data, bytes, root, what, timeout_ms_);
}

absl::Status ShmGroup::BroadcastNoTimeout(void* data, size_t bytes, int32_t root, const char* what) {
  return BroadcastImpl(data, bytes, root, what, -1);
}

absl::Status ShmGroup::Send(const void* data, size_t bytes, int32_t peer, const char* what) {
  if (!failure_.ok()) return failure_;
  if (peer < 0 || peer >= nranks_ || peer == rank_)
    return absl::InvalidArgumentError(absl::StrCat(what, ": peer ", peer, " (this is rank ", rank_, " of ", nranks_, ")"));
  MailboxState& m = seg_->Mail(rank_, peer);
  char* box = seg_->MailData(rank_, peer);
  const char* d = static_cast<const char*>(data);
  size_t offset = 0;
  do {
    const size_t len = std::min(kMailboxBytes, bytes - offset);
    const uint64_t sent = m.sent.load(std::memory_order_relaxed);
    absl::Status st = WaitFor([&m, sent] { return m.taken.load(std::memory_order_acquire) == sent; }, timeout_ms_,
                              what, [peer] { return absl::StrCat("rank ", peer, " to take the previous message"); });
    if (!st.ok()) return Fail(st);
    std::memcpy(box, d + offset, len);
    m.len.store(len, std::memory_order_relaxed);
    m.sent.store(sent + 1, std::memory_order_release);
    offset += len;
  } while (offset < bytes);
  return absl::OkStatus();
}

absl::Status ShmGroup::Recv(void* data, size_t bytes, int32_t peer, const char* what) {
  if (!failure_.ok()) return failure_;
  if (peer < 0 || peer >= nranks_ || peer == rank_)
    return absl::InvalidArgumentError(absl::StrCat(what, ": peer ", peer, " (this is rank ", rank_, " of ", nranks_, ")"));
  MailboxState& m = seg_->Mail(peer, rank_);
  const char* box = seg_->MailData(peer, rank_);
  char* d = static_cast<char*>(data);
  size_t offset = 0;
  do {
    const size_t len = std::min(kMailboxBytes, bytes - offset);
    const uint64_t taken = m.taken.load(std::memory_order_relaxed);
    absl::Status st = WaitFor([&m, taken] { return m.sent.load(std::memory_order_acquire) > taken; }, timeout_ms_, what,
                              [peer] { return absl::StrCat("rank ", peer, " to send"); });
    if (!st.ok()) return Fail(st);
    const uint64_t got = m.len.load(std::memory_order_relaxed);
    if (got != len)
      return Fail(absl::InvalidArgumentError(absl::StrCat(what, ": rank ", peer, " sent a chunk of ", got,
                                                          " bytes where rank ", rank_, " expected ", len)));
    std::memcpy(d + offset, box, len);
    m.taken.store(taken + 1, std::memory_order_release);
    offset += len;
  } while (offset < bytes);
  return absl::OkStatus();
}

}  // namespace strata::parallel
