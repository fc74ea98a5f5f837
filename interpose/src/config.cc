#include "config.h"

#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attach/control.h"
#include "recording/agent_log.h"

namespace fragscope::agent {
namespace {

void Warn(const char* name, const char* value) {
  AgentLog("ignoring %s=%.64s (not a valid value)", name, value);
}

// Parses a non-negative decimal integer in [min, max]; false if absent or invalid.
bool ReadUint(const char* name, uint64_t min, uint64_t max, uint64_t* out) {
  const char* value = getenv(name);
  if (value == nullptr || *value == '\0') return false;
  char* end = nullptr;
  unsigned long long parsed = strtoull(value, &end, 10);
  if (*end != '\0' || value[0] == '-' || parsed < min || parsed > max) {
    Warn(name, value);
    return false;
  }
  *out = parsed;
  return true;
}

void ReadPath(const char* name, char* out, size_t capacity) {
  const char* value = getenv(name);
  if (value == nullptr) return;
  if (strlen(value) >= capacity) {
    Warn(name, value);
    return;
  }
  strcpy(out, value);
}

// The first of `names` that holds a decimal integer in [0, 2^24); -1 if none does. Launchers'
// variables, not ours: a value that is not a rank is passed over silently.
int32_t ReadLauncherNumber(const char* const* names) {
  for (const char* const* name = names; *name != nullptr; ++name) {
    const char* value = getenv(*name);
    if (value == nullptr || *value < '0' || *value > '9') continue;
    char* end = nullptr;
    const unsigned long parsed = strtoul(value, &end, 10);
    if (*end == '\0' && parsed < (1u << 24)) return static_cast<int32_t>(parsed);
  }
  return -1;
}

// On/off switches: 1, true, yes, on (any case) mean on; 0, false, no, off and empty mean off.
// Anything else is off and said once, since a switch read as off silently (FRAGSCOPE_DORMANT=true
// leaving no control socket, so no attach) is worse than a message.
bool ReadFlag(const char* name) {
  const char* value = getenv(name);
  if (value == nullptr) return false;
  static constexpr const char* kOn[] = {"1", "true", "yes", "on"};
  static constexpr const char* kOff[] = {"", "0", "false", "no", "off"};
  for (const char* on : kOn) {
    if (strcasecmp(value, on) == 0) return true;
  }
  for (const char* off : kOff) {
    if (strcasecmp(value, off) == 0) return false;
  }
  Warn(name, value);
  return false;
}

}  // namespace

uint64_t DefaultSnapshotEvery(size_t live_slots) {
  const uint64_t by_table = 4 * static_cast<uint64_t>(live_slots);
  return by_table > 100000 ? by_table : 100000;
}

void LoadConfig(Config* c) {
  *c = Config{};
  ReadPath("FRAGSCOPE_OUTPUT", c->output_path, sizeof(c->output_path));
  ReadPath("FRAGSCOPE_SOCKET", c->socket_path, sizeof(c->socket_path));
  uint64_t v;
  if (ReadUint("FRAGSCOPE_STACK_DEPTH", 0, 64, &v)) c->stack_depth = static_cast<int>(v);
  if (ReadUint("FRAGSCOPE_FREE_STACKS", 0, 1, &v)) c->release_stacks = v == 1;
  if (ReadUint("FRAGSCOPE_DORMANT_LOGS", 0, 1, &v)) c->dormant_logs = v == 1;
  if (ReadUint("FRAGSCOPE_RING_MB", 1, 4096, &v)) c->ring_bytes = static_cast<size_t>(v) << 20;
  c->follow_fork = ReadFlag("FRAGSCOPE_FOLLOW_FORK");
  c->dormant = ReadFlag("FRAGSCOPE_DORMANT");
  if (ReadUint("FRAGSCOPE_LIVE_SLOTS", 64, uint64_t{1} << 26, &v)) c->live_slots = v;
  c->snapshot_every = ReadUint("FRAGSCOPE_SNAPSHOT_EVERY", 0, ~uint64_t{0} >> 1, &v)
                          ? v
                          : DefaultSnapshotEvery(c->live_slots);
  if (ReadUint("FRAGSCOPE_STACK_SLOTS", 64, uint64_t{1} << 24, &v)) c->stack_slots = v;
  if (ReadUint("FRAGSCOPE_MEMINFO_MS", 0, 3'600'000, &v)) c->meminfo_interval_ns = v * 1'000'000;
  static constexpr const char* kRankVariables[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                                   "SLURM_PROCID", nullptr};
  static constexpr const char* kSizeVariables[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                                   "SLURM_NTASKS", nullptr};
  if (const char* image = getenv(kExecImageVariable)) {
    // "PID:K" from the image that exec'ed into this one; another process's (a child that
    // inherited the environment) is not ours.
    char* end = nullptr;
    const long pid = strtol(image, &end, 10);
    if (end != image && *end == ':' && pid == static_cast<long>(getpid())) {
      const char* k = end + 1;
      const unsigned long n = strtoul(k, &end, 10);
      if (end != k && *end == '\0' && n > 0 && n < 1'000'000) {
        c->exec_image = static_cast<uint32_t>(n);
      }
    }
  }
  c->rank = ReadLauncherNumber(kRankVariables);
  c->world_size = c->rank >= 0 ? ReadLauncherNumber(kSizeVariables) : -1;
  // Read now: the program may change its environment later, and getenv is not thread-safe.
  if (!ControlDirFor(getenv("XDG_RUNTIME_DIR"), geteuid(), c->control_dir,
                     sizeof(c->control_dir))) {
    c->control_dir[0] = '\0';
  }
}

bool ExpandPath(const char* pattern, int pid, char* out, size_t capacity) {
  char pid_text[16];
  int pid_len = snprintf(pid_text, sizeof(pid_text), "%d", pid);
  size_t o = 0;
  for (const char* p = pattern; *p != '\0'; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      if (o + static_cast<size_t>(pid_len) >= capacity) return false;
      memcpy(out + o, pid_text, static_cast<size_t>(pid_len));
      o += static_cast<size_t>(pid_len);
      ++p;
    } else {
      if (o + 1 >= capacity) return false;
      out[o++] = *p;
    }
  }
  out[o] = '\0';
  return true;
}

bool ExecImagePath(const char* pattern, const char* path, int pid, uint32_t image, char* out,
                   size_t capacity) {
  char suffix[48];
  if (strstr(pattern, "%p") != nullptr) {
    snprintf(suffix, sizeof(suffix), ".exec-%u", image);
  } else {
    snprintf(suffix, sizeof(suffix), ".%d.exec-%u", pid, image);
  }
  const size_t len = strlen(path);
  const size_t stem = len >= 4 && strcmp(path + len - 4, ".fst") == 0 ? len - 4 : len;
  const size_t suffix_len = strlen(suffix);
  if (len + suffix_len >= capacity) return false;
  memmove(out, path, stem);
  memcpy(out + stem, suffix, suffix_len);
  memcpy(out + stem + suffix_len, path + stem, len - stem + 1);
  return true;
}

}  // namespace fragscope::agent
