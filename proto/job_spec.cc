#include "proto/job_spec.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/message.h"
#include "yaml-cpp/yaml.h"

// The YAML is the JobSpec proto spelled out: every key is a proto field name,
// sections are sub-messages, and an enum value is its name without the
// enum's prefix, in lower case (OPTIMIZER_KIND_ADAMW is "adamw"). Reading and
// rendering therefore walk the proto descriptor; the rules that go beyond
// types (ranges, required keys, relations between fields) are written out
// below, in SpecValidator and kRequiredPaths.

namespace plateau {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::Duration;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using v1::JobSpec;

// The path of the whole document in messages.
constexpr char kDocumentPath[] = "spec";

// The keys a YAML spec must give; every other key has a default.
constexpr absl::string_view kRequiredPaths[] = {
    "name",          "model.layers", "model.d_model",     "model.heads",
    "model.experts", "model.top_k",  "model.ffn_hidden",  "model.vocab",
    "model.seq_len", "data.path",    "data.batch_tokens", "train.steps",
};

constexpr size_t kMaxNameLength = 63;
constexpr int64_t kMaxPriority = 1000;
constexpr int64_t kMaxNodes = 1024;
constexpr int64_t kMaxDevicesPerNode = 64;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMinDModel = 8;
constexpr int64_t kMaxDModel = 65536;
constexpr int64_t kMaxExperts = 4096;
constexpr int64_t kMaxFfnHidden = 1048576;
constexpr int64_t kMaxVocab = 4194304;
constexpr int64_t kMaxSeqLen = 1048576;
constexpr double kMaxLearningRate = 10.0;
constexpr int64_t kMaxRestarts = 100;
// google.protobuf.Duration's own limit (10000 years).
constexpr int64_t kMaxDurationSeconds = 315576000000;
// Spec files are a few hundred bytes; anything this large is the wrong file.
constexpr int64_t kMaxSpecFileBytes = 1 << 20;
// Longest value quoted back in a message.
constexpr size_t kMaxQuotedValueLength = 40;

// True for a required key and for a section that holds one.
bool IsRequired(absl::string_view path) {
  return std::any_of(std::begin(kRequiredPaths), std::end(kRequiredPaths),
                     [path](absl::string_view required) {
                       return required == path ||
                              (absl::StartsWith(required, path) &&
                               required[path.size()] == '.');
                     });
}

std::string ChildPath(absl::string_view parent, absl::string_view key) {
  if (parent.empty()) return std::string(key);
  return absl::StrCat(parent, ".", key);
}

// ---------------------------------------------------------------------------
// Enum spellings.

// The YAML name of enum value `number` ("adamw"), or "" for UNSPECIFIED and
// numbers the enum does not define. Every enum of the API names its zero
// value <PREFIX>UNSPECIFIED; the other values share that prefix.
std::string EnumYamlName(const EnumDescriptor& type, int number) {
  const auto* value = type.FindValueByNumber(number);
  if (number == 0 || value == nullptr) return "";
  absl::string_view prefix = type.FindValueByNumber(0)->name();
  absl::ConsumeSuffix(&prefix, "UNSPECIFIED");
  return absl::AsciiStrToLower(absl::StripPrefix(value->name(), prefix));
}

// "adamw|skewadam|adafactor|lion".
std::string EnumChoices(const EnumDescriptor& type) {
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) {
    std::string name = EnumYamlName(type, type.value(i)->number());
    if (!name.empty()) names.push_back(std::move(name));
  }
  return absl::StrJoin(names, "|");
}

// ---------------------------------------------------------------------------
// Formatting values.

// The shortest decimal text that reads back as exactly `value`; whole numbers
// without an exponent.
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

// "1h30m", "90s", "2h"; "0s" for zero.
std::string FormatDurationSeconds(int64_t seconds) {
  if (seconds == 0) return "0s";
  std::string text;
  if (seconds >= 3600) absl::StrAppend(&text, seconds / 3600, "h");
  if (seconds % 3600 >= 60) absl::StrAppend(&text, seconds % 3600 / 60, "m");
  if (seconds % 60 != 0) absl::StrAppend(&text, seconds % 60, "s");
  return text;
}

