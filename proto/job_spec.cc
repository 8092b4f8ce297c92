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
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/message.h"
#include "proto/job_spec_internal.h"
#include "yaml-cpp/yaml.h"

// The YAML is the JobSpec proto spelled out: every key is a proto field name,
// sections are sub-messages, and an enum value is its name without the
// enum's prefix, in lower case (OPTIMIZER_KIND_ADAMW is "adamw"). Reading and
// rendering therefore walk the proto descriptor; the rules that go beyond
// types are written out: required keys below, in kRequiredPaths, and ranges
// and relations between fields in SpecValidator (job_spec_validation.cc).

namespace plateau {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::Duration;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using job_spec_internal::EnumChoices;
using job_spec_internal::EnumYamlName;
using job_spec_internal::FormatDouble;
using job_spec_internal::FormatDurationSeconds;
using job_spec_internal::kMaxDurationSeconds;
using job_spec_internal::Problems;
using job_spec_internal::Quote;
using job_spec_internal::ValidateSpec;
using v1::JobSpec;

// The path of the whole document in messages.
constexpr char kDocumentPath[] = "spec";

// The keys a YAML spec must give; every other key has a default.
constexpr absl::string_view kRequiredPaths[] = {
    "name",          "model.layers", "model.d_model",     "model.heads",
    "model.experts", "model.top_k",  "model.ffn_hidden",  "model.vocab",
    "model.seq_len", "data.path",    "data.batch_tokens", "train.steps",
};

// Spec files are a few hundred bytes; anything this large is the wrong file.
constexpr int64_t kMaxSpecFileBytes = 1 << 20;

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

// The bool field `auto` of a section whose values a planner may choose
// (schedules), or nullptr. Such a section may be written as the scalar
// `auto`, meaning {auto: true}, and its `auto` is rendered only when true.
const FieldDescriptor* AutoFieldOf(const Descriptor& type) {
  const FieldDescriptor* field = type.FindFieldByName("auto");
  if (field == nullptr || field->is_repeated() ||
      field->cpp_type() != FieldDescriptor::CPPTYPE_BOOL) {
    return nullptr;
  }
  return field;
}

// ---------------------------------------------------------------------------
// Spellings only reading and rendering need.

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
  const Descriptor& type = *message->GetDescriptor();
  if (!node.IsMap()) {
    if (const FieldDescriptor* auto_field = AutoFieldOf(type)) {
      if (node.IsScalar() && node.Scalar() == "auto") {
        message->GetReflection()->SetBool(message, auto_field, true);
      } else {
        problems_.Add(path, absl::StrCat("expected a mapping or auto, got ",
                                         Describe(node)));
      }
      return;
    }
    problems_.Add(path.empty() ? kDocumentPath : path,
                  absl::StrCat("expected a mapping, got ", Describe(node)));
    return;
  }
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

// The spec every YAML document starts from: the documented defaults, but
// for the schedules that `schedules: auto` leaves to the planner
// (ApplyDependentDefaults).
JobSpec DefaultJobSpec() {
  JobSpec spec;
  spec.set_priority(50);
  spec.mutable_resources()->set_nodes(1);
  spec.mutable_resources()->set_devices_per_node(1);
  spec.mutable_model();
  spec.mutable_parallel()->set_ep(1);
  spec.mutable_parallel()->set_pp(1);
  spec.mutable_parallel()->set_dp(1);
  spec.mutable_schedules()->set_activation_checkpointing(true);
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
  train.set_micro_batches(1);
  return spec;
}

// Whether `document` (a mapping) gives parallel.dp; a `parallel` that is not
// a mapping counts as giving it (its problems are reported as they are).
bool GivesDp(const YAML::Node& document) {
  const YAML::Node parallel = document["parallel"];
  return parallel.IsDefined() && (!parallel.IsMap() || parallel["dp"]);
}

// Defaults that depend on other fields, applied after reading.
void ApplyDependentDefaults(bool dp_given, JobSpec* spec) {
  // An absent dp takes the devices that ep x pp leave: nodes x
  // devices_per_node / (ep x pp) when that divides; otherwise it stays 1
  // and validation reports the layout.
  const int64_t devices =
      int64_t{spec->resources().nodes()} * spec->resources().devices_per_node();
  const int64_t model_ranks =
      int64_t{spec->parallel().ep()} * spec->parallel().pp();
  const v1::Resources& resources = spec->resources();
  const bool sizes_valid =
      resources.nodes() >= 1 &&
      resources.nodes() <= job_spec_internal::kMaxNodes &&
      resources.devices_per_node() >= 1 &&
      resources.devices_per_node() <= job_spec_internal::kMaxDevicesPerNode;
  if (!dp_given && sizes_valid && model_ranks > 0 &&
      devices % model_ranks == 0) {
    spec->mutable_parallel()->set_dp(
        static_cast<int32_t>(devices / model_ranks));
  }
  // Without auto, an absent optimizer_offload is none. dispatch_chunk_tokens,
  // ring_dtp and sco stay unset: their unset values are their defaults (0,
  // false, false), and leaving them unset keeps a spec built in code without
  // them the same through JobSpecToYaml and back. With auto, every one of the
  // four that is absent stays unset for the planner to choose.
  v1::ScheduleSpec& schedules = *spec->mutable_schedules();
  if (!schedules.auto_() &&
      schedules.optimizer_offload() == v1::OPTIMIZER_OFFLOAD_UNSPECIFIED) {
    schedules.set_optimizer_offload(v1::OPTIMIZER_OFFLOAD_NONE);
  }
  v1::OptimizerSpec& optimizer = *spec->mutable_optimizer();
  // SkewAdam keeps no expert momentum unless asked: on the Brown corpus it
  // trained as well as bf16 momentum and within 2% of fp32's perplexity, for
  // a fifth of fp32's state (docs/BENCHMARKS.md, "Optimizers").
  if (optimizer.kind() == v1::OPTIMIZER_KIND_SKEWADAM &&
      optimizer.expert_momentum() == v1::EXPERT_MOMENTUM_UNSPECIFIED) {
    optimizer.set_expert_momentum(v1::EXPERT_MOMENTUM_NONE);
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
// indented two spaces per `depth`. Unset optional fields and a false `auto`
// are left out, so that each reads back as it was.
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
    } else if ((field.has_presence() &&
                !reflection.HasField(message, &field)) ||
               (&field == AutoFieldOf(type) &&
                !reflection.GetBool(message, &field))) {
      continue;
    } else if (std::string value = RenderScalar(message, field);
               !value.empty()) {
      absl::StrAppend(yaml, key, " ", value, "\n");
    }
  }
}

