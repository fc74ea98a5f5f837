// The include boundaries between the parts of the source tree, checked by reading every source
// file's #include lines (tests are not checked: they may look inside what they test).
//
// Parts, and what each may include of ours:
//   agent       interpose/src, interpose/cupti: itself, the agent's public headers, the wire
//               constants (fragscope/wire_constants.h, proto/include). Never the collector, the
//               command line, the injector, or the libprotobuf code generated from the proto
//               (fragscope.pb.h: no protobuf runtime in the agent).
//   agent-api   interpose/include (annotate.h, attach_contract.h): only itself.
//   injector    interpose/injector: itself and the attach contract.
//   collector   collector/: itself and the proto's generated code. Never the agent's private
//               headers, the command line or the injector.
//   proto       proto/: only the code generated from itself.
//   cli         viewer-cli/: itself and public headers only: the collector's
//               (collector/*/include), the attach contract, the injector's, the proto's
//               generated code.
//
// An include is resolved as the compiler would: next to the including file, then in the
// including part's own folders, then in every other part's (its public folders first). What
// resolves to no file of ours (the standard library, absl, CUDA) is not checked; the names the
// build generates (fragscope.pb.h, fragscope/wire_constants.h) count as the proto's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kSource = FRAGSCOPE_SOURCE_DIR;

// Where a header lies, as far as the rules care.
enum class Place {
  kAgent,         // interpose/src, interpose/cupti
  kAgentApi,      // interpose/include/fragscope/annotate.h
  kContract,      // interpose/include/fragscope/attach_contract.h
  kCollector,     // collector/, outside its include/ folders
  kCollectorApi,  // collector/*/include
  kProto,         // proto/, and the libprotobuf code the build generates from it
  kWire,          // fragscope/wire_constants.h, generated from the proto, and proto/include:
                  // no protobuf in them
  kCli,           // viewer-cli/
  kInjector,      // interpose/injector, outside include/
  kInjectorApi,   // interpose/injector/include
};

const char* Name(Place p) {
  switch (p) {
    case Place::kAgent:
      return "the agent's private headers";
    case Place::kAgentApi:
      return "the agent's annotate API";
    case Place::kContract:
      return "the attach contract";
    case Place::kCollector:
      return "the collector's private headers";
    case Place::kCollectorApi:
      return "the collector's public headers";
    case Place::kProto:
      return "the proto's libprotobuf code";
    case Place::kWire:
      return "the wire constants";
    case Place::kCli:
      return "the command line";
    case Place::kInjector:
      return "the injector's private headers";
    case Place::kInjectorApi:
      return "the injector's public header";
  }
  return "?";
}

// What the build generates, named by the include that reaches it.
const std::string kGeneratedPb = "<generated>/fragscope.pb.h";
const std::string kGeneratedWire = "<generated>/fragscope/wire_constants.h";

bool Under(const std::string& rel, const std::string& dir) { return rel.rfind(dir, 0) == 0; }

// The place of a file of ours, by its path relative to the source root; nullopt: not in a part.
std::optional<Place> PlaceOf(const std::string& rel) {
  if (rel == kGeneratedPb) return Place::kProto;
  if (rel == kGeneratedWire) return Place::kWire;
  if (Under(rel, "interpose/src/") || Under(rel, "interpose/cupti/")) return Place::kAgent;
  if (rel == "interpose/include/fragscope/attach_contract.h") return Place::kContract;
  if (Under(rel, "interpose/include/")) return Place::kAgentApi;
  if (Under(rel, "interpose/injector/include/")) return Place::kInjectorApi;
  if (Under(rel, "interpose/injector/")) return Place::kInjector;
  if (Under(rel, "collector/")) {
    return rel.find("/include/") != std::string::npos ? Place::kCollectorApi : Place::kCollector;
  }
  if (Under(rel, "proto/include/")) return Place::kWire;
  if (Under(rel, "proto/")) return Place::kProto;
  if (Under(rel, "viewer-cli/")) return Place::kCli;
  return std::nullopt;
}

// A part whose files are checked: its folders, where its own includes are looked up first, and
// the places it may include.
struct Part {
  std::string name;
  std::vector<std::string> dirs;  // relative to the source root, each ending in '/'
  std::set<Place> allowed;
};

const std::vector<Part>& Parts() {
  static const std::vector<Part> parts = {
      {"agent",
       {"interpose/src/", "interpose/cupti/"},
       {Place::kAgent, Place::kAgentApi, Place::kContract, Place::kWire}},
      {"agent-api", {"interpose/include/"}, {Place::kAgentApi, Place::kContract}},
      {"injector",
       {"interpose/injector/"},
       {Place::kInjector, Place::kInjectorApi, Place::kContract}},
      {"collector",
       {"collector/"},
       {Place::kCollector, Place::kCollectorApi, Place::kProto, Place::kWire}},
      {"proto", {"proto/"}, {Place::kProto, Place::kWire}},
      {"cli",
       {"viewer-cli/"},
       {Place::kCli, Place::kCollectorApi, Place::kContract, Place::kInjectorApi, Place::kProto,
        Place::kWire}},
  };
  return parts;
}

