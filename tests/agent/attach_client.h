// What the attach tests share (tests/agent/attach_test.cc, tests/attach/): the agent's control
// socket as a client sees it, a dormant program's environment, and the allocations a trace
// ends with against those the fake driver reports at exit (FAKECUDA_LIVE_DUMP).
#ifndef FRAGSCOPE_TESTS_AGENT_ATTACH_CLIENT_H_
#define FRAGSCOPE_TESTS_AGENT_ATTACH_CLIENT_H_

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "traced_process.h"

namespace fragscope::agent_test {

// The control socket of process `pid` under the test's XDG_RUNTIME_DIR.
inline std::string AgentSocket(const TempDir& dir, int pid) {
  return dir.path() + "/fragscope/agent-" + std::to_string(pid) + ".sock";
}

// The socket appears once the program's first CUDA event started the agent's thread.
inline bool WaitForFile(const std::string& path) {
  for (int i = 0; i < 6000; ++i) {  // safety net, not a timing assertion
    if (access(path.c_str(), F_OK) == 0) return true;
    usleep(10000);
  }
  return false;
}

// One command to the agent's control socket; its answer without the newline, or
// "connect failed".
inline std::string Control(const std::string& socket_path, const std::string& line) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "connect failed";
  }
  const std::string text = line + "\n";
  // MSG_NOSIGNAL: a refused peer may find the connection already closed.
  ssize_t ignored = send(fd, text.data(), text.size(), MSG_NOSIGNAL);
  (void)ignored;
  std::string answer;
  char buffer[512];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) answer.append(buffer, n);
  close(fd);
  while (!answer.empty() && answer.back() == '\n') answer.pop_back();
  return answer;
}

inline std::string Status(const std::string& socket_path) { return Control(socket_path, "status"); }

// Until the agent's status starts with `prefix` ("ok streaming", "ok dormant").
inline bool WaitForStatus(const std::string& socket_path, const std::string& prefix) {
  for (int i = 0; i < 6000; ++i) {  // safety net, not a timing assertion
    if (Status(socket_path).rfind(prefix, 0) == 0) return true;
    usleep(10000);
  }
  return false;
}

// The agent preloaded and dormant, its socket under `dir`, the fake's live set dumped at exit.
inline RunOptions Dormant(const TempDir& dir) {
  return RunOptions{true,
                    {{"FRAGSCOPE_DORMANT", "1"},
                     {"XDG_RUNTIME_DIR", dir.path()},
                     {"FAKECUDA_LIVE_DUMP", dir.File("truth")}}};
}

struct LiveAllocation {
  uint64_t size = 0;  // bytes
  int device = -1;
  bool operator==(const LiveAllocation& o) const { return size == o.size && device == o.device; }
};
using LiveAllocations = std::map<uint64_t, LiveAllocation>;  // by address

// The allocations live at the end of the stream: the last snapshot, then the events after it.
inline LiveAllocations ReplayAllocations(const Trace& trace) {
  LiveAllocations live;
  for (const v1::Frame& f : trace.frames) {
    if (f.has_snapshot()) {
      live.clear();
      for (const auto& a : f.snapshot().allocations()) live[a.address()] = {a.size(), a.device()};
    } else if (f.has_alloc() && f.alloc().result() == 0) {
      live[f.alloc().address()] = {f.alloc().size(), f.alloc().device()};
    } else if (f.has_free() && f.free().result() == 0) {
      live.erase(f.free().address());
    }
  }
  return live;
}

// FAKECUDA_LIVE_DUMP: "kind 0xaddress size device" per allocation live at exit. A pool's
// chunks and VMM objects are listed too, and are not allocations in a trace's sense (a chunk
// starts where its first block does): left out.
inline LiveAllocations GroundTruthAllocations(const std::string& path) {
  LiveAllocations live;
  std::istringstream in(ReadFile(path));
  std::string kind, address;
  uint64_t size = 0;
  int device = 0;
  while (in >> kind >> address >> size >> device) {
    if (kind == "pool_chunk" || kind.rfind("vmm_", 0) == 0) continue;
    live[ParseAddress(address)] = {size, device};
  }
  return live;
}

using LiveSet = std::map<uint64_t, uint64_t>;  // address -> size

inline LiveSet SizesByAddress(const LiveAllocations& live) {
  LiveSet sizes;
  for (const auto& [address, a] : live) sizes[address] = a.size;
  return sizes;
}
inline LiveSet Replay(const Trace& trace) { return SizesByAddress(ReplayAllocations(trace)); }
inline LiveSet GroundTruth(const std::string& path) {
  return SizesByAddress(GroundTruthAllocations(path));
}

}  // namespace fragscope::agent_test

#endif  // FRAGSCOPE_TESTS_AGENT_ATTACH_CLIENT_H_
