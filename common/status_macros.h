// Early-return helpers for absl::Status / absl::StatusOr, as used inside
// Google: RETURN_IF_ERROR(expr) and ASSIGN_OR_RETURN(lhs, expr).
#ifndef PLATEAU_COMMON_STATUS_MACROS_H_
#define PLATEAU_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PLATEAU_STATUS_CONCAT_INNER(a, b) a##b
#define PLATEAU_STATUS_CONCAT(a, b) PLATEAU_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                                    \
  do {                                                           \
    const ::absl::Status plateau_status_ = ::absl::Status(expr); \
    if (!plateau_status_.ok()) return plateau_status_;           \
  } while (false)

// `lhs` = the value of the StatusOr `expr`, or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr)                                         \
  ASSIGN_OR_RETURN_IMPL(PLATEAU_STATUS_CONCAT(plateau_statusor_, __LINE__), \
                        lhs, expr)

#define ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                          \
  if (!statusor.ok()) return statusor.status();    \
  lhs = std::move(statusor).value()

#endif  // PLATEAU_COMMON_STATUS_MACROS_H_