// Every folder an include may be looked up in (the include paths CMake gives the parts).
std::vector<std::string> IncludeRoots() {
  std::vector<std::string> roots = {"interpose/include/",  "interpose/injector/include/",
                                    "interpose/src/",      "interpose/cupti/",
                                    "interpose/injector/", "viewer-cli/",
                                    "proto/include/",      "proto/"};
  for (const auto& entry : fs::directory_iterator(kSource / "collector")) {
    if (!entry.is_directory()) continue;
    const std::string lib = "collector/" + entry.path().filename().string() + "/";
    if (fs::is_directory(kSource / lib / "include")) roots.push_back(lib + "include/");
    roots.push_back(lib);
  }
  return roots;
}

struct Include {
  int line;
  std::string text;  // as written, with its quotes or brackets
  std::string name;
  bool quoted;
};

std::vector<Include> IncludesOf(const fs::path& file) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  std::vector<Include> out;
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::smatch m;
    if (std::regex_search(line, m, kInclude)) {
      out.push_back({n, m[0].str().substr(m[0].str().find('#')), m[2].str(), m[1].str() == "\""});
    }
  }
  return out;
}

bool IsSource(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".cc" || ext == ".h" || ext == ".inc" || ext == ".c" || ext == ".cpp";
}

std::string Relative(const fs::path& p) { return fs::relative(p, kSource).generic_string(); }

// Where `inc` in `file` (relative path) of `part` resolves: the file's relative path, or "" for
// none of ours. Generated names count as the proto's.
std::string Resolve(const std::string& file, const Part& part, const Include& inc,
                    const std::vector<std::string>& roots) {
  if (inc.name == "fragscope.pb.h") return kGeneratedPb;
  if (inc.name == "fragscope/wire_constants.h") return kGeneratedWire;
  std::vector<std::string> order;
  if (inc.quoted) order.push_back(fs::path(file).parent_path().generic_string() + "/");
  for (const std::string& dir : part.dirs) order.push_back(dir);
  // Public folders before private ones, as each part's own include path has them.
  for (const std::string& root : roots) {
    if (root.find("include/") != std::string::npos) order.push_back(root);
  }
  for (const std::string& root : roots) {
    if (root.find("include/") == std::string::npos) order.push_back(root);
  }
  for (const std::string& dir : order) {
    const fs::path candidate = kSource / dir / inc.name;
    if (fs::is_regular_file(candidate)) return Relative(fs::weakly_canonical(candidate));
  }
  return "";
}

struct Scan {
  std::map<std::string, int> files_per_part;
  std::map<std::string, int> resolved_per_part;
  std::vector<std::string> violations;
};

Scan ScanTree() {
  Scan scan;
  const std::vector<std::string> roots = IncludeRoots();
  for (const Part& part : Parts()) {
    for (const std::string& dir : part.dirs) {
      if (!fs::is_directory(kSource / dir)) continue;
      for (const auto& entry : fs::recursive_directory_iterator(kSource / dir)) {
        if (!entry.is_regular_file() || !IsSource(entry.path())) continue;
        const std::string file = Relative(entry.path());
        ++scan.files_per_part[part.name];
        for (const Include& inc : IncludesOf(entry.path())) {
          const std::string target = Resolve(file, part, inc, roots);
          if (target.empty()) continue;
          ++scan.resolved_per_part[part.name];
          const std::optional<Place> place = PlaceOf(target);
          if (!place || part.allowed.count(*place) > 0) continue;
          std::ostringstream why;
          why << file << ":" << inc.line << ": " << inc.text << " reaches " << target << " ("
              << Name(*place) << "), which " << part.name << " code may not include";
          scan.violations.push_back(why.str());
        }
      }
    }
  }
  return scan;
}

TEST(IncludeBoundary, NoPartIncludesAnotherPartsPrivateHeaders) {
  const Scan scan = ScanTree();
  for (const std::string& v : scan.violations) ADD_FAILURE() << v;
}

// The scan above passes trivially if it reads nothing: it must have found each part's files and
// resolved includes of ours in them (the agent's public headers include nothing of ours).
TEST(IncludeBoundary, TheScanSeesEveryPart) {
  const Scan scan = ScanTree();
  for (const Part& part : Parts()) {
    if (part.name == "injector" && !fs::is_directory(kSource / "interpose/injector")) continue;
    const auto files = scan.files_per_part.find(part.name);
    EXPECT_TRUE(files != scan.files_per_part.end() && files->second > 0) << part.name;
    if (part.name == "agent-api") continue;
    const auto resolved = scan.resolved_per_part.find(part.name);
    EXPECT_TRUE(resolved != scan.resolved_per_part.end() && resolved->second > 0) << part.name;
  }
}

}  // namespace
