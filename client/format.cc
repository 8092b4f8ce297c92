#include "client/format.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace plateau::client {
namespace {

// The name of value `number` of `type` without `prefix`, lower-cased if
// asked; the number itself for a value this build does not know.
std::string EnumName(const google::protobuf::EnumDescriptor* type, int number,
                     absl::string_view prefix, bool lower_case) {
  const google::protobuf::EnumValueDescriptor* value =
      type->FindValueByNumber(number);
  if (value == nullptr) return absl::StrCat(number);
  absl::string_view name = value->name();
  absl::ConsumePrefix(&name, prefix);
  return lower_case ? absl::AsciiStrToLower(name) : std::string(name);
}

}  // namespace

std::string StateName(v1::JobState state) {
  return EnumName(v1::JobState_descriptor(), state, "JOB_STATE_", false);
}

std::string EventKindName(v1::JobEventKind kind) {
  return EnumName(v1::JobEventKind_descriptor(), kind, "JOB_EVENT_KIND_",
                  false);
}

std::string NodeStateName(v1::NodeState state) {
  return EnumName(v1::NodeState_descriptor(), state, "NODE_STATE_", false);
}

std::string PoolName(v1::MemoryPool pool) {
  return EnumName(v1::MemoryPool_descriptor(), pool, "MEMORY_POOL_", true);
}

std::string ComponentName(v1::MemoryComponent component) {
  return EnumName(v1::MemoryComponent_descriptor(), component,
                  "MEMORY_COMPONENT_", true);
}

std::string DeviceKindName(v1::DeviceKind kind) {
  return EnumName(v1::DeviceKind_descriptor(), kind, "DEVICE_KIND_", true);
}

bool IsFinalState(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

bool IsSet(const google::protobuf::Timestamp& time) {
  return time.seconds() != 0 || time.nanos() != 0;
}

absl::Time ToTime(const google::protobuf::Timestamp& time) {
  return absl::FromUnixSeconds(time.seconds()) +
         absl::Nanoseconds(time.nanos());
}

std::string FormatTime(const google::protobuf::Timestamp& time) {
  if (!IsSet(time)) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ", ToTime(time),
                          absl::UTCTimeZone());
}

std::string FormatAge(absl::Duration age) {
  const int64_t seconds = std::max<int64_t>(0, absl::ToInt64Seconds(age));
  if (seconds < 60) return absl::StrCat(seconds, "s");
  if (seconds < 60 * 60) return absl::StrCat(seconds / 60, "m");
  if (seconds < 24 * 60 * 60) return absl::StrCat(seconds / (60 * 60), "h");
  return absl::StrCat(seconds / (24 * 60 * 60), "d");
}

std::string AgeSince(const google::protobuf::Timestamp& time, absl::Time now) {
  if (!IsSet(time)) return "-";
  return FormatAge(now - ToTime(time));
}

std::string ProgressBar(int64_t step, int64_t total, int width) {
  width = std::max(width, 0);
  int64_t filled = 0;
  if (total > 0) {
    filled = std::clamp<int64_t>(step, 0, total) * width / total;
  }
  return absl::StrCat("[", std::string(filled, '#'),
                      std::string(width - filled, '.'), "]");
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(header.size(), 0);
  auto measure = [&widths](const std::vector<std::string>& row) {
    if (row.size() > widths.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  };
  measure(header);
  for (const std::vector<std::string>& row : rows) measure(row);
  std::string out;
  auto append = [&widths, &out](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < widths.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      if (i > 0) line += "  ";
      line += cell;
      line.append(widths[i] - cell.size(), ' ');
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  };
  append(header);
  for (const std::vector<std::string>& row : rows) append(row);
  return out;
}

std::string TerminalSafe(absl::string_view text) {
  std::string safe;
  safe.reserve(text.size());
  const auto escape = [&safe](unsigned char byte) {
    absl::StrAppend(&safe, "\\x", absl::Hex(byte, absl::kZeroPad2));
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char byte = static_cast<unsigned char>(text[i]);
    const bool lead_of_c1 = byte == 0xc2 && i + 1 < text.size() &&
                            static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                            static_cast<unsigned char>(text[i + 1]) <= 0x9f;
    // A byte 0x80..0x9f that no lead byte announced is a raw C1 control.
    const bool raw_c1 =
        byte >= 0x80 && byte <= 0x9f &&
        (i == 0 || static_cast<unsigned char>(text[i - 1]) < 0x80);
    if (lead_of_c1) {
      escape(byte);
      escape(static_cast<unsigned char>(text[++i]));
    } else if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f ||
               raw_c1) {
      escape(byte);
    } else {
      safe.push_back(static_cast<char>(byte));
    }
  }
  return safe;
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print JSON: ", status.ToString()));
  }
  if (!absl::EndsWith(json, "\n")) json += "\n";
  return json;
}

}  // namespace plateau::client