// Reads `text` as a whole-second duration written as hours, minutes and
// seconds, largest unit first, each at most once: "30m", "2h", "1h30m15s".
// Returns nullopt if `text` is not of that form. Huge values saturate above
// kMaxDurationSeconds rather than overflow.
std::optional<int64_t> ParseDurationSeconds(absl::string_view text) {
  constexpr std::pair<char, int64_t> kUnits[] = {
      {'h', 3600}, {'m', 60}, {'s', 1}};
  constexpr size_t kUnitCount = 3;
  constexpr int64_t kSaturated = kMaxDurationSeconds + 1;
  if (text.empty()) return std::nullopt;
  int64_t total = 0;
  size_t next_unit = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t digits_end = pos;
    while (digits_end < text.size() && absl::ascii_isdigit(text[digits_end])) {
      ++digits_end;
    }
    if (digits_end == pos || digits_end == text.size()) return std::nullopt;
    while (next_unit < kUnitCount &&
           kUnits[next_unit].first != text[digits_end]) {
      ++next_unit;
    }
    if (next_unit == kUnitCount) return std::nullopt;
    int64_t count = 0;
    if (digits_end - pos > 12 ||
        !absl::SimpleAtoi(text.substr(pos, digits_end - pos), &count)) {
      count = kSaturated;
    }
    total = std::min(kSaturated, total + std::min(kSaturated, count) *
                                             kUnits[next_unit].second);
    ++next_unit;
    pos = digits_end + 1;
  }
  return total;
}

// `text` in single quotes, shortened if long.
std::string Quote(absl::string_view text) {
  if (text.size() > kMaxQuotedValueLength) {
    return absl::StrCat("'", text.substr(0, kMaxQuotedValueLength), "...'");
  }
  return absl::StrCat("'", text, "'");
}

// `text` as a YAML scalar that reads back as exactly `text`: plain where that
// is unambiguous, double-quoted with escapes otherwise.
std::string YamlString(absl::string_view text) {
  auto plain_char = [](char c) {
    return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '/' ||
           c == '-';
  };
  if (!text.empty() && text[0] != '-' &&
      std::all_of(text.begin(), text.end(), plain_char) && text != "null" &&
      text != "Null" && text != "NULL") {
    return std::string(text);
  }
  std::string quoted = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      absl::StrAppend(&quoted, "\\", std::string(1, c));
    } else if (c == '\n') {
      quoted += "\\n";
    } else if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppendFormat(&quoted, "\\x%02x", byte);
    } else {
      quoted += c;
    }
  }
  quoted += "\"";
  return quoted;
}

// ---------------------------------------------------------------------------
// Problems found in one spec.

// Every problem found so far, and the field paths they cover: validation does
// not check again a field whose value could not be read, nor anything under
// it, so each mistake is reported once.
class Problems {
 public:
  void Add(absl::string_view path, absl::string_view reason) {
    lines_.push_back(absl::StrCat(path, ": ", reason));
    reported_paths_.insert(std::string(path));
  }

  // True if `path`, or a section holding it, has been reported.
  bool Covers(absl::string_view path) const {
    while (true) {
      if (reported_paths_.contains(path)) return true;
      const size_t cut = path.find_last_of(".[");
      if (cut == absl::string_view::npos) return false;
      path = path.substr(0, cut);
    }
  }

  bool empty() const { return lines_.empty(); }

  // INVALID_ARGUMENT listing the problems one per line; OK if there are none.
  absl::Status ToStatus() const {
    if (lines_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(lines_, "\n"));
  }

 private:
  std::vector<std::string> lines_;
  absl::flat_hash_set<std::string> reported_paths_;
};

// ---------------------------------------------------------------------------
// Reading YAML into a JobSpec.

// A quoted scalar ('4', "4", !!str 4) is a string, never a number or boolean.
bool IsQuotedScalar(const YAML::Node& node) {
  return node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str";
}

// What `node` is, for "expected X, got Y".
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "no value";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      return IsQuotedScalar(node)
                 ? absl::StrCat("the quoted string ", Quote(node.Scalar()))
                 : Quote(node.Scalar());
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// [-+]?[0-9]+, the YAML core schema's decimal integer.
bool LooksLikeInteger(absl::string_view text) {
  if (!text.empty() && (text[0] == '-' || text[0] == '+'))
    text.remove_prefix(1);
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, the YAML core schema's
// finite float (integers included).
bool LooksLikeNumber(absl::string_view text) {
  size_t pos = 0;
  auto skip_sign = [&] {
    if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) ++pos;
  };
  auto skip_digits = [&] {
    const size_t start = pos;
    while (pos < text.size() && absl::ascii_isdigit(text[pos])) ++pos;
    return pos - start;
  };
  skip_sign();
  size_t mantissa_digits = skip_digits();
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    mantissa_digits += skip_digits();
  }
  if (mantissa_digits == 0) return false;
  if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    ++pos;
    skip_sign();
    if (skip_digits() == 0) return false;
  }
  return pos == text.size();
}

// Reads YAML mappings into messages, reporting every value of the wrong type
// and every unknown, repeated or missing required key. Values are checked
// for type only; SpecValidator checks what they mean.
class SpecReader {
 public:
  explicit SpecReader(Problems* problems) : problems_(*problems) {}

  // Reads the mapping `node` at `path` ("" for the document) into `message`,
  // which already holds the defaults.
  void ReadMessage(const YAML::Node& node, const std::string& path,
                   Message* message);

