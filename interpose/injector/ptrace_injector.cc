#include "fragscope/injector/ptrace_injector.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "fragscope/attach_contract.h"

namespace fragscope::injector {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

#if defined(__x86_64__)
// What to tell the user when ptrace is refused.
std::string PermissionAdvice(pid_t pid) {
  std::string why = PtraceRestriction(pid);
  if (!why.empty()) return why;
  return absl::StrFormat(
      "ptrace of pid %d was refused (EPERM). In a container, ptrace needs the SYS_PTRACE "
      "capability (docker run --cap-add SYS_PTRACE) or a seccomp profile that allows it; "
      "otherwise run fragscope attach as root, or start the program with the agent dormant "
      "(LD_PRELOAD=.../libfragscope.so FRAGSCOPE_DORMANT=1) so attach needs no ptrace",
      pid);
}
#endif

struct Mapping {
  uint64_t start = 0, end = 0, offset = 0;
  std::string perms, path;
};

std::vector<Mapping> ReadMaps(pid_t pid) {
  std::vector<Mapping> maps;
  std::ifstream in(absl::StrFormat("/proc/%d/maps", pid));
  std::string line;
  while (std::getline(in, line)) {
    Mapping m;
    char perms[8] = {};
    unsigned long long start, end, offset;
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %*s %*s %n", &start, &end, perms, &offset,
                    &path_at) < 4) {
      continue;
    }
    m.start = start;
    m.end = end;
    m.offset = offset;
    m.perms = perms;
    if (path_at > 0 && static_cast<size_t>(path_at) < line.size()) m.path = line.substr(path_at);
    maps.push_back(std::move(m));
  }
  return maps;
}

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool Matches(const std::string& path, const std::string& prefix) {
  if (path.empty() || path[0] != '/') return false;
  if (prefix[0] == '/') return path == prefix;
  return BaseName(path).rfind(prefix, 0) == 0;
}

struct ElfSymbolResult {
  bool found = false;
  uint64_t value = 0;
  uint64_t first_load_vaddr = 0;
  uint64_t first_load_offset = 0;
};

// Looks `symbol` up in the ELF file `path`, and the first PT_LOAD segment (for the load bias).
ElfSymbolResult LookUpElf(const std::string& path, const std::string& symbol) {
  ElfSymbolResult r;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return r;
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  if (elf == nullptr) {
    close(fd);
    return r;
  }
  size_t phnum = 0;
  bool have_load = false;
  if (elf_getphdrnum(elf, &phnum) == 0) {
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD) continue;
      if (!have_load || ph.p_vaddr < r.first_load_vaddr) {
        r.first_load_vaddr = ph.p_vaddr;
        r.first_load_offset = ph.p_offset;
        have_load = true;
      }
    }
  }
  {
    for (int pass = 0; pass < 2 && !r.found; ++pass) {
      const Elf64_Word type = pass == 0 ? SHT_DYNSYM : SHT_SYMTAB;
      Elf_Scn* scn = nullptr;
      while ((scn = elf_nextscn(elf, scn)) != nullptr && !r.found) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != type || sh.sh_entsize == 0) continue;
        Elf_Data* data = elf_getdata(scn, nullptr);
        if (data == nullptr) continue;
        const size_t n = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; i < n; ++i) {
          GElf_Sym sym;
          if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
          if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
          const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
          if (name != nullptr && symbol == name) {
            r.found = true;
            r.value = sym.st_value;
            break;
          }
        }
      }
    }
  }
  elf_end(elf);
  close(fd);
  if (!have_load) r.found = false;
  return r;
}

#if defined(__x86_64__)  // the injector proper; other machines are refused below

// --- threads under ptrace ---

std::vector<pid_t> ListThreads(pid_t pid) {
  std::vector<pid_t> tids;
  DIR* dir = opendir(absl::StrFormat("/proc/%d/task", pid).c_str());
  if (dir == nullptr) return tids;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long tid = std::strtol(e->d_name, &end, 10);
    if (tid > 0 && *end == '\0') tids.push_back(static_cast<pid_t>(tid));
  }
  closedir(dir);
  std::sort(tids.begin(), tids.end());
  return tids;
}

struct StoppedThread {
  pid_t tid = 0;
  int pending_signal = 0;  // a signal that arrived while we stopped it: delivered at detach
};

