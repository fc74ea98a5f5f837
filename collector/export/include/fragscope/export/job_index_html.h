// The index page of a job's HTML reports (`fragscope report TRACE... --format html -o DIR`): the
// job summary (fragscope/report/job_summary.h) as the text report prints it, and a link to each
// process's own page, the process whose OOM came first marked. Self-contained like the pages.
#ifndef FRAGSCOPE_EXPORT_JOB_INDEX_HTML_H_
#define FRAGSCOPE_EXPORT_JOB_INDEX_HTML_H_

#include <ostream>
#include <string>
#include <vector>

#include "fragscope/report/job_summary.h"

namespace fragscope::exporter {

// `pages[i]` is the file name (relative to the index) of job.members[i]'s page. Stateless.
void RenderJobIndexHtml(const JobSummary& job, const std::vector<std::string>& pages,
                        std::ostream& out);

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_JOB_INDEX_HTML_H_