 private:
  void ReadField(const YAML::Node& node, const std::string& path,
                 const FieldDescriptor& field, Message* message);
  // Only lists of numbers (optimizer.betas) exist in the spec.
  void ReadNumberList(const YAML::Node& node, const std::string& path,
                      const FieldDescriptor& field, Message* message);
  void ReadDuration(const YAML::Node& node, const std::string& path,
                    const FieldDescriptor& field, Message* message);

  // Each returns nullopt after reporting a value of the wrong type.
  std::optional<int64_t> ReadInteger(const YAML::Node& node,
                                     const std::string& path, int64_t min,
                                     int64_t max);
  std::optional<uint64_t> ReadUnsigned(const YAML::Node& node,
                                       const std::string& path);
  std::optional<double> ReadDouble(const YAML::Node& node,
                                   const std::string& path);
  std::optional<bool> ReadBool(const YAML::Node& node, const std::string& path);
  std::optional<std::string> ReadString(const YAML::Node& node,
                                        const std::string& path);
  std::optional<int> ReadEnum(const YAML::Node& node, const std::string& path,
                              const EnumDescriptor& type);

  Problems& problems_;
};

void SpecReader::ReadMessage(const YAML::Node& node, const std::string& path,
                             Message* message) {
  if (!node.IsMap()) {
    problems_.Add(path.empty() ? kDocumentPath : path,
                  absl::StrCat("expected a mapping, got ", Describe(node)));
    return;
  }
  const Descriptor& type = *message->GetDescriptor();
  absl::flat_hash_set<const FieldDescriptor*> seen_fields;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) {
      problems_.Add(
          path.empty() ? kDocumentPath : path,
          absl::StrCat("keys must be names, got ", Describe(entry.first)));
      continue;
    }
    const std::string key_path = ChildPath(path, entry.first.Scalar());
    const FieldDescriptor* field = type.FindFieldByName(entry.first.Scalar());
    if (field == nullptr) {
      std::vector<std::string> keys;
      for (int i = 0; i < type.field_count(); ++i) {
        keys.push_back(type.field(i)->name());
      }
      problems_.Add(key_path, absl::StrCat("unknown key; expected one of ",
                                           absl::StrJoin(keys, ", ")));
    } else if (!seen_fields.insert(field).second) {
      problems_.Add(key_path, "given more than once");
    } else {
      ReadField(entry.second, key_path, *field, message);
    }
  }
  for (int i = 0; i < type.field_count(); ++i) {
    const std::string field_path = ChildPath(path, type.field(i)->name());
    if (!seen_fields.contains(type.field(i)) && IsRequired(field_path)) {
      problems_.Add(field_path, "required");
    }
  }
}

void SpecReader::ReadField(const YAML::Node& node, const std::string& path,
                           const FieldDescriptor& field, Message* message) {
  const Reflection& reflection = *message->GetReflection();
  if (field.is_repeated()) {
    ReadNumberList(node, path, field, message);
    return;
  }
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (field.message_type() == Duration::descriptor()) {
        ReadDuration(node, path, field, message);
      } else {
        ReadMessage(node, path, reflection.MutableMessage(message, &field));
      }
      return;
    case FieldDescriptor::CPPTYPE_INT32:
      if (auto value =
              ReadInteger(node, path, std::numeric_limits<int32_t>::min(),
                          std::numeric_limits<int32_t>::max())) {
        reflection.SetInt32(message, &field, static_cast<int32_t>(*value));
      }
      return;
    case FieldDescriptor::CPPTYPE_INT64:
      if (auto value =
              ReadInteger(node, path, std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max())) {
        reflection.SetInt64(message, &field, *value);
      }
      return;
    case FieldDescriptor::CPPTYPE_UINT64:
      if (auto value = ReadUnsigned(node, path)) {
        reflection.SetUInt64(message, &field, *value);
      }
      return;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      if (auto value = ReadDouble(node, path)) {
        reflection.SetDouble(message, &field, *value);
      }
      return;
    case FieldDescriptor::CPPTYPE_BOOL:
      if (auto value = ReadBool(node, path)) {
        reflection.SetBool(message, &field, *value);
      }
      return;
    case FieldDescriptor::CPPTYPE_STRING:
      if (auto value = ReadString(node, path)) {
        reflection.SetString(message, &field, *std::move(value));
      }
      return;
    case FieldDescriptor::CPPTYPE_ENUM:
      if (auto value = ReadEnum(node, path, *field.enum_type())) {
        reflection.SetEnumValue(message, &field, *value);
      }
      return;
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_FLOAT:
      break;
  }
  // A field type job.proto does not use; reading it needs code here.
  problems_.Add(path, "this field cannot be set from YAML");
}

