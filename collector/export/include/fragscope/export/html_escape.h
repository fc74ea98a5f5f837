// Text into HTML: the five characters that could end a text node or an attribute value become
// entities. Shared by the report page and the job index.
#ifndef FRAGSCOPE_EXPORT_HTML_ESCAPE_H_
#define FRAGSCOPE_EXPORT_HTML_ESCAPE_H_

#include <string>
#include <string_view>

namespace fragscope::exporter {

// Thread-safe.
std::string HtmlEscape(std::string_view text);

}  // namespace fragscope::exporter

#endif  // FRAGSCOPE_EXPORT_HTML_ESCAPE_H_
