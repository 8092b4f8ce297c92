// Byte sizes as people write them on command lines and read them in logs:
// "2GiB", "512MiB", "1.5GB", "4096". Binary units are powers of 1024,
// decimal ones powers of 1000.
#ifndef PLATEAU_COMMON_BYTE_SIZE_H_
#define PLATEAU_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace plateau {

// INVALID_ARGUMENT naming the text when it is not a size.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// "1.50 GiB", "12.0 MiB", "512 B".
std::string FormatBytes(int64_t bytes);

}  // namespace plateau

#endif  // PLATEAU_COMMON_BYTE_SIZE_H_