void SpecReader::ReadNumberList(const YAML::Node& node, const std::string& path,
                                const FieldDescriptor& field,
                                Message* message) {
  if (field.cpp_type() != FieldDescriptor::CPPTYPE_DOUBLE) {
    problems_.Add(path, "this field cannot be set from YAML");
    return;
  }
  if (!node.IsSequence()) {
    problems_.Add(
        path, absl::StrCat("expected a list of numbers, got ", Describe(node)));
    return;
  }
  std::vector<double> values;
  for (size_t i = 0; i < node.size(); ++i) {
    std::optional<double> value =
        ReadDouble(node[i], absl::StrCat(path, "[", i, "]"));
    // A bad element is reported; the default list stays, so validation does
    // not report the list again.
    if (!value) return;
    values.push_back(*value);
  }
  const Reflection& reflection = *message->GetReflection();
  reflection.ClearField(message, &field);
  for (double value : values) reflection.AddDouble(message, &field, value);
}

void SpecReader::ReadDuration(const YAML::Node& node, const std::string& path,
                              const FieldDescriptor& field, Message* message) {
  std::optional<int64_t> seconds;
  if (node.IsScalar()) seconds = ParseDurationSeconds(node.Scalar());
  if (!seconds) {
    problems_.Add(path, absl::StrCat("expected a duration like 30m, 2h, 90s "
                                     "or 1h30m, got ",
                                     Describe(node)));
    return;
  }
  // Zero and saturated values are left to validation, which words them the
  // same way for specs built in code.
  Message* duration = message->GetReflection()->MutableMessage(message, &field);
  google::protobuf::DynamicCastToGenerated<Duration>(duration)->set_seconds(
      *seconds);
}

std::optional<int64_t> SpecReader::ReadInteger(const YAML::Node& node,
                                               const std::string& path,
                                               int64_t min, int64_t max) {
  if (!node.IsScalar() || IsQuotedScalar(node) ||
      !LooksLikeInteger(node.Scalar())) {
    problems_.Add(path,
                  absl::StrCat("expected an integer, got ", Describe(node)));
    return std::nullopt;
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(node.Scalar(), &value) || value < min || value > max) {
    problems_.Add(path, absl::StrCat(Quote(node.Scalar()),
                                     " does not fit in an integer (", min, "..",
                                     max, ")"));
    return std::nullopt;
  }
  return value;
}

std::optional<uint64_t> SpecReader::ReadUnsigned(const YAML::Node& node,
                                                 const std::string& path) {
  if (!node.IsScalar() || IsQuotedScalar(node) ||
      !LooksLikeInteger(node.Scalar()) || node.Scalar()[0] == '-') {
    problems_.Add(path, absl::StrCat("expected a non-negative integer, got ",
                                     Describe(node)));
    return std::nullopt;
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(node.Scalar(), &value)) {
    problems_.Add(path,
                  absl::StrCat(Quote(node.Scalar()),
                               " does not fit in a non-negative integer (0..",
                               std::numeric_limits<uint64_t>::max(), ")"));
    return std::nullopt;
  }
  return value;
}

std::optional<double> SpecReader::ReadDouble(const YAML::Node& node,
                                             const std::string& path) {
  if (!node.IsScalar() || IsQuotedScalar(node) ||
      !LooksLikeNumber(node.Scalar())) {
    problems_.Add(path,
                  absl::StrCat("expected a number, got ", Describe(node)));
    return std::nullopt;
  }
  double value = 0;
  if (!absl::SimpleAtod(node.Scalar(), &value) || !std::isfinite(value)) {
    problems_.Add(path, absl::StrCat(Quote(node.Scalar()), " is too large"));
    return std::nullopt;
  }
  return value;
}

std::optional<bool> SpecReader::ReadBool(const YAML::Node& node,
                                         const std::string& path) {
  if (node.IsScalar() && !IsQuotedScalar(node)) {
    if (node.Scalar() == "true") return true;
    if (node.Scalar() == "false") return false;
  }
  problems_.Add(path,
                absl::StrCat("expected true or false, got ", Describe(node)));
  return std::nullopt;
}

std::optional<std::string> SpecReader::ReadString(const YAML::Node& node,
                                                  const std::string& path) {
  if (!node.IsScalar()) {
    problems_.Add(path,
                  absl::StrCat("expected a string, got ", Describe(node)));
    return std::nullopt;
  }
  return node.Scalar();
}

std::optional<int> SpecReader::ReadEnum(const YAML::Node& node,
                                        const std::string& path,
                                        const EnumDescriptor& type) {
  for (int i = 0; node.IsScalar() && i < type.value_count(); ++i) {
    const int number = type.value(i)->number();
    if (number != 0 && node.Scalar() == EnumYamlName(type, number)) {
      return number;
    }
  }
  problems_.Add(path, absl::StrCat("expected one of ", EnumChoices(type),
                                   ", got ", Describe(node)));
  return std::nullopt;
}

