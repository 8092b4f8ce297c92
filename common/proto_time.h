// absl::Time to and from google.protobuf.Timestamp, to the nanosecond: the
// records plateaud keeps and the times it computes with.
#ifndef PLATEAU_COMMON_PROTO_TIME_H_
#define PLATEAU_COMMON_PROTO_TIME_H_

#include "absl/time/time.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"

namespace plateau {

inline google::protobuf::Timestamp ToProto(absl::Time time) {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
      absl::ToUnixNanos(time));
}

inline absl::Time FromProto(const google::protobuf::Timestamp& time) {
  return absl::FromUnixNanos(
      google::protobuf::util::TimeUtil::TimestampToNanoseconds(time));
}

}  // namespace plateau

#endif  // PLATEAU_COMMON_PROTO_TIME_H_
