// The `describe` page of a job: identity, state, times, allocation,
// progress, last error, the memory plan made at admission (plan_view.h),
// memory peaks by rank and component, the state history and the spec YAML.
// Pure; the text ends in '\n'.
#ifndef PLATEAU_CLIENT_DESCRIBE_VIEW_H_
#define PLATEAU_CLIENT_DESCRIBE_VIEW_H_

#include <string>
#include <vector>

#include "proto/job.pb.h"

namespace plateau::client {

// `events` is the job's history, oldest first.
std::string DescribeJob(const v1::Job& job,
                        const std::vector<v1::JobEvent>& events);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_DESCRIBE_VIEW_H_
