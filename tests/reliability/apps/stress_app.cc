// A CUDA program that puts the agent under load and faults, for tests/reliability. Each
// scenario prints what it did ("events N": successful allocations + successful frees, the events
// the agent must account for), so the test can reconcile the trace against the program's own
// count instead of a constant.
//
//   stress_app load THREADS N KEEP   THREADS threads x N events, KEEP allocations left live each
//   stress_app phases DIR CODE       events (64 left live), touch DIR/phase1, wait for DIR/go,
//                                    events until DIR/stop, free/alloc some, exit CODE
//   stress_app signals THREADS N [KEEP]
//                                    N alloc/free pairs per thread while SIGUSR1 rains on them;
//                                    the handler itself allocates and frees (driver API). With
//                                    KEEP, each thread frees its allocations KEEP later (first in,
//                                    first out) and hands every 7th to the next thread to free
//   stress_app openmp LIBOMP N       dlopen LLVM's OpenMP runtime, N alloc/free pairs per
//                                    OpenMP thread inside GOMP_parallel
//   stress_app slowfree DIR N        a free held up inside the driver after it took effect
//                                    (the test sets FAKECUDA_FREE_WAIT=2:DIR/released): another
//                                    thread reallocates the address and makes N alloc/free pairs
//                                    before the free returns
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<uint64_t> g_events{0};
std::atomic<uint64_t> g_failures{0};