// Waits until `tid` reports a stop (or is gone). Returns false when it exited.
bool WaitForStop(pid_t tid, StoppedThread* t, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    pid_t got = waitpid(tid, &status, __WALL | WNOHANG);
    if (got == tid) {
      if (WIFEXITED(status) || WIFSIGNALED(status)) return false;
      if (WIFSTOPPED(status)) {
        const int sig = WSTOPSIG(status);
        const int event = status >> 16;
        // A signal-delivery stop of a real signal: keep it for the detach.
        if (event == 0 && sig != SIGTRAP && sig != SIGSTOP) t->pending_signal = sig;
        return true;
      }
    } else if (got < 0 && errno != EINTR) {
      return false;
    }
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// All threads of one process, stopped; let go by Release() or the destructor.
class StoppedProcess {
 public:
  explicit StoppedProcess(pid_t pid) : pid_(pid) {}
  ~StoppedProcess() { Release(); }

  // Seizes and interrupts `tid`. EPERM/ESRCH are reported through the status.
  absl::Status Stop(pid_t tid) {
    if (threads_.count(tid) != 0) return absl::OkStatus();
    if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
      const int e = errno;
      if (e == ESRCH) return absl::NotFoundError(absl::StrFormat("thread %d is gone", tid));
      if (e == EPERM) return absl::PermissionDeniedError(PermissionAdvice(pid_));
      return absl::InternalError(
          absl::StrFormat("ptrace(PTRACE_SEIZE, %d) failed: %s", tid, std::strerror(e)));
    }
    StoppedThread t;
    t.tid = tid;
    if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 || !WaitForStop(tid, &t, 5000)) {
      ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
      return absl::NotFoundError(absl::StrFormat("thread %d did not stop (exited?)", tid));
    }
    threads_[tid] = t;
    return absl::OkStatus();
  }

  // Stops every thread, including ones created meanwhile.
  absl::Status StopAll() {
    for (int round = 0; round < 100; ++round) {
      bool added = false;
      for (pid_t tid : ListThreads(pid_)) {
        if (threads_.count(tid) != 0) continue;
        absl::Status s = Stop(tid);
        if (s.code() == absl::StatusCode::kNotFound) continue;  // exited meanwhile
        if (!s.ok()) return s;
        added = true;
      }
      if (!added) {
        if (threads_.empty()) {
          return absl::NotFoundError(absl::StrFormat("pid %d has no threads left", pid_));
        }
        return absl::OkStatus();
      }
    }
    return absl::UnavailableError(
        absl::StrFormat("pid %d keeps creating threads; could not stop them all", pid_));
  }

  void Release(pid_t tid) {
    auto it = threads_.find(tid);
    if (it == threads_.end()) return;
    ptrace(PTRACE_DETACH, tid, nullptr,
           reinterpret_cast<void*>(static_cast<intptr_t>(it->second.pending_signal)));
    threads_.erase(it);
  }
  void Release() {
    while (!threads_.empty()) Release(threads_.begin()->first);
  }

  std::map<pid_t, StoppedThread>& threads() { return threads_; }

 private:
  pid_t pid_;
  std::map<pid_t, StoppedThread> threads_;
};

bool GetRegs(pid_t tid, user_regs_struct* r) {
  return ptrace(PTRACE_GETREGS, tid, nullptr, r) == 0;
}
bool SetRegs(pid_t tid, const user_regs_struct& r) {
  return ptrace(PTRACE_SETREGS, tid, nullptr, &r) == 0;
}

// Writes through ptrace (which may write read-only text): word by word, read-modify-write.
bool PokeBytes(pid_t tid, uint64_t address, const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint64_t at = address & ~uint64_t{7};
  const uint64_t end = address + size;
  for (; at < end; at += 8) {
    errno = 0;
    long word = ptrace(PTRACE_PEEKDATA, tid, reinterpret_cast<void*>(at), nullptr);
    if (errno != 0) return false;
    uint8_t w[8];
    std::memcpy(w, &word, 8);
    for (int i = 0; i < 8; ++i) {
      const uint64_t a = at + static_cast<uint64_t>(i);
      if (a >= address && a < end) w[i] = bytes[a - address];
    }
    std::memcpy(&word, w, 8);
    if (ptrace(PTRACE_POKEDATA, tid, reinterpret_cast<void*>(at), reinterpret_cast<void*>(word)) !=
        0) {
      return false;
    }
  }
  return true;
}