// The spec every YAML document starts from: the documented defaults.
JobSpec DefaultJobSpec() {
  JobSpec spec;
  spec.set_priority(50);
  spec.mutable_resources()->set_nodes(1);
  spec.mutable_resources()->set_devices_per_node(1);
  spec.mutable_model();
  spec.mutable_parallel()->set_ep(1);
  spec.mutable_parallel()->set_pp(1);
  spec.mutable_parallel()->set_dp(1);
  v1::ScheduleSpec& schedules = *spec.mutable_schedules();
  schedules.set_dispatch_chunk_tokens(0);
  schedules.set_ring_dtp(false);
  schedules.set_sco(false);
  schedules.set_optimizer_offload(v1::OPTIMIZER_OFFLOAD_NONE);
  schedules.set_activation_checkpointing(true);
  v1::OptimizerSpec& optimizer = *spec.mutable_optimizer();
  optimizer.set_kind(v1::OPTIMIZER_KIND_ADAMW);
  optimizer.set_lr(3e-4);
  optimizer.set_weight_decay(0.1);
  optimizer.add_betas(0.9);
  optimizer.add_betas(0.95);
  optimizer.set_warmup_steps(0);
  optimizer.set_grad_clip(1.0);
  spec.mutable_data();
  v1::TrainSpec& train = *spec.mutable_train();
  train.set_checkpoint_every(0);
  train.set_eval_every(0);
  train.set_seed(1);
  train.set_max_restarts(0);
  return spec;
}

// Defaults that depend on other fields, applied after reading.
void ApplyDependentDefaults(JobSpec* spec) {
  v1::OptimizerSpec& optimizer = *spec->mutable_optimizer();
  if (optimizer.kind() == v1::OPTIMIZER_KIND_SKEWADAM &&
      optimizer.expert_momentum() == v1::EXPERT_MOMENTUM_UNSPECIFIED) {
    optimizer.set_expert_momentum(v1::EXPERT_MOMENTUM_FP32);
  }
}

// ---------------------------------------------------------------------------
// Validation: the rules of DESIGN.md section 7 on a complete JobSpec. Each
// check returns whether the field is usable by the rules that relate it to
// other fields, so a bad value is reported once, not again by every rule it
// takes part in.

class SpecValidator {
 public:
  SpecValidator(const JobSpec& spec, Problems* problems)
      : spec_(spec), problems_(*problems) {}

  void Validate() {
    ValidateName();
    InRange("priority", spec_.priority(), 0, kMaxPriority);
    ValidateResourcesAndParallel();
    ValidateModel();
    ValidateSchedules();
    ValidateOptimizer();
    ValidateData();
    ValidateTrain();
  }

 private:
  // False (and silent) if `path` was already reported while reading.
  bool Unreported(absl::string_view path) const {
    return !problems_.Covers(path);
  }

  bool InRange(absl::string_view path, int64_t value, int64_t min, int64_t max,
               absl::string_view note = "") {
    if (!Unreported(path)) return false;
    if (value >= min && value <= max) return true;
    problems_.Add(path,
                  absl::StrCat(value, " is not in ", min, "..", max, note));
    return false;
  }

  bool AtLeast(absl::string_view path, int64_t value, int64_t min,
               absl::string_view note = "") {
    if (!Unreported(path)) return false;
    if (value >= min) return true;
    problems_.Add(path, absl::StrCat(value, " must be at least ", min, note));
    return false;
  }

  // A finite value >= 0.
  void NonNegative(absl::string_view path, double value,
                   absl::string_view note = "") {
    if (Unreported(path) && !(value >= 0 && std::isfinite(value))) {
      problems_.Add(path, absl::StrCat(FormatDouble(value),
                                       " must be a number >= 0", note));
    }
  }

  // A defined enum value other than UNSPECIFIED.
  void KnownEnum(absl::string_view path, int value,
                 const EnumDescriptor& type) {
    if (Unreported(path) && EnumYamlName(type, value).empty()) {
      problems_.Add(path, absl::StrCat("must be one of ", EnumChoices(type)));
    }
  }

  void ValidateName();
  void ValidateResourcesAndParallel();
  void ValidateModel();
  void ValidateSchedules();
  void ValidateOptimizer();
  void ValidateData();
  void ValidateTrain();

  const JobSpec& spec_;
  Problems& problems_;
  // Set by ValidateResourcesAndParallel for the model and data rules.
  bool ep_usable_ = false;
  bool pp_usable_ = false;
  bool dp_usable_ = false;
  // Set by ValidateModel for the data rules.
  bool seq_len_usable_ = false;
};

void SpecValidator::ValidateName() {
  const std::string& name = spec_.name();
  if (!Unreported("name")) return;
  if (name.empty()) {
    problems_.Add("name", "required");
  } else if (name.size() > kMaxNameLength) {
    problems_.Add("name", absl::StrCat(Quote(name), " is ", name.size(),
                                       " characters long; at most ",
                                       kMaxNameLength, " are allowed"));
  } else if (!absl::ascii_islower(name[0])) {
    problems_.Add("name",
                  absl::StrCat(Quote(name), " must start with a letter a-z"));
  } else if (!std::all_of(name.begin(), name.end(), [](char c) {
               return absl::ascii_islower(c) || absl::ascii_isdigit(c) ||
                      c == '-';
             })) {
    problems_.Add("name", absl::StrCat(Quote(name),
                                       " may contain only a-z, 0-9 and '-'"));
  }
}

