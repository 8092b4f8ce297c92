#include "proto/job_spec_internal.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace plateau::job_spec_internal {
namespace {

using google::protobuf::EnumDescriptor;

// Longest value quoted back in a message.
constexpr size_t kMaxQuotedValueLength = 40;

}  // namespace

std::string EnumYamlName(const EnumDescriptor& type, int number) {
  const auto* value = type.FindValueByNumber(number);
  if (number == 0 || value == nullptr) return "";
  absl::string_view prefix = type.FindValueByNumber(0)->name();
  absl::ConsumeSuffix(&prefix, "UNSPECIFIED");
  return absl::AsciiStrToLower(absl::StripPrefix(value->name(), prefix));
}

std::string EnumChoices(const EnumDescriptor& type) {
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) {
    std::string name = EnumYamlName(type, type.value(i)->number());
    if (!name.empty()) names.push_back(std::move(name));
  }
  return absl::StrJoin(names, "|");
}

std::string FormatDouble(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    return absl::StrFormat("%.0f", value);
  }
  for (int precision = 1; precision < 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    double read_back = 0;
    if (absl::SimpleAtod(text, &read_back) && read_back == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

std::string FormatDurationSeconds(int64_t seconds) {
  if (seconds == 0) return "0s";
  std::string text;
  if (seconds >= 3600) absl::StrAppend(&text, seconds / 3600, "h");
  if (seconds % 3600 >= 60) absl::StrAppend(&text, seconds % 3600 / 60, "m");
  if (seconds % 60 != 0) absl::StrAppend(&text, seconds % 60, "s");
  return text;
}

std::string Quote(absl::string_view text) {
  if (text.size() > kMaxQuotedValueLength) {
    return absl::StrCat("'", text.substr(0, kMaxQuotedValueLength), "...'");
  }
  return absl::StrCat("'", text, "'");
}

}  // namespace plateau::job_spec_internal
