// The HTML report. Layout of the page, top to bottom: process header, one section per device
// (figures, segment map, timeline, top sites), failed allocations, OOM post-mortems.
#include "fragscope/export/html_report.h"
#include "fragscope/export/html_escape.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "fragscope.pb.h"
#include "fragscope/export/site_names.h"
#include "fragscope/model/format_bytes.h"
#include "fragscope/report/free_range_sizes.h"
#include "fragscope/report/job_summary.h"
#include "fragscope/report/json_writer.h"
#include "fragscope/report/report_caveats.h"
#include "fragscope/report/report_verdict.h"

namespace fragscope::exporter {
namespace {

// Geometry of the segment map, in SVG user units (the SVG scales to the page width).
constexpr double kMapWidth = 1000;
constexpr double kLabelWidth = 190;  // address and size of the segment, left of its bar
constexpr double kBarWidth = kMapWidth - kLabelWidth - 10;
constexpr double kRowHeight = 18;
constexpr double kBarHeight = 13;
// A segment's bar is as long as its size relative to the device's largest segment, but never
// shorter than this fraction, so a 2 MiB segment next to a 20 GiB one stays visible and
// hoverable. The label gives the true size; blocks inside a bar are always to scale.
constexpr double kMinBarFraction = 0.08;
// Slivers narrower than this are widened so they can still be seen and hovered.
constexpr double kMinRectWidth = 0.35;

constexpr char kStyle[] = R"css(
:root { --alloc: #3b6fd4; --pending: #e0a030; --free: #e7ebf0; --exact: #5c8a5c;
        --opaque: #8a8f98; --unmapped: #ffffff; --ink: #1d2330; --muted: #5d6677; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
       margin: 0 auto; max-width: 1200px; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px;
  border-bottom: 1px solid #d5dae2; padding-bottom: 4px; } h3 { font-size: 15px; margin: 18px 0 6px; }
.muted { color: var(--muted); } .warn { background: #fff4d6; border: 1px solid #e9c46a;
  padding: 6px 10px; border-radius: 4px; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 6px; }
.figure { background: #f4f6f9; border-radius: 4px; padding: 6px 8px; }
.figure .label { font-size: 12px; color: var(--muted); } .figure .value { font-weight: 600; }
.figure .note { font-size: 11px; color: var(--muted); }
table { border-collapse: collapse; margin: 4px 0; } td, th { padding: 2px 10px 2px 0;
  text-align: left; vertical-align: top; } th { font-size: 12px; color: var(--muted); }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code, .site { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
.site { overflow-wrap: anywhere; }  /* a C++ frame can be wider than the page */
svg { display: block; width: 100%; height: auto; }
.segment-map text { font: 10px ui-monospace, Menlo, Consolas, monospace; fill: var(--muted); }
.segment-map rect { stroke: #fff; stroke-width: 0.3; }
rect.allocated { fill: var(--alloc); } rect.pending { fill: var(--pending); }
rect.free { fill: var(--free); } rect.exact { fill: var(--exact); }
rect.opaque { fill: url(#fs-hatch); } rect.unmapped { fill: var(--unmapped); stroke: #c9ced6; }
.segment:hover rect { stroke: #000; }
.legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
.legend i { display: inline-block; width: 12px; height: 10px; margin-right: 4px; vertical-align: -1px; }
.timeline svg text { font: 10px system-ui, sans-serif; fill: var(--muted); }
.oom { border-left: 4px solid #c0392b; padding: 2px 0 8px 12px; margin: 14px 0; }
.oom-class { display: inline-block; font-size: 12px; padding: 1px 8px; border-radius: 10px;
  background: #c0392b; color: #fff; }
.verdict { border: 1px solid #d5dae2; border-radius: 6px; padding: 6px 14px 8px; margin: 12px 0; }
.verdict.failed { border-left: 5px solid #c0392b; } .verdict.clean { border-left: 5px solid #2e8b57; }
.verdict h2 { border: none; margin: 6px 0 4px; } .verdict ul { margin: 4px 0; padding-left: 18px; }
.verdict li { margin: 3px 0; }
.wrap { overflow-x: auto; }
.advice li, .explanation, .verdict li { overflow-wrap: anywhere; }
rect.request { fill: none; stroke: #c0392b; stroke-width: 1.6; stroke-dasharray: 5 3; }
text.request { fill: #c0392b; font-weight: 600; }
.timeline { position: relative; touch-action: pan-y; }
.timeline .readout { font-size: 12px; min-height: 1.4em; font-variant-numeric: tabular-nums; }
.timeline button { font-size: 12px; margin: 2px 0; }
.timeline .oom-marker line { stroke: #c0392b; stroke-width: 1.2; }
.timeline .mark-marker line { stroke: #7f8c8d; stroke-width: 1; stroke-dasharray: 2 2; }
@media (max-width: 600px) {
  body { padding: 8px 10px 32px; font-size: 13px; }
  h1 { font-size: 18px; } h2 { font-size: 16px; }
  .figures { grid-template-columns: repeat(2, minmax(0, 1fr)); }
  td, th { padding-right: 6px; }
  /* Rows of the wide tables become blocks: the figures on one line, the site below them. */
  table.failures tr:first-child, table.sites tr:first-child { display: none; }
  table.failures tr, table.sites tr { display: block; border-bottom: 1px solid #e3e7ed;
    padding: 4px 0; }
  table.failures td, table.sites td { display: inline-block; padding: 0 8px 0 0; }
  table.failures td.site, table.sites td.site { display: block; }
  table.failures td[data-label]::before { content: attr(data-label) " "; color: var(--muted); }
  /* The map's labels stay legible: it scrolls sideways instead of shrinking. */
  svg.segment-map { min-width: 640px; }
}
)css";

// Draws every .timeline element's chart from the embedded data, with time on the x axis (seq
// where the trace has no times), OOMs and marks on it, drag to zoom (double-click or the button
// resets) and a readout of the figures under the pointer. Plain DOM APIs only.
constexpr char kScript[] = R"js(
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('fragscope-data').textContent);
  const NS = 'http://www.w3.org/2000/svg';
  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(name, cls, parent) {
    const e = document.createElement(name);
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  }
  function bytes(b) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toFixed(2)) + ' ' + units[i];
  }
  function duration(ns) {
    const a = Math.abs(ns);
    if (a < 1e6) return (ns / 1e3).toFixed(a < 1e4 ? 1 : 0) + ' \u00b5s';
    if (a < 1e9) return (ns / 1e6).toFixed(a < 1e7 ? 2 : 1) + ' ms';
    if (a < 120e9) return (ns / 1e9).toFixed(a < 1e10 ? 2 : 1) + ' s';
    return (ns / 60e9).toFixed(1) + ' min';
  }
  const series = [
    {key: 'reserved', index: 2, color: '#c0392b', label: 'reserved'},
    {key: 'allocated', index: 3, color: '#3b6fd4', label: 'allocated'},
    {key: 'cached', index: 4, color: '#8e9aaf', label: 'cached'},
  ];
  for (const holder of document.querySelectorAll('.timeline')) {
    const device = data.devices[holder.dataset.device];
    const points = device ? device.timeline : [];
    if (points.length === 0) {
      holder.textContent = 'No timeline points were recorded for this device.';
      continue;
    }
    const ooms = device.ooms || [], marks = data.marks || [];
    // Time since the first timed point where the trace has times (the start point before any
    // event has none: it sits at 0); the event order (seq) otherwise.
    // A run whose events bunch up in time reads better by event order: a button switches.
    const firstTimed = points.find(p => p[1] > 0);
    const t0 = firstTimed ? firstTimed[1] : 0;
    const hasTime = firstTimed !== undefined && points[points.length - 1][1] > t0;
    let timed = hasTime;
    const at = (seq, t) => timed ? Math.max(0, t - t0) : seq;
    const pos = p => at(p[0], p[1]);
    const label = v => timed ? (v > 0 ? '+' + duration(v) : '0') : 'seq ' + Math.round(v);
    // The chart is drawn at the holder's own width, so its text stays legible on a phone.
    const W = Math.max(320, Math.round(holder.getBoundingClientRect().width) || 1000);
    const H = Math.round(Math.min(280, Math.max(200, W * 0.3)));
    const L = W < 600 ? 58 : 70, R = W < 600 ? 36 : 50, T = 14, B = 24;
    const svg = el('svg', {viewBox: `0 0 ${W} ${H}`, class: 'timeline-chart'}, holder);
    const controls = html('div', 'controls', holder);
    const axis = html('button', 'axis', controls);
    axis.type = 'button';
    axis.hidden = !hasTime;
    const reset = html('button', '', controls);
    reset.type = 'button';
    reset.textContent = 'Reset zoom';
    reset.hidden = true;
    const readout = html('div', 'readout muted', holder);
    readout.textContent = 'Drag across the chart to zoom; hover for the figures.';
    let maxBytes = 1;
    for (const p of points) maxBytes = Math.max(maxBytes, p[2], p[3], p[4]);
    let full = [pos(points[0]), pos(points[points.length - 1])];
    let lo = full[0], hi = full[1];
    const x = v => L + (hi === lo ? 0.5 : (v - lo) / (hi - lo)) * (W - L - R);
    const valueAt = px => lo + (px - L) / (W - L - R) * (hi - lo);
    const y = b => T + (1 - b / maxBytes) * (H - T - B);
    const yf = f => T + (1 - f) * (H - T - B);
    // The last point at or before v (binary search: points are in order).
    function indexAt(v) {
      let a = 0, b = points.length - 1;
      if (pos(points[0]) > v) return 0;
      while (a < b) {
        const m = (a + b + 1) >> 1;
        if (pos(points[m]) <= v) a = m; else b = m - 1;
      }
      return a;
    }
    let cursor = null, selection = null;
    function draw() {
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      el('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: '#fafbfc',
                  stroke: '#d5dae2'}, svg);
      for (let i = 0; i <= 4; i++) {
        const v = maxBytes * i / 4;
        el('text', {x: L - 6, y: y(v) + 3, 'text-anchor': 'end'}, svg).textContent = bytes(v);
        el('text', {x: W - R + 6, y: yf(i / 4) + 3}, svg).textContent = (i * 25) + ' %';
      }
      const ticks = W < 600 ? 2 : 4;  // fewer time labels where they would touch
      for (let i = 0; i <= ticks; i++) {
        const tv = lo + (hi - lo) * i / ticks;
        el('text', {x: x(tv), y: H - 6, class: 'x-tick',
                    'text-anchor': i === 0 ? 'start' : i === ticks ? 'end' : 'middle'},
           svg).textContent = label(tv);
      }
      // The points inside the window, with the one before it so each line starts at the edge.
      const first = indexAt(lo), last = Math.max(first, indexAt(hi));
      const shown = points.slice(first, last + 1);
      const xc = p => Math.max(L, x(pos(p)));
      // Memory changes at events and stays put in between: draw steps, not slopes.
      const steps = (ps, yOf) => ps.map((p, i) => (i ? 'H' + xc(p).toFixed(1) + ' V' : 'M' +
          xc(p).toFixed(1) + ' ') + yOf(p).toFixed(1)).join(' ') +
          (ps.length ? ' H' + (W - R).toFixed(1) : '');
      for (const s of series) {
        const path = el('path', {d: steps(shown, p => y(p[s.index])), fill: 'none',
                                 stroke: s.color, 'stroke-width': 1.6,
                                 class: 'timeline-line series-' + s.key}, svg);
        el('title', {}, path).textContent = s.label;
      }
      // Fragmentation is only defined at some points: draw each defined run on its own.
      let run = [];
      const runs = [];
      for (const p of shown) {
        if (p[5] === null) { if (run.length) runs.push(run); run = []; } else run.push(p);
      }
      if (run.length) runs.push(run);
      for (const r of runs) {
        const d = r.map((p, i) => (i ? 'H' + xc(p).toFixed(1) + ' V' : 'M' + xc(p).toFixed(1) +
            ' ') + yf(p[5]).toFixed(1)).join(' ');
        const path = el('path', {d: d, fill: 'none', stroke: '#8e44ad', 'stroke-width': 1.6,
                                 'stroke-dasharray': '4 2',
                                 class: 'timeline-line series-fragmentation'}, svg);
        el('title', {}, path).textContent = 'fragmentation (right axis)';
      }
      const markers = (list, cls, text) => {
        for (const m of list) {
          const v = at(m[0], m[1]);
          if (v < lo || v > hi) continue;
          const g = el('g', {class: cls}, svg);
          el('line', {x1: x(v), x2: x(v), y1: T, y2: H - B}, g);
          el('title', {}, g).textContent = text(m);
        }
      };
      markers(marks, 'mark-marker', m => `mark "${m[2]}" (seq ${m[0]})`);
      markers(ooms, 'oom-marker', m => `OOM at seq ${m[0]}: ${bytes(m[2])} requested (${m[3]})`);
      for (const m of ooms) {
        const v = at(m[0], m[1]);
        if (v < lo || v > hi) continue;
        el('text', {x: x(v) + 2, y: T - 3, class: 'oom-label', fill: '#c0392b'}, svg).textContent = 'OOM';
      }
      cursor = el('line', {y1: T, y2: H - B, stroke: '#1d2330', 'stroke-width': 0.8,
                           visibility: 'hidden', class: 'cursor'}, svg);
      selection = el('rect', {y: T, height: H - T - B, fill: '#3b6fd4', 'fill-opacity': 0.12,
                              visibility: 'hidden', class: 'selection'}, svg);
      reset.hidden = lo === full[0] && hi === full[1];
      axis.textContent = timed ? 'Show by event order' : 'Show by time';
    }
    draw();
    const svgX = ev => {
      const r = svg.getBoundingClientRect();
      return (ev.clientX - r.left) * W / r.width;
    };
    const clamp = px => Math.min(W - R, Math.max(L, px));
    let dragFrom = null;
    svg.addEventListener('pointerdown', ev => {
      dragFrom = clamp(svgX(ev));
      svg.setPointerCapture(ev.pointerId);
    });
    svg.addEventListener('pointermove', ev => {
      const px = clamp(svgX(ev));
      if (dragFrom !== null) {
        selection.setAttribute('x', Math.min(dragFrom, px));
        selection.setAttribute('width', Math.abs(px - dragFrom));
        selection.setAttribute('visibility', 'visible');
      }
      const p = points[indexAt(valueAt(px))];
      cursor.setAttribute('x1', px);
      cursor.setAttribute('x2', px);
      cursor.setAttribute('visibility', 'visible');
      // The last mark before the pointer says where in the program this is ("step 12").
      let mark = null;
      for (const m of marks) {
        if (at(m[0], m[1]) > valueAt(px)) break;
        mark = m;
      }
      readout.textContent = `${label(valueAt(px))} (seq ${p[0]}` +
          (mark ? `, after mark "${mark[2]}"` : '') + `): reserved ${bytes(p[2])}, ` +
          `allocated ${bytes(p[3])}, cached ${bytes(p[4])}, fragmentation ` +
          (p[5] === null ? 'n/a' : (p[5] * 100).toFixed(1) + ' %');
    });
    svg.addEventListener('pointerup', ev => {
      const px = clamp(svgX(ev));
      if (dragFrom !== null && Math.abs(px - dragFrom) > 6) {
        const a = valueAt(Math.min(dragFrom, px)), b = valueAt(Math.max(dragFrom, px));
        lo = a; hi = b;
        draw();
      } else if (selection) {
        selection.setAttribute('visibility', 'hidden');
      }
      dragFrom = null;
    });
    svg.addEventListener('pointerleave', () => {
      if (cursor) cursor.setAttribute('visibility', 'hidden');
    });
    const unzoom = () => { lo = full[0]; hi = full[1]; draw(); };
    svg.addEventListener('dblclick', unzoom);
    reset.addEventListener('click', unzoom);
    axis.addEventListener('click', () => {
      timed = !timed;
      full = [pos(points[0]), pos(points[points.length - 1])];
      unzoom();
    });
    const legend = html('div', 'legend', holder);
    const keys = series.concat([{color: '#8e44ad', label: 'fragmentation (right axis, dashed)'},
                                {color: '#c0392b', label: 'OOM'}]);
    if (marks.length) keys.push({color: '#7f8c8d', label: 'mark'});
    for (const s of keys) {
      const span = html('span', '', legend);
      const sw = html('i', '', span);
      sw.style.background = s.color;
      span.appendChild(document.createTextNode(s.label));
    }
    const last = points[points.length - 1];
    const note = html('div', 'muted', holder);
    note.textContent = `${points.length} points over ${timed ? duration(last[1] - t0) :
        (last[0] - points[0][0]) + ' events'}; at the end: reserved ${bytes(last[2])}, ` +
        `allocated ${bytes(last[3])}, cached ${bytes(last[4])}`;
  }
  // For the browser test: the page fits its window (no sideways scrolling on a phone).
  const status = document.getElementById('fragscope-status');
  status.dataset.overflow = String(document.documentElement.scrollWidth > window.innerWidth + 1);
  status.textContent = 'rendered';
})();
)js";

std::string Esc(std::string_view s) { return HtmlEscape(s); }

std::string Bytes(const Measured<uint64_t>& m) {
  return m.value ? FormatBytes(*m.value) : "unknown (" + m.unknown_reason + ")";
}

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

class HtmlReport {
 public:
  HtmlReport(const ExportInput& in, Symbolizer& symbolizer, std::ostream& out,
             const HtmlReportOptions& options)
      : in_(in),
        s_(in.summary),
        sites_(in.summary, symbolizer),
        symbol_notes_(symbolizer.SymbolSourceNotes()),
        out_(out),
        options_(options) {}

  void Render();

 private:
  void Header();
  void Verdict();
  // One card of the device figures; an unknown figure shows its reason in small print.
  void Figure(std::string_view label, const std::string& value, const std::string& note = {}) {
    out_ << "<div class=\"figure\"><div class=\"label\">" << Esc(label)
         << "</div><div class=\"value\">" << Esc(value) << "</div>";
    if (!note.empty()) out_ << "<div class=\"note\">" << Esc(note) << "</div>";
    out_ << "</div>\n";
  }
  void Figure(std::string_view label, const Measured<uint64_t>& m) {
    m.value ? Figure(label, FormatBytes(*m.value)) : Figure(label, "unknown", m.unknown_reason);
  }
  void Figure(std::string_view label, const Measured<double>& m) {
    m.value ? Figure(label, FormatPercent(*m.value)) : Figure(label, "n/a", m.unknown_reason);
  }
  void Device(const DeviceSummary& d);
  void SegmentMap(const DeviceSummary& d);
  // The legend, a line saying what is drawn, and the bars of `segs` (address order).
  // `request_bytes` (the failure's map): a first row draws the failed request to the bars'
  // scale, to hold against the free ranges below it.
  void MapSvg(const std::vector<SegmentLayout>& segs, uint64_t left_out, int device,
              const std::string& label, uint64_t request_bytes = 0);
  void Segment(const SegmentLayout& seg, double y, double bar_length);
  void Rect(const char* cls, double x, double y, double w, const std::string& tip);
  void SiteTable(const std::vector<SiteEntry>& sites);
  void Failures();
  void Oom(const OomPostMortem& o, std::size_t index);
  void FreeRangesAtFailure(const OomPostMortem& o);
  std::string DataJson() const;

  const ExportInput& in_;
  const ModelSummary& s_;
  SiteNames sites_;
  std::vector<SymbolSourceNote> symbol_notes_;  // said with the caveats
  std::ostream& out_;
  const HtmlReportOptions& options_;
  bool hatch_defined_ = false;
};

void HtmlReport::Render() {
  out_ << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
       << "<title>fragscope report: " << Esc(s_.exe.empty() ? "process" : s_.exe)
       << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  Header();
  Verdict();
  for (const DeviceSummary& d : s_.devices) Device(d);
  Failures();
  if (!s_.ooms.empty() || s_.ooms_without_postmortem > 0) {
    out_ << "<h2 id=\"ooms\">Out-of-memory post-mortems</h2>\n";
    for (std::size_t i = 0; i < s_.ooms.size(); ++i) Oom(s_.ooms[i], i);
    if (s_.ooms_without_postmortem > 0) {
      out_ << "<p class=\"muted\">" << s_.ooms_without_postmortem
           << " more OOMs without a post-mortem (over the limit kept).</p>\n";
    }
  }
  // For the browser test: whether the script ran, kept out of sight.
  out_ << "<p hidden>Page state: <span id=\"fragscope-status\">static (the script did not "
          "run)</span></p>\n";
  out_ << "<script type=\"application/json\" id=\"fragscope-data\">" << DataJson()
       << "</script>\n<script>" << kScript << "</script>\n</body>\n</html>\n";
}

void HtmlReport::Header() {
  out_ << "<h1>fragscope report</h1>\n<p class=\"muted\">";
  out_ << Esc(s_.exe.empty() ? "(program unknown)" : s_.exe);
  if (s_.pid != 0) out_ << " &middot; pid " << s_.pid;
  if (!s_.host.empty()) out_ << " &middot; host " << Esc(s_.host);
  if (s_.rank) {
    out_ << " &middot; rank " << *s_.rank;
    if (s_.world_size) out_ << " of " << *s_.world_size;
  }
  out_ << " &middot; " << s_.events << " events, last seq " << s_.last_seq;
  if (s_.exit_status) out_ << " &middot; exit status " << *s_.exit_status;
  out_ << "</p>\n";
  // The same caveats as the text report, so that no rendering looks more certain than another.
  for (std::string caveat : ReportCaveats(s_)) {
    caveat[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(caveat[0])));
    out_ << "<p class=\"warn\">" << Esc(caveat) << "</p>\n";
  }
  for (const SymbolSourceNote& note : symbol_notes_) {
    out_ << "<p class=\"warn\">Symbols: " << Esc(DescribeSymbolSource(note)) << "</p>\n";
  }
  if (s_.drops > 0 && s_.approximate_intervals.empty()) {
    out_ << "<p class=\"warn\">" << s_.drops
         << " events were lost; the figures may be approximate.</p>\n";
  }
  if (!s_.orphan_blocks.empty()) {
    out_ << "<p class=\"warn\">" << s_.orphan_blocks.size()
         << " live blocks were annotated outside any known segment (" << s_.orphan_blocks_total
         << " seen); their bytes are not counted as allocated on any device.</p>\n";
  }
  if (!s_.stream_ended) {
    out_ << "<p class=\"warn\">The stream did not end normally (no End frame): this is the "
            "state at the last frame read.</p>\n";
  }
}

// The answer first, as the text report opens with it (report_verdict.h): each OOM with its
// class and reason, linked to its post-mortem, and the worst fragmentation per device.
void HtmlReport::Verdict() {
  const ReportVerdict v = BuildVerdict(s_);
  out_ << "<section class=\"verdict " << (v.ooms.empty() ? "clean" : "failed")
       << "\" id=\"verdict\">\n<h2>" << Esc(FormatVerdictHeadline(v)) << "</h2>\n<ul>\n";
  for (const VerdictOom& o : v.ooms) {
    std::size_t index = s_.ooms.size();
    for (std::size_t i = 0; i < s_.ooms.size(); ++i) {
      if (s_.ooms[i].failure.seq == o.first_seq) index = i;
    }
    const std::string what =
        o.count == 1 ? absl::StrFormat("OOM on device %d at seq %d", o.device, o.first_seq)
                     : absl::StrFormat("%d OOMs on device %d, seq %d to %d", o.count, o.device,
                                       o.first_seq, o.last_seq);
    out_ << "<li class=\"verdict-oom\"><span class=\"oom-class\">" << Esc(o.oom_class)
         << "</span> ";
    if (index < s_.ooms.size()) {
      out_ << "<a href=\"#oom-" << index << "\">" << Esc(what) << "</a>";
    } else {
      out_ << Esc(what);
    }
    out_ << ": " << Esc(FormatBytes(o.requested_bytes)) << " requested; " << Esc(o.reason);
    if (o.recovered > 0) {
      out_ << (o.recovered == o.count
                   ? " (recovered)"
                   : absl::StrFormat(" (%d of %d recovered)", o.recovered, o.count));
    }
    out_ << "</li>\n";
  }
  for (const VerdictFragmentation& f : v.fragmentation) {
    out_ << "<li class=\"verdict-fragmentation\">" << Esc(FormatVerdictFragmentation(f))
         << "</li>\n";
  }
  out_ << "</ul>\n</section>\n";
}

void HtmlReport::Device(const DeviceSummary& d) {
  out_ << "<section class=\"device\" id=\"device-" << d.ordinal << "\" data-device=\"" << d.ordinal
       << "\">\n<h2>";
  if (d.ordinal < 0) {
    out_ << "Device unknown";
  } else {
    out_ << "Device " << d.ordinal;
  }
  if (!d.name.empty()) out_ << " &middot; " << Esc(d.name);
  out_ << "</h2>\n";
  if (!d.uuid_hex.empty())
    out_ << "<p class=\"muted\">UUID <code>" << Esc(GpuUuidName(d.uuid_hex)) << "</code></p>\n";
  out_ << "<div class=\"figures\">\n";
  Figure("reserved", FormatBytes(d.reserved_bytes));
  Figure("allocated", FormatBytes(d.allocated_bytes));
  Figure("cached (reserved, free)", FormatBytes(d.cached_bytes));
  Figure("largest free range", FormatBytes(d.largest_free_range_bytes));
  Figure("fragmentation", d.fragmentation);
  Figure("stranded", FormatBytes(d.stranded_bytes));
  if (d.opaque_bytes > 0) Figure("opaque segments", FormatBytes(d.opaque_bytes));
  if (d.pending_free_bytes > 0) Figure("pending free", FormatBytes(d.pending_free_bytes));
  // A stream that begins mid-run knows its peaks from there on only.
  const std::string since = PeakSince(s_);
  Figure("peak reserved" + since, FormatBytes(d.peak_reserved_bytes));
  Figure("peak allocated" + since, FormatBytes(d.peak_allocated_bytes));
  Figure("max fragmentation" + since, d.max_fragmentation);
  Figure("device total", d.total_bytes);
  Figure("device free", d.device_free_bytes);
  Figure("untracked", d.untracked_bytes);
  if (d.pool_reserved_bytes > 0)
    Figure("memory pools reserved", FormatBytes(d.pool_reserved_bytes));
  if (d.managed_bytes > 0) Figure("managed", FormatBytes(d.managed_bytes));
  if (d.imported_bytes > 0) Figure("imported (other processes)", FormatBytes(d.imported_bytes));
  out_ << "</div>\n";
  SegmentMap(d);
  out_ << "<h3>Timeline</h3>\n<div class=\"timeline\" data-device=\"" << d.ordinal << "\"></div>\n";
  out_ << "<h3>Top allocation sites (live now)</h3>\n";
  SiteTable(d.sites);
  if (!d.sites_at_peak.empty()) {
    out_ << "<h3>Top allocation sites at peak reserved (" << Esc(FormatBytes(d.peak_reserved_bytes))
         << Esc(since) << ")</h3>\n";
    SiteTable(d.sites_at_peak);
  }
  out_ << "</section>\n";
}

void HtmlReport::SegmentMap(const DeviceSummary& d) {
  auto it = in_.segments.find(d.ordinal);
  static const std::vector<SegmentLayout> kNone;
  const std::vector<SegmentLayout>& segs = it == in_.segments.end() ? kNone : it->second;
  out_ << "<h3>Segment map</h3>\n";
  if (!in_.segments_captured) {
    out_ << "<p class=\"muted\">Segment layouts were not captured for this page.</p>\n";
    return;
  }
  if (segs.empty()) {
    out_ << "<p class=\"muted\">No segments held at the end of the trace.</p>\n";
    return;
  }
  auto left = in_.segments_left_out.find(d.ordinal);
  MapSvg(segs, left == in_.segments_left_out.end() ? 0 : left->second, d.ordinal,
         absl::StrFormat("segment map of device %d", d.ordinal));
}

void HtmlReport::MapSvg(const std::vector<SegmentLayout>& segs, uint64_t left_out, int device,
                        const std::string& label, uint64_t request_bytes) {
  out_ << "<div class=\"legend\"><span><i style=\"background:var(--alloc)\"></i>allocated "
          "block</span><span><i style=\"background:var(--pending)\"></i>pending free</span>"
          "<span><i style=\"background:var(--free)\"></i>free range</span><span><i "
          "style=\"background:var(--exact)\"></i>whole allocation (no sub-allocator)</span>"
          "<span><i style=\"background:var(--opaque)\"></i>opaque (inside unknown)</span>"
          "<span><i style=\"border:1px solid #c9ced6\"></i>reserved, not mapped</span>";
  if (request_bytes > 0) {
    out_ << "<span><i style=\"border:1.5px dashed #c0392b\"></i>the failed request, to the same "
            "scale</span>";
  }
  out_ << "</div>\n";
  out_ << "<p class=\"muted\">" << segs.size() << " segment" << (segs.size() == 1 ? "" : "s");
  if (left_out > 0) out_ << " (the largest; " << left_out << " smaller ones not drawn)";
  out_ << ". Bar length follows segment size (at least " << kMinBarFraction * 100
       << " % of the width); inside a bar, blocks are to scale. Hover for size and site.</p>\n";
  uint64_t largest = 1;
  for (const SegmentLayout& s : segs) largest = std::max(largest, s.size);
  const double height =
      kRowHeight * static_cast<double>(segs.size() + (request_bytes > 0 ? 1 : 0)) + 4;
  out_ << absl::StrFormat(
      "<div class=\"wrap\"><svg class=\"segment-map\" data-device=\"%d\" viewBox=\"0 0 %.0f %.0f\" "
      "role=\"img\" "
      "aria-label=\"%s\">\n",
      device, kMapWidth, height, Esc(label));
  // The opaque hatch, defined once per page (an id is the page's, not the map's).
  if (!hatch_defined_) {
    out_ << "<defs><pattern id=\"fs-hatch\" width=\"6\" height=\"6\" "
            "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"6\" "
            "height=\"6\" fill=\"#c3c7ce\"/><rect width=\"3\" height=\"6\" "
            "fill=\"#8a8f98\"/></pattern></defs>\n";
    hatch_defined_ = true;
  }
  double y = 2;
  if (request_bytes > 0) {
    // No minimum length here: a request smaller than the free ranges should look smaller.
    const double fraction =
        std::min(1.0, static_cast<double>(request_bytes) / static_cast<double>(largest));
    const bool wider = request_bytes > largest;
    out_ << absl::StrFormat(
        "<g class=\"request\" data-size=\"%d\"><text class=\"request\" x=\"0\" y=\"%.1f\">request "
        "%s</text><rect class=\"request\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
        "height=\"%.0f\"><title>the failed request: %s%s</title></rect></g>\n",
        request_bytes, y + kBarHeight - 3, Esc(FormatBytes(request_bytes)), kLabelWidth, y,
        std::max(kMinRectWidth, kBarWidth * fraction), kBarHeight, Esc(FormatBytes(request_bytes)),
        wider ? " (larger than any segment: drawn as long as the longest bar)" : "");
    if (wider) {
      out_ << absl::StrFormat(
          "<text class=\"request\" x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%.1f&times; the "
          "largest segment</text>\n",
          kLabelWidth + kBarWidth / 2, y + kBarHeight - 3,
          static_cast<double>(request_bytes) / static_cast<double>(largest));
    }
    y += kRowHeight;
  }
  for (const SegmentLayout& s : segs) {
    const double fraction = static_cast<double>(s.size) / static_cast<double>(largest);
    Segment(s, y, kBarWidth * std::max(kMinBarFraction, fraction));
    y += kRowHeight;
  }
  out_ << "</svg></div>\n";
}

void HtmlReport::Rect(const char* cls, double x, double y, double w, const std::string& tip) {
  out_ << absl::StrFormat(
      "<rect class=\"%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\"><title>%s</title>"
      "</rect>\n",
      cls, x, y, std::max(w, kMinRectWidth), kBarHeight, Esc(tip));
}

void HtmlReport::Segment(const SegmentLayout& seg, double y, double bar_length) {
  const char* coverage = CoverageName(seg.coverage);
  const std::string& site = sites_.Name(seg.stack_id);
  out_ << absl::StrFormat(
      "<g class=\"segment coverage-%s\" data-base=\"%s\" data-size=\"%d\" data-blocks=\"%d\">\n",
      coverage, Hex(seg.base), seg.size, seg.blocks.size());
  out_ << absl::StrFormat("<text x=\"0\" y=\"%.1f\">%s %s</text>\n", y + kBarHeight - 3,
                          Hex(seg.base), Esc(FormatBytes(seg.size)));
  const double x0 = kLabelWidth;
  const double scale = bar_length / static_cast<double>(std::max<uint64_t>(seg.size, 1));
  auto x_of = [&](uint64_t address) {
    return x0 + static_cast<double>(address - seg.base) * scale;
  };
  const std::string seg_tip = absl::StrFormat(
      "segment %s, %s (%s%s, %s backed)\nsite: %s", Hex(seg.base), FormatBytes(seg.size), coverage,
      seg.vmm_reservation ? ", VMM reservation" : "", FormatBytes(seg.backing_bytes), site);
  // The reservation as a whole; backed parts are drawn over it.
  Rect("unmapped", x0, y, bar_length,
       seg.vmm_reservation ? seg_tip + "\n(this part is reserved address space, not mapped)"
                           : seg_tip);
  for (const AddressRange& r : seg.backed) {
    if (seg.coverage == Coverage::kExact) {
      Rect("exact", x_of(r.address), y, static_cast<double>(r.size) * scale, seg_tip);
    } else if (seg.coverage == Coverage::kOpaque) {
      Rect("opaque", x_of(r.address), y, static_cast<double>(r.size) * scale,
           seg_tip + "\ncarved by a caching allocator fragscope cannot see: used bytes unknown");
    }
  }
  for (const AddressRange& r : seg.free_ranges) {
    Rect("free", x_of(r.address), y, static_cast<double>(r.size) * scale,
         absl::StrFormat("free range %s, %s", Hex(r.address), FormatBytes(r.size)));
  }
  for (const BlockLayout& b : seg.blocks) {
    Rect(b.pending_free ? "block pending" : "block allocated", x_of(b.address), y,
         static_cast<double>(b.size) * scale,
         absl::StrFormat("block %s, %s%s%s\nsite: %s", Hex(b.address), FormatBytes(b.size),
                         b.pending_free ? " (freed, pending)" : "",
                         b.stream != 0 ? absl::StrFormat(", stream %s", Hex(b.stream)) : "",
                         sites_.Name(b.stack_id)));
  }
  out_ << "</g>\n";
}

void HtmlReport::SiteTable(const std::vector<SiteEntry>& sites) {
  if (sites.empty()) {
    out_ << "<p class=\"muted\">None.</p>\n";
    return;
  }
  out_ << "<div class=\"wrap\"><table class=\"sites\"><tr><th>live "
          "bytes</th><th>count</th><th>site</th></tr>\n";
  for (std::size_t i = 0; i < sites.size() && i < options_.max_sites; ++i) {
    const SiteEntry& e = sites[i];
    out_ << "<tr class=\"site-row\"><td class=\"num\">" << Esc(FormatBytes(e.live_bytes))
         << "</td><td class=\"num\">" << e.count << "</td><td class=\"site\">"
         << Esc(sites_.SiteName(e)) << "</td></tr>\n";
  }
  out_ << "</table></div>\n";
}

void HtmlReport::Failures() {
  if (s_.failed_allocations.empty()) return;
  out_ << "<h2>Failed allocations</h2>\n<div class=\"wrap\"><table "
          "class=\"failures\"><tr><th>seq</th><th>device"
          "</th><th>call</th><th>requested</th><th>result</th><th>outcome</th><th>site</th></tr>\n";
  std::size_t shown = 0;
  for (const FailedAllocation& f : s_.failed_allocations) {
    if (shown++ == options_.max_failed_listed) break;
    std::string outcome = f.is_oom ? "OOM" : "error";
    if (f.recovered) outcome += absl::StrFormat(", recovered (seq %d)", f.recovered_by_seq);
    if (f.superseded_by_seq != 0)
      outcome += absl::StrFormat(", see OOM seq %d", f.superseded_by_seq);
    if (f.has_postmortem) outcome += ", post-mortem below";
    // data-label: the column's name where a narrow screen shows the row as a block.
    out_ << "<tr class=\"failure\"><td class=\"num\" data-label=\"seq\">" << f.seq
         << "</td><td class=\"num\" data-label=\"device\">" << f.device << "</td><td><code>"
         << Esc(f.api_name) << "</code></td><td class=\"num\">"
         << Esc(FormatBytes(f.requested_bytes)) << "</td><td class=\"num\" data-label=\"result\">"
         << f.result << "</td><td>" << Esc(outcome) << "</td><td class=\"site\">"
         << Esc(sites_.Name(f.stack_id)) << "</td></tr>\n";
  }
  out_ << "</table></div>\n";
  if (s_.failed_allocations.size() > options_.max_failed_listed) {
    out_ << "<p class=\"muted\">" << s_.failed_allocations.size() - options_.max_failed_listed
         << " more not listed.</p>\n";
  }
}

// The free ranges at the failure by size, as the text report lists them.
void HtmlReport::FreeRangesAtFailure(const OomPostMortem& o) {
  if (o.segments_at_failure == nullptr) return;
  const FreeRangeCensus census = CensusOfFreeRanges(*o.segments_at_failure);
  if (census.ranges == 0) return;
  out_ << absl::StrFormat(
      "<h4>Free ranges at the failure</h4>\n<p class=\"free-ranges\">%d, in %d of %d "
      "segments%s; by size:</p>\n<div class=\"wrap\"><table class=\"free-range-sizes\">\n",
      census.ranges, census.segments_with_free, census.segments,
      o.segments_left_out > 0
          ? absl::StrFormat(" (the largest; %d more not looked at)", o.segments_left_out)
          : "");
  const FreeRangeSizes sizes = GroupFreeRangeSizes(census);
  for (const auto& [shown, count] : sizes.lines) {
    out_ << "<tr><td class=\"num\">" << Esc(shown) << "</td><td class=\"num\">&times; " << count
         << "</td></tr>\n";
  }
  if (sizes.rest > 0) {
    out_ << absl::StrFormat(
        "<tr><td class=\"num\">%d smaller</td><td class=\"num\">%s in all"
        "</td></tr>\n",
        sizes.rest, Esc(FormatBytes(sizes.rest_bytes)));
  }
  out_ << "</table></div>\n";
}

void HtmlReport::Oom(const OomPostMortem& o, std::size_t index) {
  const OomFigures& f = o.figures;
  out_ << "<section class=\"oom\" id=\"oom-" << index << "\" data-class=\""
       << OomClassName(o.oom_class) << "\">\n<h3 class=\"oom-headline\">" << Esc(o.headline)
       << "</h3>\n<p><span class=\"oom-class\">" << OomClassName(o.oom_class) << "</span> seq "
       << o.failure.seq << ", <code>" << Esc(o.failure.api_name) << "</code>";
  if (auto wall = s_.WallTimeNs(o.failure.time_ns)) out_ << ", " << Esc(FormatWallTime(*wall));
  out_ << (o.approximate ? " &middot; <b>approximate</b>: events were lost before it" : "")
       << "</p>\n<p class=\"explanation\">" << Esc(o.explanation) << "</p>\n";
  out_ << "<div class=\"wrap\"><table class=\"oom-figures\">\n";
  auto row = [&](std::string_view label, const std::string& value) {
    out_ << "<tr><td>" << Esc(label) << "</td><td class=\"num\">" << Esc(value) << "</td></tr>\n";
  };
  row("requested", FormatBytes(f.requested_bytes));
  row("device total", Bytes(f.device_total_bytes));
  row(f.mem_info_from_failure ? "device free (at the failure)" : "device free (last sample)",
      Bytes(f.device_free_bytes));
  row("reserved", FormatBytes(f.reserved_bytes));
  row("allocated", FormatBytes(f.allocated_bytes));
  if (f.opaque_bytes > 0) {
    row("opaque",
        absl::StrFormat("%s in %d segments", FormatBytes(f.opaque_bytes), f.opaque_segments));
  }
  row("cached", FormatBytes(f.cached_bytes));
  row("largest free range", FormatBytes(f.largest_free_range_bytes));
  row("largest compatible free range", FormatBytes(f.largest_compatible_free_range_bytes));
  if (f.pending_free_bytes > 0) row("pending free", FormatBytes(f.pending_free_bytes));
  if (f.pool_free_bytes > 0) row("free in memory pools", FormatBytes(f.pool_free_bytes));
  row("untracked", Bytes(f.untracked_bytes));
  row("peak reserved", FormatBytes(o.peak_reserved_bytes));
  out_ << "</table></div>\n";
  if (!o.advice.empty()) {
    out_ << "<h4>Advice</h4>\n<ul class=\"advice\">\n";
    for (const std::string& a : o.advice) out_ << "<li>" << Esc(a) << "</li>\n";
    out_ << "</ul>\n";
  }
  out_ << "<p>Failing call site: <span class=\"site\">" << Esc(sites_.Name(o.failure.stack_id))
       << "</span></p>\n<h4>Live at the failure, by site</h4>\n";
  SiteTable(o.sites_at_failure);
  // What held the memory when the cache was largest, as of this failure (the text report's
  // section of the same name).
  if (!o.sites_at_peak.empty()) {
    out_ << "<h4>Live at peak reserved (" << Esc(FormatBytes(o.peak_reserved_bytes))
         << Esc(PeakSince(s_)) << "), by site</h4>\n";
    SiteTable(o.sites_at_peak);
  }
  FreeRangesAtFailure(o);
  // The cache as it was when the request failed: where the free bytes were, and why no range
  // was large enough (the map of the device above is the end's).
  out_ << "<h4>Segment map at the failure</h4>\n";
  if (o.segments_at_failure != nullptr && !o.segments_at_failure->empty()) {
    MapSvg(*o.segments_at_failure, o.segments_left_out, o.failure.device,
           absl::StrFormat("segment map of device %d at the failure, seq %d", o.failure.device,
                           o.failure.seq),
           f.requested_bytes);
  } else if (o.segments_at_failure != nullptr) {
    out_ << "<p class=\"muted\">The device held no segments at the failure.</p>\n";
  } else if (!o.map_missing.empty()) {
    out_ << "<p class=\"muted\">No map: " << Esc(o.map_missing) << ".</p>\n";
  } else {
    out_ << "<p class=\"muted\">Not captured for this trace.</p>\n";
  }
  out_ << "</section>\n";
}

std::string HtmlReport::DataJson() const {
  std::ostringstream json;
  JsonWriter w(json, /*pretty=*/false);
  w.BeginObject();
  w.Key("devices");
  w.BeginObject();
  for (const DeviceSummary& d : s_.devices) {
    w.Key(std::to_string(d.ordinal));
    w.BeginObject();
    w.Key("timeline");
    w.BeginArray();
    for (const TimelinePoint& p : d.timeline) {
      w.BeginArray();
      w.Uint(p.seq);
      w.Uint(p.time_ns);
      w.Uint(p.reserved_bytes);
      w.Uint(p.allocated_bytes);
      w.Uint(p.cached_bytes);
      if (p.fragmentation) {
        w.DoubleExact(*p.fragmentation);
      } else {
        w.Null();
      }
      w.EndArray();
    }
    w.EndArray();
    // The OOMs the report explains, drawn on the timeline: [seq, time_ns, requested, class].
    w.Key("ooms");
    w.BeginArray();
    std::map<uint64_t, const char*> class_of;
    for (const OomPostMortem& o : s_.ooms) class_of[o.failure.seq] = OomClassName(o.oom_class);
    for (const FailedAllocation& f : s_.failed_allocations) {
      if (f.device != d.ordinal || !f.CountsAsOom()) continue;
      w.BeginArray();
      w.Uint(f.seq);
      w.Uint(f.time_ns);
      w.Uint(f.requested_bytes);
      auto c = class_of.find(f.seq);
      w.String(c == class_of.end() ? "no post-mortem" : c->second);
      w.EndArray();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndObject();
  // The program's marks, on every device's timeline: [seq, time_ns, label].
  w.Key("marks");
  w.BeginArray();
  for (const ModelSummary::MarkEntry& m : s_.marks) {
    w.BeginArray();
    w.Uint(m.seq);
    w.Uint(m.time_ns);
    w.String(m.label);
    w.EndArray();
  }
  w.EndArray();
  w.EndObject();
  // Mark labels are the program's text: a "<" in them must not end the script element early.
  const std::string text = json.str();
  std::string safe;
  safe.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<') {
      safe += "\\u003c";
    } else {
      safe += text[i];
    }
  }
  return safe;
}

}  // namespace

void RenderHtml(const ExportInput& input, Symbolizer& symbolizer, std::ostream& out,
                const HtmlReportOptions& options) {
  HtmlReport(input, symbolizer, out, options).Render();
}

}  // namespace fragscope::exporter
