// Runs the built `strata serve` as a child process on a free loopback port (--port 0; the
// port is read from the "listening on" line it prints), for tests that talk HTTP to it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace strata::testing {

// STRATA_TEST_SERVER_BIN runs the tests against another build (e.g. to see a regression
// test fail on the code before its fix).
inline std::string StrataBin() {
  const char* other = std::getenv("STRATA_TEST_SERVER_BIN");
  return other != nullptr && *other ? std::string(other) : std::string(STRATA_BIN_DIR) + "/strata";
}
inline std::string StoriesModel() { return std::string(STRATA_SHARED_DIR) + "/models/stories260K/stories260K.gguf"; }
inline bool FileExists(const std::string& p) { return std::ifstream(p).good(); }

class ServerProcess {
 public:
  ServerProcess() = default;
  // Runs `launcher... strata serve ...` instead (e.g. {"mpirun", "-np", "2"}).
  std::vector<std::string> launcher;
  ServerProcess(const ServerProcess&) = delete;
  ~ServerProcess() { Kill(); }

  // Starts `strata serve --port 0 <args>` and waits (at most 60 s) for its port.
  // Returns false, with `error()` saying why, if it did not come up.
  bool Start(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    int out[2];
    if (pipe(out) != 0) return Fail("pipe failed");
    pid_ = fork();
    if (pid_ < 0) return Fail("fork failed");
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<std::string> all = launcher;
      for (const std::string& a : {StrataBin(), std::string("serve"), std::string("--port"), std::string("0"),
                                   std::string("--threads"), std::string("1")})
        all.push_back(a);
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    out_fd_ = out[0];
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[512];
      const ssize_t n = read(out_fd_, buf, sizeof buf);
      if (n <= 0) break;  // the server exited
      text.append(buf, static_cast<size_t>(n));
      const size_t at = text.find("listening on http://");
      const size_t nl = at == std::string::npos ? at : text.find('\n', at);
      if (nl != std::string::npos) {
        port_ = std::stoi(text.substr(text.rfind(':', nl) + 1));
        return true;
      }
    }
    Kill();
    return Fail("the server did not print its port; stdout: " + text);
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& error() const { return error_; }

  // Sends `sig` and waits (at most `timeout_s`) for the exit; returns the exit status,
  // or -1 if it did not exit (it is then killed).
  int SignalAndWait(int sig, int timeout_s) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(20000);
    }
    Kill();
    return -1;
  }

  // Resident memory in KiB (VmRSS of /proc/PID/status), -1 if unreadable.
  long RssKiB() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
  }

  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (out_fd_ >= 0) {
      close(out_fd_);
      out_fd_ = -1;
    }
  }

 private:
  bool Fail(std::string why) {
    error_ = std::move(why);
    return false;
  }
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  std::string error_;
};

}  // namespace strata::testing
