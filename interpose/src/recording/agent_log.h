// The agent's one way to say something: a line on the program's stderr, prefixed "fragscope: ".
//
// One write(2) per line, so that lines of several threads (or of the program's own output) do
// not interleave inside a line; no allocation, no stdio (the program's FILE buffers and locks are
// not ours, and the caller may be a hook in any state). A line longer than the buffer is cut and
// still ends with a newline. Thread-safe; errno is kept.
#ifndef FRAGSCOPE_INTERPOSE_AGENT_LOG_H_
#define FRAGSCOPE_INTERPOSE_AGENT_LOG_H_

namespace fragscope::agent {

// printf-style; the text after "fragscope: ", without the final newline.
void AgentLog(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_AGENT_LOG_H_
