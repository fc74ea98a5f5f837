#include "traced_process.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "fragscope/trace/frame_reader.h"

extern char** environ;

namespace fragscope::agent_test {

std::string AgentLibrary() { return FRAGSCOPE_TEST_AGENT_LIB; }
std::string AppPath(const std::string& name) {
  return std::string(FRAGSCOPE_TEST_APP_DIR) + "/" + name;
}
std::string FakeCudaLibDir() { return FRAGSCOPE_TEST_FAKECUDA_LIB_DIR; }
std::string NvidiaRuntimeDir() { return FRAGSCOPE_TEST_NVIDIA_RUNTIME_DIR; }
const char* RuntimeName(Runtime runtime) {
  return runtime == Runtime::kNvidia ? "NvidiaRuntime" : "FakeRuntime";
}

namespace {
Runtime default_runtime = Runtime::kFake;
}  // namespace

Runtime DefaultRuntime() { return default_runtime; }

void RuntimeTest::SetUp() {
  if (GetParam() == Runtime::kNvidia && NvidiaRuntimeDir().empty()) {
    GTEST_SKIP() << "the CUDA toolkit has no libcudart.so.13 (NVIDIA's runtime)";
  }
  default_runtime = GetParam();
}

void RuntimeTest::TearDown() { default_runtime = Runtime::kFake; }

::testing::internal::ParamGenerator<Runtime> BothRuntimes() {
  return ::testing::Values(Runtime::kFake, Runtime::kNvidia);
}

std::string RuntimeParamName(const ::testing::TestParamInfo<Runtime>& info) {
  return RuntimeName(info.param);
}

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base ? base : "/tmp") + "/fsagent.XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  nftw(
      path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return remove(p); },
      16, FTW_DEPTH | FTW_PHYS);
}

