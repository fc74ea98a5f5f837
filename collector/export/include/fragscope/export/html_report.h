// `fragscope report --format html`: one self-contained HTML page (inline CSS, JS and SVG; it
// loads nothing from the network) showing, per device, the segment map (every held segment as
// a bar, blocks and free ranges drawn to scale inside it, with the size and allocation site on
// hover), the timeline of reserved / allocated / cached bytes and fragmentation, the top
// allocation sites, then failed allocations and the OOM post-mortems.
//
// The segment map is static SVG written here; the timeline charts are drawn by the page's
// script from the data embedded in it (so they scale to the window). Once the script has run,
// the element #fragscope-status reads "rendered".
#ifndef FRAGSCOPE_EXPORT_HTML_REPORT_H_
#define FRAGSCOPE_EXPORT_HTML_REPORT_H_

#include <cstddef>
#include <ostream>

#include "fragscope/export/export_input.h"
#include "fragscope/report/symbolizer.h"

namespace fragscope::exporter {

struct HtmlReportOptions {
  std::size_t max_sites = 10;          // rows of each site table
  std::size_t max_failed_listed = 50;  // rows of the failed-allocation table
};

// Writes the page to `out`. Stateless apart from symbolizer caches; every string from the trace
// (paths, function names, labels) is escaped.
void RenderHtml(const ExportInput& input, Symbolizer& symbolizer, std::ostream& out,
                const HtmlReportOptions& options = {});

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_HTML_REPORT_H_