bool PeekBytes(pid_t pid, pid_t tid, uint64_t address, void* out, size_t size) {
  if (ReadProcessMemory(pid, address, out, size)) return true;
  auto* bytes = static_cast<uint8_t*>(out);
  for (size_t done = 0; done < size;) {
    const uint64_t at = (address + done) & ~uint64_t{7};
    errno = 0;
    long word = ptrace(PTRACE_PEEKDATA, tid, reinterpret_cast<void*>(at), nullptr);
    if (errno != 0) return false;
    uint8_t w[8];
    std::memcpy(w, &word, 8);
    for (size_t i = (address + done) - at; i < 8 && done < size; ++i) bytes[done++] = w[i];
  }
  return true;
}

std::string ReadString(pid_t pid, pid_t tid, uint64_t address) {
  std::string s;
  char chunk[64];
  while (address != 0 && s.size() < 4096 && PeekBytes(pid, tid, address, chunk, sizeof(chunk))) {
    const void* nul = std::memchr(chunk, '\0', sizeof(chunk));
    if (nul != nullptr) {
      s.append(chunk, static_cast<const char*>(nul) - chunk);
      return s;
    }
    s.append(chunk, sizeof(chunk));
    address += sizeof(chunk);
  }
  return s;
}

// System calls during which a thread may be inside the allocator with its lock held.
bool MemoryManagementSyscall(long nr) {
  return nr == SYS_mmap || nr == SYS_munmap || nr == SYS_brk || nr == SYS_mprotect ||
         nr == SYS_mremap || nr == SYS_madvise;
}

// Makes the stopped thread `tid` call fn(args...) and returns its rax. Strings in `strings`
// are copied to its stack first and replace the args that are kStringArg + index.
constexpr uint64_t kStringArg = 0xF5000000ull;

