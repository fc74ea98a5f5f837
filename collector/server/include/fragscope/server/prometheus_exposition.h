// Prometheus text exposition (format 0.0.4) of the collector's per-process, per-device figures,
// so a fleet is watched with the Prometheus/Grafana it already has. Names and meanings are
// documented in collector/REPORT.md "Prometheus metrics". A figure the model does not know
// (fragmentation under the floor or with opaque segments, untracked without a sample) is left
// out rather than exported as 0.
#ifndef FRAGSCOPE_SERVER_PROMETHEUS_EXPOSITION_H_
#define FRAGSCOPE_SERVER_PROMETHEUS_EXPOSITION_H_

#include <string>
#include <vector>

#include "fragscope/server/session_server.h"

namespace fragscope {

// Stateless; thread-safe.
std::string RenderPrometheus(const std::vector<SessionServer::StreamState>& streams);

}  // namespace fragscope

#endif  // FRAGSCOPE_SERVER_PROMETHEUS_EXPOSITION_H_