void SpecValidator::ValidateResourcesAndParallel() {
  const v1::Resources& resources = spec_.resources();
  const v1::ParallelSpec& parallel = spec_.parallel();
  const bool nodes_usable =
      InRange("resources.nodes", resources.nodes(), 1, kMaxNodes);
  const bool devices_usable =
      InRange("resources.devices_per_node", resources.devices_per_node(), 1,
              kMaxDevicesPerNode);
  ep_usable_ = AtLeast("parallel.ep", parallel.ep(), 1);
  pp_usable_ = AtLeast("parallel.pp", parallel.pp(), 1);
  dp_usable_ = AtLeast("parallel.dp", parallel.dp(), 1);
  if (!(nodes_usable && devices_usable && ep_usable_ && pp_usable_ &&
        dp_usable_)) {
    return;
  }
  const int64_t devices =
      int64_t{resources.nodes()} * resources.devices_per_node();
  // Each factor is below 2^31, so the product of three fits in a double
  // exactly enough to compare with a device count of at most 2^16.
  const double ranks =
      double{1} * parallel.ep() * parallel.pp() * parallel.dp();
  if (ranks != static_cast<double>(devices)) {
    problems_.Add(
        "parallel",
        absl::StrCat("ep*pp*dp = ", parallel.ep(), "*", parallel.pp(), "*",
                     parallel.dp(), " = ", FormatDouble(ranks),
                     " does not equal resources nodes*devices_per_node = ",
                     resources.nodes(), "*", resources.devices_per_node(),
                     " = ", devices));
  }
}

void SpecValidator::ValidateModel() {
  const v1::ModelSpec& model = spec_.model();
  const bool layers_usable =
      InRange("model.layers", model.layers(), 1, kMaxLayers);
  const bool d_model_usable =
      InRange("model.d_model", model.d_model(), kMinDModel, kMaxDModel);
  if (AtLeast("model.heads", model.heads(), 1) && d_model_usable) {
    if (model.d_model() % model.heads() != 0) {
      problems_.Add("model.heads",
                    absl::StrCat(model.heads(), " does not divide d_model ",
                                 model.d_model()));
    } else if (model.d_model() / model.heads() % 2 != 0) {
      problems_.Add(
          "model.heads",
          absl::StrCat("head_dim = d_model / heads = ", model.d_model(), " / ",
                       model.heads(), " = ", model.d_model() / model.heads(),
                       " is odd; rotary embedding needs an even head_dim"));
    }
  }
  const bool experts_usable =
      InRange("model.experts", model.experts(), 1, kMaxExperts);
  if (experts_usable) {
    InRange("model.top_k", model.top_k(), 1, model.experts(),
            " (at most model.experts)");
  } else {
    AtLeast("model.top_k", model.top_k(), 1);
  }
  InRange("model.ffn_hidden", model.ffn_hidden(), 1, kMaxFfnHidden);
  InRange("model.vocab", model.vocab(), 2, kMaxVocab,
          " (token ids are stored as uint16 up to vocab 65536, uint32 above)");
  seq_len_usable_ = InRange("model.seq_len", model.seq_len(), 2, kMaxSeqLen);
  const v1::ParallelSpec& parallel = spec_.parallel();
  if (experts_usable && ep_usable_ && model.experts() % parallel.ep() != 0) {
    problems_.Add(
        "model.experts",
        absl::StrCat(model.experts(), " is not divisible by parallel.ep ",
                     parallel.ep(),
                     " (each expert-parallel rank holds "
                     "experts / ep experts)"));
  }
  if (layers_usable && pp_usable_ && model.layers() % parallel.pp() != 0) {
    problems_.Add(
        "model.layers",
        absl::StrCat(model.layers(), " is not divisible by parallel.pp ",
                     parallel.pp(),
                     " (each pipeline stage holds layers / pp "
                     "layers)"));
  }
}

void SpecValidator::ValidateSchedules() {
  const v1::ScheduleSpec& schedules = spec_.schedules();
  AtLeast("schedules.dispatch_chunk_tokens", schedules.dispatch_chunk_tokens(),
          0, " (0 dispatches everything at once)");
  KnownEnum("schedules.optimizer_offload", schedules.optimizer_offload(),
            *v1::OptimizerOffload_descriptor());
  if (schedules.sco() && !schedules.activation_checkpointing() &&
      Unreported("schedules.sco") &&
      Unreported("schedules.activation_checkpointing")) {
    problems_.Add("schedules.activation_checkpointing",
                  "must be true when schedules.sco is true (SCO offloads the "
                  "checkpointed layer inputs)");
  }
}

