// Running the real actmem binary from a test: exit code, stdout, stderr (one helper for every CLI test).
#pragma once

#include <sys/wait.h>  // WIFEXITED, WEXITSTATUS
#include <unistd.h>    // getpid

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace actmem::testing_cli {

struct Result {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

/// `actmem ARGS`, as a shell would run it. CTest runs each test in its own process, several at
/// once: the pid and a counter keep their stderr files apart.
inline Result run(const std::string& args) {
  static int n = 0;
  const std::string err_path =
      ::testing::TempDir() + "actmem_cli_err_" + std::to_string(getpid()) + "_" + std::to_string(n++);
  Result r;
  FILE* p = popen((std::string(ACTMEM_BINARY) + " " + args + " 2>" + err_path).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t got = 0;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, got);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* e = fopen(err_path.c_str(), "r")) {
    while ((got = fread(buf, 1, sizeof buf, e)) > 0) r.err.append(buf, got);
    fclose(e);
  }
  std::remove(err_path.c_str());
  return r;
}

/// A one-line error message: what every bad input gets.
inline bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

}  // namespace actmem::testing_cli