// True if content follows a document marker ("---" or "..." at the start of
// a line) that itself follows content: the text holds a second document.
bool HasSecondDocument(absl::string_view yaml) {
  bool content = false;
  bool marker_after_content = false;
  for (absl::string_view line : absl::StrSplit(yaml, '\n')) {
    const bool marker =
        (absl::StartsWith(line, "---") || absl::StartsWith(line, "...")) &&
        (line.size() == 3 || line[3] == ' ' || line[3] == '\t' ||
         line[3] == '\r');
    if (marker) {
      marker_after_content = content;
      continue;
    }
    const absl::string_view stripped = absl::StripAsciiWhitespace(line);
    if (stripped.empty() || stripped[0] == '#') continue;
    if (marker_after_content) return true;
    content = true;
  }
  return false;
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view yaml) {
  // yaml-cpp 0.7's LoadAll can loop forever on malformed input after the
  // first document (found by tests/fuzz), so the document markers are
  // counted in the text and only the first document is loaded.
  if (HasSecondDocument(yaml)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kDocumentPath,
                     ": expected one YAML document, found a second ('---' "
                     "or '...' after the first)"));
  }
  std::vector<YAML::Node> documents(1);
  try {
    documents[0] = YAML::Load(std::string(yaml));
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
  ApplyDependentDefaults(GivesDp(documents[0]), &spec);
  ValidateSpec(spec, &problems);
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

std::string JobSpecToYaml(const v1::JobSpec& spec) {
  std::string yaml;
  RenderMessage(spec, 0, &yaml);
  return yaml;
}

std::string SpecEnumName(const google::protobuf::EnumDescriptor& type,
                         int number) {
  return EnumYamlName(type, number);
}

std::string PrecisionDescription(absl::string_view precision,
                                 bool bf16_weight_storage,
                                 bool bf16_gradients) {
  return absl::StrCat(
      precision,
      bf16_weight_storage ? ", product weights and embedding stored in bf16 "
                            "(float32 masters on the host)"
                          : "",
      bf16_gradients ? ", their gradients accumulated in bf16" : "");
}

}  // namespace plateau