// One counted cudaMalloc; returns nullptr on failure.
void* Alloc(size_t size) {
  void* p = nullptr;
  if (cudaMalloc(&p, size) == cudaSuccess && p != nullptr) {
    g_events.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  g_failures.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

void Free(void* p) {
  if (p == nullptr) return;  // cudaFree(NULL) is not an event
  if (cudaFree(p) == cudaSuccess) {
    g_events.fetch_add(1, std::memory_order_relaxed);
  } else {
    g_failures.fetch_add(1, std::memory_order_relaxed);
  }
}

int Report(int status = 0) {
  std::printf("events %llu failures %llu\n", static_cast<unsigned long long>(g_events.load()),
              static_cast<unsigned long long>(g_failures.load()));
  return g_failures.load() == 0 ? status : 1;
}

// Exactly `n` events on this thread, with a window of `keep` allocations outstanding, which are
// left live at the end (so the final live set is not empty and must match the driver's).
void AllocFreeWindow(int thread, long n, int keep) {
  std::vector<void*> window;
  long done = 0;
  size_t next = 0;
  for (long i = 0; done < n; ++i) {
    // Varied sizes: small ones share the fake's 2 MiB pages, some take whole pages.
    size_t size = 512 * static_cast<size_t>(1 + (i + thread) % 13);
    if (i % 1024 == 0) size = (size_t{2} << 20) + 4096;
    if (static_cast<int>(window.size()) < keep) {
      window.push_back(Alloc(size));
      ++done;
      continue;
    }
    Free(window[next]);
    window[next] = nullptr;
    ++done;
    if (done == n) break;
    window[next] = Alloc(size);
    ++done;
    next = (next + 1) % window.size();
  }
}

int Load(int threads, long n, int keep) {
  void* warm = Alloc(256);  // the runtime's lazy init, outside the measured threads
  Free(warm);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(AllocFreeWindow, t, n, keep);
  for (std::thread& th : pool) th.join();
  return Report();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Waits (bounded, so a broken test cannot hang us) until DIR/name exists; false on time-out.
bool AwaitFile(const std::string& dir, const char* name) {
  for (int i = 0; !Exists(dir + "/" + name); ++i) {
    if (i > 30000) return false;
    usleep(1000);
  }
  return true;
}

// Phase 1 leaves kPhaseKeep allocations live; phase 2, after the test restarted the collector,
// runs alloc/free pairs until the test says stop (so the agent reconnects while the program
// runs), then frees every other allocation of phase 1 and makes kPhaseKeep / 2 new ones. The
// live set at exit thus holds memory from both sides of the restart.
constexpr int kPhaseKeep = 64;

int Phases(const std::string& dir, int code) {
  std::vector<void*> kept;
  for (int i = 0; i < 2000; ++i) Free(Alloc(4096));
  for (int i = 0; i < kPhaseKeep; ++i) kept.push_back(Alloc(4096 * static_cast<size_t>(1 + i)));
  std::FILE* f = std::fopen((dir + "/phase1").c_str(), "w");
  if (f == nullptr) return 98;
  std::fclose(f);
  if (!AwaitFile(dir, "go")) return 99;  // the test kills and restarts the collector now
  for (int i = 0; i < 20000; ++i) Free(Alloc(4096));
  // Until the test saw the resumed stream (at most ~30 s).
  for (int i = 0; !Exists(dir + "/stop"); ++i) {
    if (i > 30000) return 97;
    Free(Alloc(4096));
    usleep(1000);
  }
  for (int i = 0; i < kPhaseKeep; i += 2) Free(kept[static_cast<size_t>(i)]);
  for (int i = 0; i < kPhaseKeep / 2; ++i) Alloc(8192 * static_cast<size_t>(1 + i));
  std::printf("done\n");
  return Report(code);
}

// The driver's second successful free (FAKECUDA_FREE_WAIT=2:DIR/released) is thread A's free
// of `x`; it returns once DIR/released exists. Meanwhile this thread gets `x` again (first fit:
// once released, a request of its size gets it back) and makes n pairs, then lets A return.
int SlowFree(const std::string& dir, long n) {
  Free(Alloc(256));  // the first successful free
  constexpr size_t kSize = size_t{2} << 20;
  void* x = Alloc(kSize);
  if (x == nullptr) return 3;
  std::thread a([x] { Free(x); });
  // Until the driver has released x, a request of its size gets other memory: kept (a free here
  // could be the driver's second one) and freed at the end.
  std::vector<void*> others;
  void* again = nullptr;
  for (int i = 0; i < 30000 && again == nullptr; ++i) {
    void* p = Alloc(kSize);
    if (p == x) {
      again = p;
    } else {
      others.push_back(p);
      usleep(100);
    }
  }
  if (again == nullptr) return 4;
  for (long i = 0; i < n; ++i) Free(Alloc(4096 + 512 * static_cast<size_t>(i % 7)));
  std::FILE* f = std::fopen((dir + "/released").c_str(), "w");
  if (f == nullptr) return 98;
  std::fclose(f);
  a.join();
  for (void* p : others) Free(p);
  Free(again);
  std::printf("reused after %zu\n", others.size());
  return Report();
}

std::atomic<uint64_t> g_handled{0};

// The driver's allocation functions, looked up the way a program does (dlsym on libcuda, which
// the agent answers with its wrappers). The handler uses them rather than cudaMalloc because the
// fake runtime serializes every call on a mutex of its own: a handler calling it while the
// interrupted thread holds that mutex would deadlock in the fake, not in the agent. The null
// fake's driver allocation path takes no lock.
CUresult (*g_mem_alloc)(CUdeviceptr*, size_t) = nullptr;
CUresult (*g_mem_free)(CUdeviceptr) = nullptr;

void OnSignal(int) {
  int saved = errno;
  g_handled.fetch_add(1, std::memory_order_relaxed);
  // CUDA from a handler that may have interrupted a hook on this thread.
  CUdeviceptr p = 0;
  if (g_mem_alloc(&p, 256) == CUDA_SUCCESS && p != 0) {
    g_events.fetch_add(1, std::memory_order_relaxed);
    if (g_mem_free(p) == CUDA_SUCCESS) {
      g_events.fetch_add(1, std::memory_order_relaxed);
    } else {
      g_failures.fetch_add(1, std::memory_order_relaxed);
    }
  } else {
    g_failures.fetch_add(1, std::memory_order_relaxed);
  }
  errno = saved;
}

// Handoffs between the threads of Signals with KEEP: slot t holds what thread t-1 passed on.
struct Handoff {
  std::atomic<void*> pointer{nullptr};
};

int Signals(int threads, long n, long keep) {
  Free(Alloc(256));  // loads the driver and makes a context current
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (cuda == nullptr) return 3;
  g_mem_alloc = reinterpret_cast<decltype(g_mem_alloc)>(dlsym(cuda, "cuMemAlloc_v2"));
  g_mem_free = reinterpret_cast<decltype(g_mem_free)>(dlsym(cuda, "cuMemFree_v2"));
  if (g_mem_alloc == nullptr || g_mem_free == nullptr) return 3;
  const char* install = std::getenv("STRESS_SIGNAL_INSTALL");
  if (install != nullptr && std::strcmp(install, "sigset") == 0) {
    // X/Open sigset, which glibc implements on its internal sigaction (looked up by name: the
    // header marks it deprecated).
    using SigsetFn = sighandler_t (*)(int, sighandler_t);
    auto sigset_fn = reinterpret_cast<SigsetFn>(dlsym(RTLD_DEFAULT, "sigset"));
    if (sigset_fn == nullptr || sigset_fn(SIGUSR1, OnSignal) == SIG_ERR) return 5;
    struct sigaction seen {};
    if (sigaction(SIGUSR1, nullptr, &seen) != 0 || seen.sa_handler != OnSignal) return 4;
  } else {
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, nullptr);
    // The agent installs its dispatcher in front of the handler; the program must still see
    // its own handler and flags, through sigaction and through signal.
    struct sigaction seen {};
    if (sigaction(SIGUSR1, nullptr, &seen) != 0 || seen.sa_handler != OnSignal ||
        (seen.sa_flags & SA_SIGINFO) != 0 || (seen.sa_flags & SA_RESTART) == 0) {
      return 4;
    }
  }
  if (signal(SIGUSR2, OnSignal) != SIG_DFL || signal(SIGUSR2, SIG_DFL) != OnSignal) return 4;
  std::atomic<int> running{threads};
  std::vector<pthread_t> ids(threads);
  std::vector<std::thread> pool;
  std::atomic<int> started{0};
  std::vector<Handoff> handoffs(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ids[t] = pthread_self();
      started.fetch_add(1);
      std::vector<void*> window;
      for (long i = 0; i < n; ++i) {
        void* p = Alloc(512 + 512 * static_cast<size_t>(t));
        if (keep == 0) {
          Free(p);
          continue;
        }
        // Another thread's allocation, if one was passed on: freed here.
        Free(handoffs[t].pointer.exchange(nullptr));
        if (p != nullptr && i % 7 == 0) {
          Free(handoffs[(t + 1) % threads].pointer.exchange(p));
          continue;
        }
        window.push_back(p);
        if (static_cast<long>(window.size()) > keep) {
          Free(window.front());
          window.erase(window.begin());
        }
      }
      for (void* p : window) Free(p);
      running.fetch_sub(1);
      // Stay alive until the sender stops, so pthread_kill never targets a finished thread.
      while (running.load() >= 0) usleep(100);
    });
  }
  while (started.load() < threads) usleep(100);
  uint64_t sent = 0;
  for (int t = 0; running.load() > 0; t = (t + 1) % threads) {
    if (pthread_kill(ids[t], SIGUSR1) == 0) ++sent;
  }
  running.store(-1);
  for (std::thread& th : pool) th.join();
  for (Handoff& h : handoffs) Free(h.pointer.exchange(nullptr));
  std::printf("sent %llu handled %llu\n", static_cast<unsigned long long>(sent),
              static_cast<unsigned long long>(g_handled.load()));
  return Report();
}