void SpecValidator::ValidateOptimizer() {
  const v1::OptimizerSpec& optimizer = spec_.optimizer();
  KnownEnum("optimizer.kind", optimizer.kind(),
            *v1::OptimizerKind_descriptor());
  if (Unreported("optimizer.lr") &&
      !(optimizer.lr() > 0 && optimizer.lr() <= kMaxLearningRate)) {
    problems_.Add("optimizer.lr",
                  absl::StrCat(FormatDouble(optimizer.lr()), " is not in (0, ",
                               FormatDouble(kMaxLearningRate), "]"));
  }
  NonNegative("optimizer.weight_decay", optimizer.weight_decay());
  if (Unreported("optimizer.betas")) {
    if (optimizer.betas_size() != 2) {
      problems_.Add("optimizer.betas",
                    absl::StrCat("expected exactly 2 values (beta1, beta2), "
                                 "got ",
                                 optimizer.betas_size()));
    } else {
      for (int i = 0; i < 2; ++i) {
        const double beta = optimizer.betas(i);
        if (!(beta >= 0 && beta < 1)) {
          problems_.Add(absl::StrCat("optimizer.betas[", i, "]"),
                        absl::StrCat(FormatDouble(beta), " is not in [0, 1)"));
        }
      }
    }
  }
  AtLeast("optimizer.warmup_steps", optimizer.warmup_steps(), 0);
  NonNegative("optimizer.grad_clip", optimizer.grad_clip(),
              " (0 disables clipping)");
  const std::string kind =
      EnumYamlName(*v1::OptimizerKind_descriptor(), optimizer.kind());
  if (kind.empty() || !Unreported("optimizer.kind") ||
      !Unreported("optimizer.expert_momentum")) {
    return;
  }
  if (optimizer.kind() == v1::OPTIMIZER_KIND_SKEWADAM) {
    KnownEnum("optimizer.expert_momentum", optimizer.expert_momentum(),
              *v1::ExpertMomentum_descriptor());
  } else if (optimizer.expert_momentum() != v1::EXPERT_MOMENTUM_UNSPECIFIED) {
    problems_.Add("optimizer.expert_momentum",
                  absl::StrCat("applies only to kind skewadam, not ", kind,
                               "; remove it"));
  }
}

void SpecValidator::ValidateData() {
  const v1::DataSpec& data = spec_.data();
  if (Unreported("data.path") && data.path().empty()) {
    problems_.Add("data.path", "required (a prepared shard directory)");
  }
  const int64_t batch_tokens = data.batch_tokens();
  if (!Unreported("data.batch_tokens")) return;
  if (!seq_len_usable_) {
    AtLeast("data.batch_tokens", batch_tokens, 1);
    return;
  }
  const int64_t seq_len = spec_.model().seq_len();
  if (batch_tokens < seq_len) {
    problems_.Add("data.batch_tokens",
                  absl::StrCat(batch_tokens, " is less than model.seq_len ",
                               seq_len, "; a batch holds whole sequences"));
  } else if (batch_tokens % seq_len != 0) {
    problems_.Add("data.batch_tokens", absl::StrCat(batch_tokens,
                                                    " is not a multiple of "
                                                    "model.seq_len ",
                                                    seq_len));
  } else if (dp_usable_ &&
             batch_tokens / seq_len % spec_.parallel().dp() != 0) {
    problems_.Add("data.batch_tokens",
                  absl::StrCat(batch_tokens, " holds ", batch_tokens / seq_len,
                               " sequences, which do not divide evenly among "
                               "parallel.dp ",
                               spec_.parallel().dp(), " data-parallel groups"));
  }
}

void SpecValidator::ValidateTrain() {
  const v1::TrainSpec& train = spec_.train();
  AtLeast("train.steps", train.steps(), 1);
  AtLeast("train.checkpoint_every", train.checkpoint_every(), 0,
          " (0 means no periodic checkpoints)");
  AtLeast("train.eval_every", train.eval_every(), 0, " (0 means no eval)");
  InRange("train.max_restarts", train.max_restarts(), 0, kMaxRestarts);
  if (!train.has_time_limit() || !Unreported("train.time_limit")) return;
  const google::protobuf::Duration& limit = train.time_limit();
  if (limit.nanos() != 0) {
    problems_.Add("train.time_limit", "must be a whole number of seconds");
  } else if (limit.seconds() <= 0) {
    problems_.Add(
        "train.time_limit",
        absl::StrCat("must be longer than zero, got ", limit.seconds(), "s"));
  } else if (limit.seconds() > kMaxDurationSeconds) {
    problems_.Add("train.time_limit",
                  absl::StrCat("must be at most ",
                               FormatDurationSeconds(kMaxDurationSeconds)));
  }
}

// ---------------------------------------------------------------------------
// Rendering.

