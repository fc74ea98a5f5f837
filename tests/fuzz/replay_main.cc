// A `main` for the fuzz targets in the normal (gcc) build: runs LLVMFuzzerTestOneInput once on
// every file named on the command line, recursing into folders. CTest runs it over the committed
// corpus, so every seed and every past crash is re-checked by every build, with or without clang.
// A crash is the test's failure; the file being run is printed first so the log names it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Optional in a target, as with libFuzzer.
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

bool ReadFile(const std::filesystem::path& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n  runs the fuzz target once per file\n",
                 argv[0]);
    return 2;
  }
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg, ec)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg, ec)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      if (ec) {
        std::fprintf(stderr, "%s: %s\n", argv[i], ec.message().c_str());
        return 2;
      }
    } else if (std::filesystem::is_regular_file(arg, ec)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: no such file or folder\n", argv[i]);
      return 2;
    }
  }
  // Sorted, so a log from one machine lines up with another's.
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    // An empty corpus means a wrong path in the test, not a pass.
    std::fprintf(stderr, "no input files under the given paths\n");
    return 2;
  }
  std::vector<uint8_t> bytes;
  for (const auto& file : files) {
    if (!ReadFile(file, &bytes)) {
      std::fprintf(stderr, "%s: cannot read\n", file.c_str());
      return 2;
    }
    std::fprintf(stderr, "running %s (%zu bytes)\n", file.c_str(), bytes.size());
    std::fflush(stderr);
    // A copy of exactly `size` bytes on the heap, so ASan sees reads past the end as libFuzzer
    // would.
    std::vector<uint8_t> exact(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(exact.empty() ? nullptr : exact.data(), exact.size());
  }
  std::fprintf(stderr, "%zu inputs ran\n", files.size());
  return 0;
}