struct OmpData {
  long n;
  int (*thread_num)();
  std::atomic<int> max_thread{0};
};

void OmpBody(void* arg) {
  auto* d = static_cast<OmpData*>(arg);
  int me = d->thread_num();
  int seen = d->max_thread.load();
  while (me > seen && !d->max_thread.compare_exchange_weak(seen, me)) {
  }
  for (long i = 0; i < d->n; ++i) Free(Alloc(1024 * static_cast<size_t>(me + 1)));
}

int OpenMp(const char* libomp, long n) {
  // The program's own RTLD_NEXT lookup must still mean "next after the program".
  Dl_info info{};
  void* next_getenv = dlsym(RTLD_NEXT, "getenv");
  if (next_getenv == nullptr || dladdr(next_getenv, &info) == 0) return 5;
  std::printf("rtld_next getenv %s\n", std::strrchr(info.dli_fname, '/') != nullptr
                                           ? std::strrchr(info.dli_fname, '/') + 1
                                           : info.dli_fname);
  void* h = dlopen(libomp, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::printf("dlopen: %s\n", dlerror());
    return 2;
  }
  auto parallel = reinterpret_cast<void (*)(void (*)(void*), void*, unsigned, unsigned)>(
      dlsym(h, "GOMP_parallel"));
  auto thread_num = reinterpret_cast<int (*)()>(dlsym(h, "omp_get_thread_num"));
  if (parallel == nullptr || thread_num == nullptr) return 3;
  Free(Alloc(256));
  OmpData data;
  data.n = n;
  data.thread_num = thread_num;
  parallel(OmpBody, &data, 4, 0);
  std::printf("omp threads %d\n", data.max_thread.load() + 1);
  return Report();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string scenario = argc > 1 ? argv[1] : "";
  auto arg = [&](int i, long fallback) { return argc > i ? std::atol(argv[i]) : fallback; };
  if (scenario == "load") {
    return Load(static_cast<int>(arg(2, 16)), arg(3, 1000), static_cast<int>(arg(4, 4)));
  }
  if (scenario == "phases" && argc > 3) return Phases(argv[2], std::atoi(argv[3]));
  if (scenario == "signals") {
    return Signals(static_cast<int>(arg(2, 4)), arg(3, 10000), arg(4, 0));
  }
  if (scenario == "openmp" && argc > 2) return OpenMp(argv[2], arg(3, 1000));
  if (scenario == "slowfree" && argc > 2) return SlowFree(argv[2], arg(3, 40000));
  std::fprintf(stderr, "usage: stress_app load|phases|signals|openmp|slowfree ...\n");
  return 2;
}
