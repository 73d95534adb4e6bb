// Runs one test as several rank processes: the test binary re-executes itself with only the
// current test selected and STRATA_TEST_RANK / STRATA_TEST_NRANKS / STRATA_TEST_COMM_ID set;
// inside, ThisRank() tells the test body which rank it plays. The parent only supervises
// (exec'd children, so nothing of the parent's OpenMP state crosses a fork) and kills every
// rank left when the deadline passes, so a hang fails the test instead of blocking ctest.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

extern char** environ;

namespace strata::testing_util {

struct RankEnv {
  int rank = -1;
  int nranks = 0;
  std::string comm_id;  // 16 raw bytes
  bool child() const { return rank >= 0; }
};

inline std::string HexDecode(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

inline RankEnv ThisRank() {
  RankEnv e;
  const char* r = std::getenv("STRATA_TEST_RANK");
  const char* n = std::getenv("STRATA_TEST_NRANKS");
  const char* id = std::getenv("STRATA_TEST_COMM_ID");
  if (r == nullptr || n == nullptr || id == nullptr) return e;
  e.rank = std::atoi(r);
  e.nranks = std::atoi(n);
  e.comm_id = HexDecode(id);
  return e;
}

// A fresh random id in hex (32 digits), for STRATA_TEST_COMM_ID.
inline std::string NewHexId() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char b[16] = {};
  in.read(reinterpret_cast<char*>(b), sizeof(b));
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s.push_back(d[c >> 4]);
    s.push_back(d[c & 15]);
  }
  return s;
}

struct RankExit {
  int code = -1;        // exit status, or -1
  int signal = 0;       // the signal that ended it, or 0
  bool killed = false;  // still running at the deadline (then killed)
  double seconds = 0;   // from the start until it ended
};

// Runs the current test in `nranks` processes (ranks 0..nranks-1) and waits for all of them
// at most timeout_s seconds. `extra_env`: "NAME=value" entries for every rank.
inline std::vector<RankExit> RunRanks(int nranks, double timeout_s, const std::vector<std::string>& extra_env = {}) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
  const std::string id = NewHexId();
  std::vector<pid_t> pids(nranks, -1);
  std::vector<RankExit> exits(nranks);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string s(*e);
      if (s.rfind("STRATA_TEST_RANK=", 0) == 0 || s.rfind("STRATA_TEST_NRANKS=", 0) == 0 ||
          s.rfind("STRATA_TEST_COMM_ID=", 0) == 0 || s.rfind("GTEST_", 0) == 0)
        continue;
      env.push_back(s);
    }
    env.push_back("STRATA_TEST_RANK=" + std::to_string(r));
    env.push_back("STRATA_TEST_NRANKS=" + std::to_string(nranks));
    env.push_back("STRATA_TEST_COMM_ID=" + id);
    // Two ranks share two cores here: OpenMP threads that spin while idle would starve the
    // other rank (and its communicator's waits).
    if (std::getenv("OMP_WAIT_POLICY") == nullptr) env.push_back("OMP_WAIT_POLICY=PASSIVE");
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe", f = filter;
    char* argv[] = {self.data(), f.data(), nullptr};
    pid_t pid = -1;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
      ADD_FAILURE() << "posix_spawn failed for rank " << r;
      pid = -1;
    }
    pids[r] = pid;
  }
  int left = 0;
  for (pid_t p : pids) left += p > 0;
  while (left > 0) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int r = 0; r < nranks; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        exits[r].code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        exits[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        exits[r].seconds = waited;
        pids[r] = -1;
        --left;
      }
    }
    if (left > 0 && waited > timeout_s) {
      for (int r = 0; r < nranks; ++r) {
        if (pids[r] <= 0) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        exits[r].killed = true;
        exits[r].seconds = waited;
        pids[r] = -1;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return exits;
}

}  // namespace strata::testing_util
