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
#include <iterator>
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

// ---- Ranks under Open MPI's mpirun (one host, two processes, MPI transport forced). ----

// Whether this process is a rank that RunUnderMpirun started.
inline bool MpiChild() { return std::getenv("STRATA_TEST_MPI") != nullptr; }

struct MpirunExit {
  int code = -1;        // mpirun's exit status, or -1
  bool killed = false;  // still running at the deadline (then killed)
  double seconds = 0;
  std::string output;   // stdout and stderr of mpirun and its ranks
};

// Runs the current test in `nranks` processes started by `mpirun -np nranks --oversubscribe`
// (as root where needed) and waits at most timeout_s seconds; mpirun runs in its own process
// group, which is killed whole at the deadline.
inline MpirunExit RunUnderMpirun(int nranks, double timeout_s) {
  MpirunExit x;
  if (system("command -v mpirun >/dev/null 2>&1") != 0) {
    ADD_FAILURE() << "mpirun not found (scripts/install-deps.sh installs openmpi-bin)";
    return x;
  }
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    ADD_FAILURE() << "cannot read /proc/self/exe";
    return x;
  }
  char log_name[] = "/tmp/strata-mpirun-XXXXXX";
  const int log_fd = mkstemp(log_name);
  if (log_fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return x;
  }
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(nranks), "--oversubscribe",
                                   "-x", "STRATA_TEST_MPI=1", "-x", "OMP_WAIT_POLICY=PASSIVE",
                                   std::string(self, static_cast<size_t>(n)),
                                   std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name()};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string s(*e);
    if (s.rfind("GTEST_", 0) == 0 || s.rfind("STRATA_TEST_", 0) == 0) continue;
    env.push_back(s);
  }
  // Root in CI containers; vader's single-copy (CMA) needs ptrace rights containers lack.
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  env.push_back("OMPI_MCA_btl_vader_single_copy_mechanism=none");
  env.push_back("OMP_WAIT_POLICY=PASSIVE");
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const auto start = std::chrono::steady_clock::now();
  const int err = posix_spawnp(&pid, "mpirun", &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(log_fd);
  if (err != 0) {
    ADD_FAILURE() << "cannot start mpirun";
    unlink(log_name);
    return x;
  }
  for (;;) {
    x.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      x.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      break;
    }
    if (x.seconds > timeout_s) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      x.killed = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid, SIGKILL);  // any rank left behind
  std::ifstream log(log_name);
  x.output.assign(std::istreambuf_iterator<char>(log), std::istreambuf_iterator<char>());
  unlink(log_name);
  return x;
}

}  // namespace strata::testing_util