std::vector<std::string> TempDir::List() const {
  std::vector<std::string> names;
  if (DIR* d = opendir(path_.c_str())) {
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

bool Inherited(const char* entry) {
  return strncmp(entry, "FRAGSCOPE_", 10) != 0 && strncmp(entry, "FAKECUDA_", 9) != 0 &&
         strncmp(entry, "LD_PRELOAD=", 11) != 0 && strncmp(entry, "LD_LIBRARY_PATH=", 16) != 0 &&
         strncmp(entry, "CUDA_VISIBLE_DEVICES=", 21) != 0;
}

}  // namespace

ChildCommand::ChildCommand(const std::string& program, const std::vector<std::string>& args,
                           const RunOptions& options) {
  for (char** e = environ; *e != nullptr; ++e) {
    if (Inherited(*e)) env_.push_back(*e);
  }
  std::string library_dir = options.library_dir;
  if (library_dir.empty()) {
    library_dir = options.runtime == Runtime::kNvidia ? NvidiaRuntimeDir() : FakeCudaLibDir();
  }
  env_.push_back("LD_LIBRARY_PATH=" + library_dir);
  if (options.preload) env_.push_back("LD_PRELOAD=" + AgentLibrary());
  for (const auto& [name, value] : options.env) env_.push_back(name + "=" + value);
  argv_.push_back(program);
  argv_.insert(argv_.end(), args.begin(), args.end());
  for (std::string& e : env_) env_ptrs_.push_back(e.data());
  env_ptrs_.push_back(nullptr);
  for (std::string& a : argv_) argv_ptrs_.push_back(a.data());
  argv_ptrs_.push_back(nullptr);
}

RunResult RunProgram(const std::string& program, const std::vector<std::string>& args,
                     const RunOptions& options) {
  RunResult result;
  TempDir io;
  ChildCommand command(program, args, options);
  const std::string out_path = io.File("stdout");
  const std::string err_path = io.File("stderr");
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    execve(command.program(), command.argv(), command.envp());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

LiveProcess::LiveProcess(const std::string& program, const std::vector<std::string>& args,
                         const RunOptions& options) {
  ChildCommand command(program, args, options);
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) return;
  const std::string err_path = io_.File("stderr");
  pid_ = fork();
  if (pid_ == 0) {
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    dup2(err, 2);
    execve(command.program(), command.argv(), command.envp());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  in_ = to_child[1];
  out_fd_ = from_child[0];
}

LiveProcess::~LiveProcess() {
  if (pid_ > 0 && !finished_) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  if (in_ >= 0) close(in_);
  if (out_fd_ >= 0) close(out_fd_);
}

bool LiveProcess::WaitForLine(const std::string& line, int timeout_s) {
  const time_t deadline = time(nullptr) + timeout_s;
  for (;;) {
    size_t eol;
    while ((eol = out_.find('\n', scanned_)) != std::string::npos) {
      std::string got = out_.substr(scanned_, eol - scanned_);
      scanned_ = eol + 1;
      if (got == line) return true;
    }
    if (out_fd_ < 0 || time(nullptr) >= deadline) return false;
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char buffer[4096];
    ssize_t n = read(out_fd_, buffer, sizeof(buffer));
    if (n <= 0) {
      close(out_fd_);
      out_fd_ = -1;
      continue;
    }
    out_.append(buffer, static_cast<size_t>(n));
  }
}

void LiveProcess::Send(const std::string& line) {
  std::string text = line + "\n";
  if (in_ >= 0) {
    ssize_t ignored = write(in_, text.data(), text.size());
    (void)ignored;
  }
}

int LiveProcess::Finish() {
  if (finished_) return exit_code_;
  if (in_ >= 0) close(in_);
  in_ = -1;
  WaitForLine("\x01never", 120);  // reads stdout to its end
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  finished_ = true;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return exit_code_;
}

std::string LiveProcess::err() const { return ReadFile(io_.File("stderr")); }

const v1::Hello* Trace::hello() const {
  for (const v1::Frame& f : frames) {
    if (f.has_hello()) return &f.hello();
  }
  return nullptr;
}

const v1::End* Trace::end() const {
  for (const v1::Frame& f : frames) {
    if (f.has_end()) return &f.end();
  }
  return nullptr;
}

std::vector<const v1::Frame*> Trace::Events() const {
  std::vector<const v1::Frame*> events;
  for (const v1::Frame& f : frames) {
    if (f.has_alloc() || f.has_free() || f.has_map() || f.has_handle() || f.has_failed() ||
        f.has_block() || f.has_mark()) {
      events.push_back(&f);
    }
  }
  return events;
}

std::vector<const v1::Snapshot*> Trace::Snapshots() const {
  std::vector<const v1::Snapshot*> snapshots;
  for (const v1::Frame& f : frames) {
    if (f.has_snapshot()) snapshots.push_back(&f.snapshot());
  }
  return snapshots;
}

std::map<uint64_t, std::vector<uint64_t>> Trace::Stacks() const {
  std::map<uint64_t, std::vector<uint64_t>> stacks;
  for (const v1::Frame& f : frames) {
    if (!f.has_stacks()) continue;
    for (const v1::Stack& s : f.stacks().stacks()) {
      stacks[s.id()] = std::vector<uint64_t>(s.pcs().begin(), s.pcs().end());
    }
  }
  return stacks;
}

Trace ReadTrace(const std::string& path) {
  Trace trace;
  absl::StatusOr<FrameReader> reader = FrameReader::OpenFile(path);
  if (!reader.ok()) {
    trace.error = std::string(reader.status().message());
    return trace;
  }
  trace.opened = true;
  for (;;) {
    v1::Frame frame;
    FrameReader::Result r = reader->Next(&frame);
    if (r == FrameReader::Result::kFrame) {
      trace.frames.push_back(std::move(frame));
      continue;
    }
    trace.clean = r == FrameReader::Result::kEnd;
    if (!trace.clean) trace.error = reader->error();
    break;
  }
  return trace;
}

namespace {

std::string ApiName(int api) {
  std::string name = v1::Api_Name(static_cast<v1::Api>(api));
  return name.rfind("API_", 0) == 0 ? name.substr(4) : name;
}

std::string KindName(int kind) {
  std::string name = v1::MemoryKind_Name(static_cast<v1::MemoryKind>(kind));
  return name.rfind("MEMORY_KIND_", 0) == 0 ? name.substr(12) : name;
}

}  // namespace

std::string Describe(const v1::Frame& f) {
  std::ostringstream s;
  if (f.has_alloc()) {
    const v1::AllocEvent& e = f.alloc();
    s << "alloc " << ApiName(e.api()) << " size=" << e.size() << " kind=" << KindName(e.kind())
      << " dev=" << e.device();
    if (e.pitch() != 0) s << " pitch=" << e.pitch();
    if (e.result() != 0) s << " result=" << e.result();
    if (e.failed_release_result() != 0)
      s << " put_back release_result=" << e.failed_release_result();
  } else if (f.has_free()) {
    const v1::FreeEvent& e = f.free();
    s << "free " << ApiName(e.api()) << " size=" << e.size() << " dev=" << e.device();
    if (e.result() != 0) s << " result=" << e.result();
  } else if (f.has_map()) {
    const v1::MapEvent& e = f.map();
    s << "map " << ApiName(e.api()) << " " << v1::MapEvent::Op_Name(e.op()) << " size=" << e.size()
      << " dev=" << e.device();
    if (e.offset() != 0) s << " offset=" << e.offset();
    if (e.result() != 0) s << " result=" << e.result();
  } else if (f.has_handle()) {
    const v1::HandleEvent& e = f.handle();
    s << "handle " << ApiName(e.api()) << " " << v1::HandleEvent::Op_Name(e.op())
      << " size=" << e.size() << " dev=" << e.device();
    if (e.result() != 0) s << " result=" << e.result();
  } else if (f.has_failed()) {
    const v1::FailedAlloc& e = f.failed();
    s << "failed " << ApiName(e.api()) << " size=" << e.size() << " result=" << e.result()
      << " dev=" << e.device();
    if (e.from_sub_allocator()) s << " sub_allocator";
  } else if (f.has_block()) {
    const v1::BlockEvent& e = f.block();
    s << "block " << v1::BlockEvent::Op_Name(e.op()) << " size=" << e.size()
      << " dev=" << e.device() << " pool=" << e.pool();
  } else if (f.has_mark()) {
    s << "mark " << f.mark().label();
  } else {
    s << "other";
  }
  return s.str();
}

std::vector<std::string> DescribeEvents(const Trace& trace) {
  std::vector<std::string> lines;
  for (const v1::Frame* f : trace.Events()) lines.push_back(Describe(*f));
  return lines;
}

uint64_t SeqOf(const v1::Frame& f) {
  if (f.has_alloc()) return f.alloc().seq();
  if (f.has_free()) return f.free().seq();
  if (f.has_map()) return f.map().seq();
  if (f.has_handle()) return f.handle().seq();
  if (f.has_failed()) return f.failed().seq();
  if (f.has_block()) return f.block().seq();
  if (f.has_mark()) return f.mark().seq();
  return 0;
}

uint64_t StackOf(const v1::Frame& f) {
  if (f.has_alloc()) return f.alloc().stack_id();
  if (f.has_free()) return f.free().stack_id();
  if (f.has_map()) return f.map().stack_id();
  if (f.has_handle()) return f.handle().stack_id();
  if (f.has_failed()) return f.failed().stack_id();
  if (f.has_block()) return f.block().stack_id();
  return 0;
}

uint64_t AddressOf(const v1::Frame& f) {
  if (f.has_alloc()) return f.alloc().address();
  if (f.has_free()) return f.free().address();
  if (f.has_map()) return f.map().address();
  if (f.has_handle()) return f.handle().handle();
  if (f.has_block()) return f.block().address();
  return 0;
}

std::vector<std::vector<std::string>> Lines(const std::string& out) {
  std::vector<std::vector<std::string>> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<std::string> w;
    std::string word;
    while (words >> word) w.push_back(word);
    if (!w.empty()) lines.push_back(w);
  }
  return lines;
}

uint64_t ParseAddress(const std::string& text) {
  if (text == "(nil)") return 0;
  return std::stoull(text, nullptr, 0);  // "0x..." hex, else decimal
}

}  // namespace fragscope::agent_test
