#include "common/byte_size.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace plateau {
namespace {

struct Unit {
  const char* suffix;
  double bytes;
};

constexpr Unit kUnits[] = {
    {"kib", 1024.0},
    {"mib", 1048576.0},
    {"gib", 1073741824.0},
    {"tib", 1099511627776.0},
    {"kb", 1e3},
    {"mb", 1e6},
    {"gb", 1e9},
    {"tb", 1e12},
    {"k", 1024.0},
    {"m", 1048576.0},
    {"g", 1073741824.0},
    {"t", 1099511627776.0},
    {"b", 1.0},
};

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const std::string lower =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  absl::string_view number = lower;
  double multiplier = 1.0;
  for (const Unit& unit : kUnits) {
    if (absl::EndsWith(number, unit.suffix)) {
      number.remove_suffix(std::char_traits<char>::length(unit.suffix));
      multiplier = unit.bytes;
      break;
    }
  }
  number = absl::StripAsciiWhitespace(number);
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value) || !(value >= 0) ||
      !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text,
        "' is not a byte size (examples: 2GiB, 512MiB, 1.5GB, 4096)"));
  }
  const double bytes = std::round(value * multiplier);
  if (bytes > 9.0e18) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is too large"));
  }
  return static_cast<int64_t>(bytes);
}

std::string FormatBytes(int64_t bytes) {
  const double magnitude = std::abs(static_cast<double>(bytes));
  if (magnitude < 1024.0) return absl::StrCat(bytes, " B");
  constexpr const char* kNames[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (std::abs(value) >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kNames[unit]);
}

}  // namespace plateau