absl::StatusOr<uint64_t> CallInTarget(pid_t pid, pid_t tid, uint64_t fn, std::vector<uint64_t> args,
                                      const std::vector<std::string>& strings, int timeout_s) {
  user_regs_struct saved;
  if (!GetRegs(tid, &saved)) {
    return absl::InternalError(absl::StrFormat("PTRACE_GETREGS(%d): %s", tid, strerror(errno)));
  }
  user_regs_struct r = saved;
  uint64_t sp = saved.rsp - 512;  // below the 128-byte red zone, with room to spare
  std::vector<uint64_t> string_at;
  for (const std::string& s : strings) {
    sp = (sp - (s.size() + 1)) & ~uint64_t{15};
    if (!PokeBytes(tid, sp, s.c_str(), s.size() + 1)) {
      return absl::InternalError(absl::StrFormat("cannot write to the stack of thread %d", tid));
    }
    string_at.push_back(sp);
  }
  for (uint64_t& a : args) {
    if (a >= kStringArg && a < kStringArg + string_at.size()) a = string_at[a - kStringArg];
  }
  sp &= ~uint64_t{15};
  sp -= 8;  // the return address: as after a call, rsp % 16 == 8 at the entry
  const uint64_t zero = 0;
  if (!PokeBytes(tid, sp, &zero, sizeof(zero))) {
    return absl::InternalError(absl::StrFormat("cannot write to the stack of thread %d", tid));
  }
  r.rsp = sp;
  r.rip = fn;
  r.rax = 0;
  r.orig_rax = static_cast<uint64_t>(-1);  // no system call restart for our call
  unsigned long long* arg_regs[] = {&r.rdi, &r.rsi, &r.rdx, &r.rcx, &r.r8, &r.r9};
  for (size_t i = 0; i < args.size() && i < 6; ++i) *arg_regs[i] = args[i];
  if (!SetRegs(tid, r) || ptrace(PTRACE_CONT, tid, nullptr, nullptr) != 0) {
    SetRegs(tid, saved);
    return absl::InternalError(absl::StrFormat("cannot start the call in thread %d", tid));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  absl::StatusOr<uint64_t> result = absl::DeadlineExceededError("no answer");
  for (;;) {
    int status = 0;
    pid_t got = waitpid(tid, &status, __WALL | WNOHANG);
    if (got == 0) {
      if (Clock::now() > deadline) {
        ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
        StoppedThread ignored;
        WaitForStop(tid, &ignored, 2000);
        result = absl::DeadlineExceededError(absl::StrFormat(
            "the call in thread %d of pid %d did not return within %d s (the process may be "
            "blocked on a lock that thread holds)",
            tid, pid, timeout_s));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 || WIFEXITED(status) || WIFSIGNALED(status)) {
      return absl::NotFoundError(absl::StrFormat("pid %d ended during the injection", pid));
    }
    const int sig = WSTOPSIG(status);
    const int event = status >> 16;
    if (event == 0 && sig == SIGSEGV) {
      user_regs_struct now;
      GetRegs(tid, &now);
      if (now.rip == 0) {
        result = now.rax;
      } else {
        result = absl::InternalError(
            absl::StrFormat("the injected call crashed in thread %d at %#llx", tid, now.rip));
      }
      break;
    }
    // Other stops while our call runs: deliver real signals (their handlers run on our frame,
    // as they would on any), continue past group stops.
    const int deliver = event == 0 && sig != SIGTRAP && sig != SIGSTOP ? sig : 0;
    ptrace(PTRACE_CONT, tid, nullptr, reinterpret_cast<void*>(static_cast<intptr_t>(deliver)));
  }
  // Back where it was: an interrupted system call restarts when it is let go.
  SetRegs(tid, saved);
  return result;
}

// Steps threads out of the bytes about to be overwritten (a thread at the first byte is
// fine: it will run whatever is there next).
absl::Status MoveThreadsOut(StoppedProcess& stopped, const InjectedAgent& agent) {
  for (auto& [tid, thread] : stopped.threads()) {
    for (int step = 0;; ++step) {
      user_regs_struct r;
      if (!GetRegs(tid, &r)) break;
      const InjectedPatch* inside = nullptr;
      for (const InjectedPatch& p : agent.patches) {
        if (r.rip > p.address && r.rip < p.address + p.original.size()) inside = &p;
      }
      if (inside == nullptr) break;
      if (step == 64) {
        return absl::UnavailableError(absl::StrFormat(
            "thread %d stays inside the first bytes of %s; try again", tid, inside->name));
      }
      StoppedThread t;
      if (ptrace(PTRACE_SINGLESTEP, tid, nullptr, nullptr) != 0 || !WaitForStop(tid, &t, 2000)) {
        return absl::UnavailableError(absl::StrFormat("cannot single-step thread %d", tid));
      }
      if (t.pending_signal != 0) thread.pending_signal = t.pending_signal;
    }
  }
  return absl::OkStatus();
}

// Stops one thread of `pid` that waits in a system call (not a memory-management one: a
// thread stopped in user code, or in mmap/brk, may hold the allocator's or the loader's locks
// that the calls we make in it need), retrying for 3 s. It stays stopped in `borrowed`.
absl::StatusOr<pid_t> BorrowWaitingThread(pid_t pid, StoppedProcess& borrowed) {
  const auto give_up = Clock::now() + std::chrono::seconds(3);
  for (;;) {
    for (pid_t candidate : ListThreads(pid)) {
      absl::Status s = borrowed.Stop(candidate);
      if (s.code() == absl::StatusCode::kPermissionDenied) return s;
      if (!s.ok()) continue;
      user_regs_struct r;
      if (GetRegs(candidate, &r) && static_cast<int64_t>(r.orig_rax) >= 0 &&
          !MemoryManagementSyscall(static_cast<long>(r.orig_rax)) &&
          borrowed.threads()[candidate].pending_signal == 0) {
        return candidate;
      }
      borrowed.Release(candidate);
    }
    if (ListThreads(pid).empty()) {
      return absl::NotFoundError(absl::StrFormat("pid %d ended", pid));
    }
    if (Clock::now() > give_up) {
      return absl::UnavailableError(absl::StrFormat(
          "no thread of pid %d was waiting in a system call in 3 s of trying, and a thread "
          "stopped in user code may hold the allocator's or loader's locks that loading the "
          "agent needs; try again when the process is waiting (e.g. on the GPU or I/O)",
          pid));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

enum class Write { kPatch, kOriginal };

absl::Status WriteAll(pid_t pid, const InjectedAgent& agent, Write what) {
  StoppedProcess stopped(pid);
  if (absl::Status s = stopped.StopAll(); !s.ok()) return s;
  if (absl::Status s = MoveThreadsOut(stopped, agent); !s.ok()) return s;
  const pid_t tid = stopped.threads().begin()->first;
  std::string problems;
  for (const InjectedPatch& p : agent.patches) {
    const std::vector<uint8_t>& expect = what == Write::kPatch ? p.original : p.patch;
    const std::vector<uint8_t>& put = what == Write::kPatch ? p.patch : p.original;
    std::vector<uint8_t> now(put.size());
    if (!PeekBytes(pid, tid, p.address, now.data(), now.size())) {
      problems += absl::StrFormat("%s: cannot read %#x; ", p.name, p.address);
      continue;
    }
    if (now == put) continue;  // already so (a forked copy, a second attach)
    if (now != expect) {
      problems +=
          absl::StrFormat("%s: its bytes changed since the agent read them, left alone; ", p.name);
      continue;
    }
    if (!PokeBytes(tid, p.address, put.data(), put.size())) {
      problems += absl::StrFormat("%s: PTRACE_POKEDATA at %#x failed: %s; ", p.name, p.address,
                                  std::strerror(errno));
    }
  }
  stopped.Release();
  if (!problems.empty()) return absl::InternalError(problems);
  return absl::OkStatus();
}

#endif  // __x86_64__

}  // namespace

bool ReadProcessMemory(pid_t pid, uint64_t address, void* out, size_t size) {
  int fd = open(absl::StrFormat("/proc/%d/mem", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t got = pread(fd, out, size, static_cast<off_t>(address));
  close(fd);
  return got == static_cast<ssize_t>(size);
}

std::string PtraceRestriction(pid_t pid) {
  std::string scope = ReadSmallFile("/proc/sys/kernel/yama/ptrace_scope");
  if (scope.empty()) return "";  // no Yama: classic rules (same uid, or CAP_SYS_PTRACE)
  const int level = std::atoi(scope.c_str());
  const bool privileged = geteuid() == 0;
  if (level == 0 || (level == 1 && privileged) || (level == 2 && privileged)) return "";
  if (level == 3) {
    return absl::StrFormat(
        "ptrace is disabled on this machine (kernel.yama.ptrace_scope=3, which only a reboot "
        "resets), so pid %d cannot be attached by injection. Start the program with the agent "
        "dormant instead (LD_PRELOAD=.../libfragscope.so FRAGSCOPE_DORMANT=1) and attach to that",
        pid);
  }
  return absl::StrFormat(
      "ptrace of pid %d is not permitted: kernel.yama.ptrace_scope=%d allows %s. Either run "
      "'sudo sysctl kernel.yama.ptrace_scope=0' (until reboot), run fragscope attach as root, or "
      "start the program with the agent dormant (LD_PRELOAD=.../libfragscope.so "
      "FRAGSCOPE_DORMANT=1) so attach needs no ptrace",
      pid, level,
      level == 1 ? "only a parent process to trace its children" : "only root (CAP_SYS_PTRACE)");
}

std::optional<uint64_t> FindSymbolInProcess(pid_t pid, const std::string& file_prefix,
                                            const std::string& symbol) {
  std::vector<Mapping> maps = ReadMaps(pid);
  std::string path;
  for (const Mapping& m : maps) {
    if (Matches(m.path, file_prefix)) {
      path = m.path;
      break;
    }
  }
  if (path.empty()) return std::nullopt;
  // The process may see another file system (a container): read the file it mapped.
  std::string file = absl::StrFormat("/proc/%d/root%s", pid, path);
  if (access(file.c_str(), R_OK) != 0) file = path;
  ElfSymbolResult elf = LookUpElf(file, symbol);
  if (!elf.found) return std::nullopt;
  const uint64_t page = static_cast<uint64_t>(getpagesize());
  const uint64_t first_offset = elf.first_load_offset & ~(page - 1);
  for (const Mapping& m : maps) {
    if (m.path == path && m.offset == first_offset) {
      const uint64_t bias = m.start - (elf.first_load_vaddr & ~(page - 1));
      return bias + elf.value;
    }
  }
  return std::nullopt;
}

absl::Status InjectAgent(pid_t pid, const std::string& agent_path, InjectedAgent* out) {
#if !defined(__x86_64__)
  (void)pid;
  (void)agent_path;
  (void)out;
  return absl::UnimplementedError(
      "attach by injection is implemented for x86-64 only; start the program with the agent "
      "dormant (LD_PRELOAD=.../libfragscope.so FRAGSCOPE_DORMANT=1) and attach to that");
#else
  // Another tracer (a debugger, strace) makes PTRACE_SEIZE fail with EPERM, which would read
  // as a permission problem.
  {
    std::istringstream status(ReadSmallFile(absl::StrFormat("/proc/%d/status", pid)));
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("TracerPid:", 0) != 0) continue;
      const long tracer = std::strtol(line.c_str() + 10, nullptr, 10);
      if (tracer != 0 && tracer != getpid()) {
        std::string name = ReadSmallFile(absl::StrFormat("/proc/%ld/comm", tracer));
        while (!name.empty() && name.back() == '\n') name.pop_back();
        return absl::FailedPreconditionError(absl::StrFormat(
            "pid %d is already traced by pid %ld (%s: a debugger or strace?); detach that first",
            pid, tracer, name.empty() ? "?" : name));
      }
    }
  }
  // A 32-bit program would need another calling convention (and CUDA has none for it).
  {
    char ident[EI_NIDENT] = {};
    std::ifstream exe(absl::StrFormat("/proc/%d/exe", pid), std::ios::binary);
    if (exe.read(ident, sizeof(ident)) && ident[EI_CLASS] != ELFCLASS64) {
      return absl::FailedPreconditionError(
          absl::StrFormat("pid %d is a 32-bit program; injection supports x86-64 only", pid));
    }
  }
  // Where dlopen is: libc (glibc 2.34 and later), else libdl if the program loaded it.
  std::optional<uint64_t> dlopen_at = FindSymbolInProcess(pid, "libc.so", "dlopen");
  std::optional<uint64_t> dlerror_at = FindSymbolInProcess(pid, "libc.so", "dlerror");
  if (!dlopen_at) {
    dlopen_at = FindSymbolInProcess(pid, "libdl.so", "dlopen");
    dlerror_at = FindSymbolInProcess(pid, "libdl.so", "dlerror");
  }
  if (!dlopen_at) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot find dlopen in pid %d (its libc is older than glibc 2.34 and it has not loaded "
        "libdl, or it is not glibc); start it with the agent dormant instead",
        pid));
  }

  // Borrow a thread waiting in a system call: it holds no user-space lock of the allocator or
  // loader, which dlopen needs.
  StoppedProcess borrowed(pid);
  absl::StatusOr<pid_t> borrowed_tid = BorrowWaitingThread(pid, borrowed);
  if (!borrowed_tid.ok()) return borrowed_tid.status();
  const pid_t tid = *borrowed_tid;

  absl::StatusOr<uint64_t> handle = CallInTarget(
      pid, tid, *dlopen_at, {kStringArg, static_cast<uint64_t>(RTLD_NOW)}, {agent_path}, 60);
  if (!handle.ok()) return handle.status();
  if (*handle == 0) {
    std::string why = "(no dlerror)";
    if (dlerror_at) {
      absl::StatusOr<uint64_t> text = CallInTarget(pid, tid, *dlerror_at, {}, {}, 10);
      if (text.ok() && *text != 0) why = ReadString(pid, tid, *text);
    }
    return absl::FailedPreconditionError(
        absl::StrFormat("pid %d could not load %s: %s", pid, agent_path, why));
  }
  std::optional<uint64_t> start = FindSymbolInProcess(pid, agent_path, kFragscopeInjectEntry);
  if (!start) {
    return absl::InternalError(absl::StrFormat("%s is loaded in pid %d but %s was not found in it",
                                               agent_path, pid, kFragscopeInjectEntry));
  }
  absl::StatusOr<uint64_t> table_at = CallInTarget(pid, tid, *start, {}, {}, 60);
  if (!table_at.ok()) return table_at.status();
  auto table = std::make_unique<FragscopeInjectTable>();
  if (*table_at == 0 || !PeekBytes(pid, tid, *table_at, table.get(), sizeof(*table))) {
    return absl::InternalError(absl::StrFormat("cannot read the agent's answer in pid %d", pid));
  }
  borrowed.Release();
  if (table->magic != kFragscopeInjectMagic || table->abi != kFragscopeInjectAbi) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the agent loaded in pid %d is another version than this fragscope (%s)", pid, agent_path));
  }
  table->message[sizeof(table->message) - 1] = '\0';
  if (table->status != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the agent in pid %d cannot hook libcuda: %s", pid, table->message));
  }
  InjectedAgent agent;
  agent.refused = table->refused;
  agent.refused_why = table->message;
  for (uint32_t i = 0; i < table->count && i < kFragscopeInjectMaxPatches; ++i) {
    const FragscopeInjectPatch& p = table->patches[i];
    if (p.length < 5 || p.length > sizeof(p.original)) continue;
    InjectedPatch ip;
    ip.name.assign(p.name, strnlen(p.name, sizeof(p.name)));
    ip.address = p.address;
    ip.original.assign(p.original, p.original + p.length);
    ip.patch.assign(p.patch, p.patch + p.length);
    agent.patches.push_back(std::move(ip));
  }
  if (absl::Status s = WriteAll(pid, agent, Write::kPatch); !s.ok()) {
    // Leave no half-patched driver behind.
    WriteAll(pid, agent, Write::kOriginal).IgnoreError();
    return absl::InternalError(
        absl::StrFormat("patching libcuda in pid %d failed: %s", pid, s.message()));
  }
  *out = std::move(agent);
  return absl::OkStatus();
#endif
}

absl::Status RemovePatches(pid_t pid, const InjectedAgent& agent) {
  if (agent.patches.empty()) return absl::OkStatus();
#if defined(__x86_64__)
  return WriteAll(pid, agent, Write::kOriginal);
#else
  (void)pid;
  return absl::UnimplementedError("attach by injection is implemented for x86-64 only");
#endif
}

namespace {

// Calls the agent's `entry_name`(wait_ms, strings...) on a borrowed thread and reads the
// FragscopeTorchImport it returns.
absl::Status CallTorchEntry(pid_t pid, const std::string& agent_path, const char* entry_name,
                            uint32_t wait_ms, const std::vector<std::string>& strings,
                            FragscopeTorchImport* out) {
#if !defined(__x86_64__)
  (void)pid;
  (void)agent_path;
  (void)entry_name;
  (void)wait_ms;
  (void)strings;
  (void)out;
  return absl::UnimplementedError("attach by injection is implemented for x86-64 only");
#else
  std::optional<uint64_t> entry = FindSymbolInProcess(pid, agent_path, entry_name);
  if (!entry) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the agent loaded in pid %d (%s) has no %s: it is an older build; PyTorch's state cannot "
        "be imported",
        pid, agent_path, entry_name));
  }
  StoppedProcess borrowed(pid);
  absl::StatusOr<pid_t> tid = BorrowWaitingThread(pid, borrowed);
  if (!tid.ok()) return tid.status();
  // The agent bounds its own wait (wait_ms for the GIL, then the work itself); this bound
  // only guards against a thread that never comes back.
  const int timeout_s = static_cast<int>(wait_ms / 1000) + 60;
  std::vector<uint64_t> args = {wait_ms};
  for (size_t i = 0; i < strings.size(); ++i) args.push_back(kStringArg + i);
  absl::StatusOr<uint64_t> answer_at = CallInTarget(pid, *tid, *entry, args, strings, timeout_s);
  if (!answer_at.ok()) return answer_at.status();
  if (*answer_at == 0 || !PeekBytes(pid, *tid, *answer_at, out, sizeof(*out))) {
    return absl::InternalError(
        absl::StrFormat("cannot read the agent's PyTorch answer in pid %d", pid));
  }
  borrowed.Release();
  if (out->magic != kFragscopeTorchMagic || out->abi != kFragscopeTorchAbi) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the agent loaded in pid %d is another version than this fragscope (%s)", pid, agent_path));
  }
  out->message[sizeof(out->message) - 1] = '\0';
  if (out->device_count > kFragscopeTorchMaxDevices) out->device_count = kFragscopeTorchMaxDevices;
  return absl::OkStatus();
#endif
}

}  // namespace

absl::Status ImportTorchState(pid_t pid, const std::string& agent_path, uint32_t wait_ms,
                              const std::string& adapter_dir, FragscopeTorchImport* out) {
  return CallTorchEntry(pid, agent_path, kFragscopeTorchImportEntry, wait_ms, {adapter_dir}, out);
}

}  // namespace fragscope::injector