// The YAML text of singular scalar `field`; "" for an UNSPECIFIED enum, which
// is left out so that the default applies when read back.
std::string RenderScalar(const Message& message, const FieldDescriptor& field) {
  const Reflection& reflection = *message.GetReflection();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(reflection.GetInt32(message, &field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(reflection.GetInt64(message, &field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(reflection.GetUInt32(message, &field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(reflection.GetUInt64(message, &field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return FormatDouble(reflection.GetDouble(message, &field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return FormatDouble(reflection.GetFloat(message, &field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return reflection.GetBool(message, &field) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_STRING:
      return YamlString(reflection.GetString(message, &field));
    case FieldDescriptor::CPPTYPE_ENUM:
      return EnumYamlName(*field.enum_type(),
                          reflection.GetEnumValue(message, &field));
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return "";
}

// Appends `message` as block-style YAML, one field a line in proto order,
// indented two spaces per `depth`.
void RenderMessage(const Message& message, int depth, std::string* yaml) {
  const Descriptor& type = *message.GetDescriptor();
  const Reflection& reflection = *message.GetReflection();
  const std::string indent(2 * depth, ' ');
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& field = *type.field(i);
    const std::string key = absl::StrCat(indent, field.name(), ":");
    if (field.is_repeated()) {
      // Lists are of numbers only (see SpecReader::ReadNumberList).
      std::vector<std::string> values;
      for (int j = 0; j < reflection.FieldSize(message, &field); ++j) {
        values.push_back(
            FormatDouble(reflection.GetRepeatedDouble(message, &field, j)));
      }
      absl::StrAppend(yaml, key, " [", absl::StrJoin(values, ", "), "]\n");
    } else if (field.message_type() == Duration::descriptor()) {
      if (!reflection.HasField(message, &field)) continue;
      const auto& duration =
          static_cast<const Duration&>(reflection.GetMessage(message, &field));
      absl::StrAppend(
          yaml, key, " ",
          FormatDurationSeconds(std::max<int64_t>(0, duration.seconds())),
          "\n");
    } else if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      absl::StrAppend(yaml, key, "\n");
      RenderMessage(reflection.GetMessage(message, &field), depth + 1, yaml);
    } else if (std::string value = RenderScalar(message, field);
               !value.empty()) {
      absl::StrAppend(yaml, key, " ", value, "\n");
    }
  }
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view yaml) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(yaml));
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kDocumentPath, ": YAML syntax error: ", e.msg));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        kDocumentPath, ": YAML syntax error at line ", e.mark.line + 1,
        ", column ", e.mark.column + 1, ": ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(kDocumentPath, ": cannot read YAML: ", e.what()));
  }
  if (documents.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        kDocumentPath, ": expected one YAML document, got ", documents.size()));
  }
  if (documents.empty() || documents[0].IsNull()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kDocumentPath,
                     ": is empty; expected a mapping with at least name, "
                     "model, data and train"));
  }
  if (!documents[0].IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kDocumentPath,
        ": expected a mapping of fields (name: ..., model: ...), got ",
        Describe(documents[0])));
  }
  Problems problems;
  JobSpec spec = DefaultJobSpec();
  try {
    SpecReader(&problems).ReadMessage(documents[0], "", &spec);
  } catch (const std::exception& e) {
    // Reading only walks nodes that exist, so yaml-cpp has nothing to throw;
    // should it anyway, the exception must not leave the library.
    problems.Add(kDocumentPath, absl::StrCat("cannot read YAML: ", e.what()));
    return problems.ToStatus();
  }
  ApplyDependentDefaults(&spec);
  SpecValidator(spec, &problems).Validate();
  if (!problems.empty()) return problems.ToStatus();
  return spec;
}

absl::StatusOr<v1::JobSpec> ReadJobSpecFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return absl::ErrnoToStatus(errno, path);
  std::string contents;
  char buffer[8192];
  size_t read_bytes = 0;
  while ((read_bytes = std::fread(buffer, 1, sizeof(buffer), file)) > 0 &&
         contents.size() <= kMaxSpecFileBytes) {
    contents.append(buffer, read_bytes);
  }
  const int error_number = std::ferror(file) ? errno : 0;
  std::fclose(file);
  if (error_number != 0) return absl::ErrnoToStatus(error_number, path);
  if (contents.size() > kMaxSpecFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": larger than ", kMaxSpecFileBytes, " bytes; not a job spec"));
  }
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(contents);
  if (spec.ok()) return spec;
  // Name the file on every line, as a compiler does.
  std::vector<std::string> lines =
      absl::StrSplit(spec.status().message(), '\n');
  for (std::string& line : lines) line = absl::StrCat(path, ": ", line);
  return absl::Status(spec.status().code(), absl::StrJoin(lines, "\n"));
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  Problems problems;
  SpecValidator(spec, &problems).Validate();
  return problems.ToStatus();
}

std::string JobSpecToYaml(const v1::JobSpec& spec) {
  std::string yaml;
  RenderMessage(spec, 0, &yaml);
  return yaml;
}

}  // namespace plateau
