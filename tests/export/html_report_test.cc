// The HTML report: what the page holds as written, and what a real browser renders after the
// page's script ran (headless Chromium; skipped, with the reason, when none is installed). A
// screenshot of the rendered page is kept next to the test binary as an artifact.
#include "fragscope/export/html_report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "fragscope/model/format_bytes.h"

#include "export_test_trace.h"

namespace fragscope::testing {
namespace {

namespace fs = std::filesystem;

std::string Render(const exporter::ExportInput& in) {
  ModuleOffsetSymbolizer symbolizer(in.summary.modules);
  std::ostringstream out;
  exporter::RenderHtml(in, symbolizer, out);
  return out.str();
}

int Count(std::string_view haystack, std::string_view needle) {
  int n = 0;
  for (std::size_t at = haystack.find(needle); at != std::string_view::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

std::string HtmlEscaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else {
      out += c;
    }
  }
  return out;
}

TEST(HtmlReportTest, PageHoldsEveryPartAndNothingFromTheNetwork) {
  exporter::ExportInput in = Capture(ExportTrace().frames());
  const std::string page = Render(in);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  // The GPU as nvidia-smi names it.
  EXPECT_NE(page.find("UUID <code>GPU-10101010-1010-1010-1010-101010101010</code>"),
            std::string::npos);
  // The devices' maps (the end of the trace) come before the post-mortems.
  const std::size_t ooms_at = page.find("<h2 id=\"ooms\">");
  ASSERT_NE(ooms_at, std::string::npos);
  const std::string_view devices = std::string_view(page).substr(0, ooms_at);
  const std::string_view oom = std::string_view(page).substr(ooms_at);
  EXPECT_EQ(Count(devices, "<section class=\"device\""), 2);
  EXPECT_EQ(Count(devices, "<g class=\"segment "), 4);  // A, B, C on device 0; D on device 1
  EXPECT_EQ(Count(devices, "<g class=\"segment coverage-annotated\""), 2);
  // 2 + 1 + 2 blocks, plus 4 free ranges, plus B's and D's whole-allocation bars.
  EXPECT_EQ(Count(devices, "<rect class=\"block "), 5);
  EXPECT_EQ(Count(devices, "<rect class=\"free\""), 4);
  EXPECT_EQ(Count(devices, "<rect class=\"exact\""), 2);
  // The post-mortem draws device 0 as it was at the failure: A, B and C.
  ASSERT_EQ(in.summary.ooms.size(), 1u);
  EXPECT_NE(
      oom.find(absl::StrFormat("aria-label=\"segment map of device 0 at the failure, seq %d\"",
                               in.summary.ooms[0].failure.seq)),
      std::string_view::npos);
  EXPECT_EQ(Count(oom, "<g class=\"segment "), 3);
  EXPECT_EQ(Count(oom, "<rect class=\"block "), 5);
  EXPECT_EQ(Count(oom, "<rect class=\"free\""), 4);
  EXPECT_EQ(Count(oom, "<rect class=\"exact\""), 1);
  // What was live at the peak as of the failure, as in the text report.
  ASSERT_FALSE(in.summary.ooms[0].sites_at_peak.empty());
  EXPECT_NE(oom.find(absl::StrFormat("<h4>Live at peak reserved (%s), by site</h4>",
                                     FormatBytes(in.summary.ooms[0].peak_reserved_bytes))),
            std::string_view::npos);
  // Its free ranges by size, as the text report lists them: A's 8 and 12 MiB, C's 16 and 48.
  EXPECT_NE(oom.find("<p class=\"free-ranges\">4, in 2 of 3 segments; by size:</p>"),
            std::string_view::npos);
  const std::size_t largest =
      oom.find("<td class=\"num\">48.00 MiB</td><td class=\"num\">&times; 1</td>");
  const std::size_t smallest =
      oom.find("<td class=\"num\">8.00 MiB</td><td class=\"num\">&times; 1</td>");
  ASSERT_NE(largest, std::string_view::npos);
  ASSERT_NE(smallest, std::string_view::npos);
  EXPECT_LT(largest, smallest) << "largest first";
  // Its blocks' sites are named, as on the device's map.
  EXPECT_NE(oom.find("site: attention (model.py:77)"), std::string_view::npos);
  // One hatch pattern for the page: ids are the page's.
  EXPECT_EQ(Count(page, "id=\"fs-hatch\""), 1);
  EXPECT_NE(page.find(HtmlEscaped(in.summary.ooms[0].headline)), std::string::npos);
  // Hover text names the block's size and allocation site.
  EXPECT_NE(page.find("block 0x10800000, 32.00 MiB, stream 0x7\nsite: attention (model.py:77)"),
            std::string::npos);
  // The page opens with the verdict: the OOM, its class and reason, linked to its post-mortem,
  // before any device's figures.
  const std::size_t verdict = page.find("<section class=\"verdict failed\" id=\"verdict\">");
  ASSERT_NE(verdict, std::string::npos);
  EXPECT_LT(verdict, page.find("<section class=\"device\""));
  EXPECT_NE(page.find(absl::StrFormat("<span class=\"oom-class\">%s</span> <a href=\"#oom-0\">",
                                      OomClassName(in.summary.ooms[0].oom_class))),
            std::string::npos);
  // The failure's map draws the request to the bars' scale; the devices' maps do not.
  EXPECT_EQ(Count(oom, "<g class=\"request\""), 1);
  EXPECT_EQ(Count(devices, "<g class=\"request\""), 0);
  EXPECT_NE(oom.find(absl::StrFormat("data-size=\"%d\"><text class=\"request\"",
                                     in.summary.ooms[0].figures.requested_bytes)),
            std::string_view::npos);
  // The script's status line is for the browser test, not for the reader.
  EXPECT_NE(page.find("<p hidden>Page state:"), std::string::npos);
  // Markup from the trace is text, never markup.
  EXPECT_EQ(page.find("<script>window.pwned"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;window.pwned=1&lt;/script&gt;"), std::string::npos);
  // Self-contained: no external resources. The only URL is the SVG namespace the script uses.
  EXPECT_EQ(page.find(" src="), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("@import"), std::string::npos);
  EXPECT_EQ(Count(page, "http"), Count(page, "http://www.w3.org/2000/svg"));
}

TEST(HtmlReportTest, SaysWhenSegmentLayoutsWereNotCaptured) {
  exporter::ExportInput in;
  in.summary = Capture(ExportTrace().frames()).summary;
  const std::string page = Render(in);
  const std::string devices = page.substr(0, page.find("<h2 id=\"ooms\">"));
  EXPECT_EQ(Count(devices, "<g class=\"segment "), 0);
  EXPECT_NE(devices.find("Segment layouts were not captured"), std::string::npos);
  // A post-mortem's map is the model's, in the summary: drawn all the same.
  EXPECT_NE(page.find("segment map of device 0 at the failure"), std::string::npos);
  // Without one, the post-mortem says why there is none.
  in.summary.ooms[0].segments_at_failure.reset();
  in.summary.ooms[0].map_missing = "let go: only the latest 8 OOMs keep their segment map";
  EXPECT_NE(Render(in).find("No map: let go: only the latest 8 OOMs keep their segment map."),
            std::string::npos);
  in.summary.ooms[0].map_missing.clear();
  EXPECT_NE(Render(in).find("Not captured for this trace."), std::string::npos);
}

TEST(HtmlReportTest, StatesTheSameCaveatsAsTheTextReport) {
  exporter::ExportInput in;
  in.summary = Capture(ExportTrace().frames()).summary;
  // A woken dormant agent (attached, history complete) misses nothing from before: no warning.
  in.summary.attached = true;
  in.summary.history_complete = true;
  std::string page = Render(in);
  EXPECT_EQ(page.find("started after the program"), std::string::npos);
  EXPECT_EQ(Count(page, "<p class=\"warn\">"), 0);
  // Each limit of the figures the text report notes is a warning on the page too.
  in.summary.history_complete = false;
  in.summary.release_stacks = false;
  in.summary.live_entries_not_held = 12;
  in.summary.not_held_since_seq = 4000;
  in.summary.unmatched_events = 5;
  in.summary.drops = 7;
  in.summary.approximate_intervals.push_back({100, 250, 7});
  in.summary.orphan_blocks.push_back({9, 0, 0x5000, kMiB, 0, 1});
  in.summary.orphan_blocks_total = 2;
  page = Render(in);
  EXPECT_NE(page.find("The agent started after the program; memory allocated before is "
                      "untracked."),
            std::string::npos);
  EXPECT_NE(page.find("FRAGSCOPE_FREE_STACKS=0"), std::string::npos);
  EXPECT_NE(page.find("The agent&#39;s live table was full (12 inserts refused)"),
            std::string::npos);
  EXPECT_NE(page.find("7 events lost after seq 100; approximate until the resync at seq 250."),
            std::string::npos);
  EXPECT_NE(page.find("5 events did not match the known state"), std::string::npos);
  EXPECT_NE(page.find("1 live blocks were annotated outside any known segment (2 seen)"),
            std::string::npos);
  EXPECT_EQ(Count(page, "<p class=\"warn\">"), 6);
  // A stream that begins mid-run: the note, and peaks said to be since its first snapshot;
  // blocks read at syncs only: the note.
  in.summary.history_from_seq = 4000;
  in.summary.block_syncs = 2;
  in.summary.last_block_sync_seq = 4100;
  page = Render(in);
  EXPECT_NE(page.find("The trace begins at seq 4000"), std::string::npos);
  EXPECT_NE(page.find("peak reserved since seq 4000"), std::string::npos);
  ASSERT_FALSE(in.summary.devices[0].sites_at_peak.empty());
  EXPECT_NE(page.find(" since seq 4000)</h3>"), std::string::npos) << "the sites' heading too";
  EXPECT_NE(page.find("at 2 sync(s) only"), std::string::npos);
  EXPECT_EQ(Count(page, "<p class=\"warn\">"), 8);
}

// --- In a real browser -----------------------------------------------------------------------

std::optional<std::string> FindChromium() {
  if (const char* env = std::getenv("FRAGSCOPE_CHROMIUM"); env != nullptr && *env != '\0') {
    return std::string(env);
  }
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    for (const char* name :
         {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
      const fs::path candidate = fs::path(dir) / name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return std::nullopt;
}

struct BrowserRun {
  int exit_code = -1;
  std::string stdout_text;
};

// Runs headless Chromium with `args` (paths in them must not hold a single quote), bounded by
// `timeout` so a hung browser fails the test instead of hanging it.
BrowserRun RunChromium(const std::string& chromium, const std::string& args) {
  const fs::path profile =
      fs::path(::testing::TempDir()) / ("fragscope-chromium-profile." + std::to_string(getpid()));
  fs::create_directories(profile);
  const std::string command = "timeout 120 '" + chromium +
                              "' --headless --no-sandbox --disable-gpu --no-first-run "
                              "--disable-extensions --user-data-dir='" +
                              profile.string() + "' " + args + " 2>/dev/null";
  BrowserRun run;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return run;
  std::array<char, 65536> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) run.stdout_text.append(buf.data(), n);
  const int status = pclose(p);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST(HtmlReportBrowserTest, ChromiumRendersSegmentMapTimelineAndOom) {
  std::optional<std::string> chromium = FindChromium();
  if (!chromium) {
    GTEST_SKIP() << "no Chromium found (chromium, chromium-browser, google-chrome on PATH, or "
                    "FRAGSCOPE_CHROMIUM): the page was not checked in a browser. Install the "
                    "Debian package `chromium` (scripts/setup does).";
  }
  // The trace with a mark just before its end, whose label would end a script element.
  std::vector<v1::Frame> frames = ExportTrace().frames();
  ASSERT_TRUE(frames.back().has_end());
  const uint64_t mark_seq = frames.back().end().seq();
  frames.back().mutable_end()->set_seq(mark_seq + 1);
  v1::Frame mark;
  mark.mutable_mark()->set_seq(mark_seq);
  mark.mutable_mark()->set_time_ns(5500000);  // inside the timeline, between two events
  mark.mutable_mark()->set_label("step 1 </script><script>window.pwned=2</script>");
  frames.insert(frames.end() - 1, mark);
  exporter::ExportInput in = Capture(frames);
  ASSERT_EQ(in.summary.marks.size(), 1u);
  const fs::path artifacts = FRAGSCOPE_EXPORT_ARTIFACT_DIR;
  const fs::path page = artifacts / "export_report.html";
  const fs::path shot = artifacts / "export_report.png";
  std::ofstream(page) << Render(in);
  fs::remove(shot);

  BrowserRun dom = RunChromium(*chromium, "--dump-dom 'file://" + page.string() + "'");
  ASSERT_EQ(dom.exit_code, 0) << "chromium failed";
  const std::string& html = dom.stdout_text;
  // The page's script ran to its end without an error.
  EXPECT_NE(html.find("\">rendered</span>"), std::string::npos) << html.substr(0, 2000);
  EXPECT_EQ(Count(html, "<section class=\"device\""), 2);
  // 4 on the devices' maps at the end, 3 on the post-mortem's map of device 0 at the failure.
  EXPECT_EQ(Count(html, "<g class=\"segment "), 7);
  EXPECT_EQ(Count(html, "at the failure, seq"), 1);
  EXPECT_NE(html.find(HtmlEscaped(in.summary.ooms[0].headline)), std::string::npos);
  // The script drew a chart per device: reserved, allocated and cached lines each.
  EXPECT_EQ(Count(html, "series-reserved"), 2);
  EXPECT_EQ(Count(html, "series-allocated"), 2);
  EXPECT_EQ(Count(html, "series-cached"), 2);
  EXPECT_GE(Count(html, "series-fragmentation"), 1);  // device 0 is over the floor
  // Time on the x axis (the trace has times): the ticks read as durations from the start.
  EXPECT_NE(html.find("class=\"x-tick\" text-anchor=\"start\">0<"), std::string::npos);
  EXPECT_GE(Count(html, " ms<") + Count(html, " s<") + Count(html, " \u00b5s<"), 2);
  // The OOM is marked where it happened, on its device's timeline only; the program's mark on
  // device 0's (device 1's one allocation spans no time to place it in), its label text, never
  // markup.
  EXPECT_EQ(Count(html, "<g class=\"oom-marker\">"), 1);
  EXPECT_EQ(Count(html, "<g class=\"mark-marker\">"), 1);
  EXPECT_NE(html.find("mark \"step 1 &lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(html.find("window.pwned=2</script>"), std::string::npos);
  // Zoom and the readout are wired (reset hidden until a zoom), and the axis can switch.
  EXPECT_EQ(Count(html, ">Reset zoom</button>"), 2);
  EXPECT_EQ(Count(html, "<button class=\"axis\""), 2);
  EXPECT_GE(Count(html, ">Show by event order</button>"), 1);  // a device with times
  EXPECT_EQ(Count(html, "class=\"readout muted\""), 2);
  // Nothing wider than the window: no sideways scrolling.
  EXPECT_NE(html.find("data-overflow=\"false\""), std::string::npos);
  // The hostile program name stayed text: no extra script element came out of it.
  EXPECT_EQ(html.find("<script>window.pwned"), std::string::npos);

  BrowserRun screenshot =
      RunChromium(*chromium, "--hide-scrollbars --window-size=1280,2400 --screenshot='" +
                                 shot.string() + "' 'file://" + page.string() + "'");
  ASSERT_EQ(screenshot.exit_code, 0);
  std::ifstream png(shot, std::ios::binary);
  ASSERT_TRUE(png) << "no screenshot at " << shot;
  std::string magic(8, '\0');
  png.read(magic.data(), 8);
  EXPECT_EQ(magic, "\x89PNG\r\n\x1a\n");
  EXPECT_GT(fs::file_size(shot), 10000u) << "a blank page compresses smaller than this";
  std::printf("screenshot kept at %s\n", shot.c_str());

  // A phone's width: headless Chromium lays out no narrower than about 500 px, so the page is
  // measured inside a 390 px frame. The frame's document is another origin, so what is checked
  // is the screenshot (kept for a look) and, at the narrowest window, the page's own check.
  BrowserRun narrow =
      RunChromium(*chromium, "--window-size=500,900 --dump-dom 'file://" + page.string() + "'");
  ASSERT_EQ(narrow.exit_code, 0);
  EXPECT_NE(narrow.stdout_text.find("data-overflow=\"false\""), std::string::npos)
      << "the page is wider than a 500 px window";
  const fs::path frame = artifacts / "export_report_390.html";
  const fs::path phone = artifacts / "export_report_390.png";
  std::ofstream(frame) << "<!DOCTYPE html><html><body style=\"margin:0\"><iframe src=\""
                       << page.filename().string()
                       << "\" style=\"width:390px;height:2400px;border:0\"></iframe></body></html>";
  fs::remove(phone);
  ASSERT_EQ(RunChromium(*chromium, "--hide-scrollbars --window-size=500,2400 --screenshot='" +
                                       phone.string() + "' 'file://" + frame.string() + "'")
                .exit_code,
            0);
  EXPECT_GT(fs::file_size(phone), 10000u);
  std::printf("390 px screenshot kept at %s\n", phone.c_str());
}

}  // namespace
}  // namespace fragscope::testing
