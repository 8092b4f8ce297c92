// Prometheus HTTP service discovery of the workers (served by plateaud at
// /sd/workers): each attached node's metrics address, labelled with its
// name, so that new nodes are scraped without editing any file. Lost nodes
// are left out: nothing answers at their address.
#ifndef PLATEAU_DAEMON_METRICS_SERVICE_DISCOVERY_H_
#define PLATEAU_DAEMON_METRICS_SERVICE_DISCOVERY_H_

#include <string>
#include <vector>

#include "proto/node.pb.h"

namespace plateau::daemon {

// [{"targets": ["host:port"], "labels": {"node": "name"}}, ...], one group
// per node that is READY or DRAINING and has a metrics address.
std::string WorkerTargetsJson(const std::vector<v1::Node>& nodes);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_METRICS_SERVICE_DISCOVERY_H_
