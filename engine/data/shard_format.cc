#include "engine/data/shard_format.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"

namespace plateau::engine {
namespace {

void StoreLittleEndian(uint64_t value, size_t bytes, uint8_t* out) {
  for (size_t i = 0; i < bytes; ++i)
    out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t LoadLittleEndian(const uint8_t* in, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= uint64_t{in[i]} << (8 * i);
  return value;
}

// Reads typed fields of a JSON object, naming the file and field on error.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string where)
      : object_(object), where_(std::move(where)) {}

  absl::Status GetInt(const char* key, int64_t min_value,
                      int64_t* value) const {
    const nlohmann::json* field = Find(key);
    if (field == nullptr) return Missing(key);
    const bool fits =
        field->is_number_integer() &&
        !(field->is_number_unsigned() &&
          field->get<uint64_t>() >
              static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
    if (!fits || field->get<int64_t>() < min_value) {
      return absl::InvalidArgumentError(absl::StrCat(
          where_, ": field \"", key, "\" must be an integer >= ", min_value,
          ", got ", field->dump()));
    }
    *value = field->get<int64_t>();
    return absl::OkStatus();
  }

  absl::Status GetDouble(const char* key, double* value) const {
    const nlohmann::json* field = Find(key);
    if (field == nullptr) return Missing(key);
    if (!field->is_number()) return WrongType(key, "a number", *field);
    *value = field->get<double>();
    return absl::OkStatus();
  }

  absl::Status GetString(const char* key, std::string* value) const {
    const nlohmann::json* field = Find(key);
    if (field == nullptr) return Missing(key);
    if (!field->is_string()) return WrongType(key, "a string", *field);
    *value = field->get<std::string>();
    return absl::OkStatus();
  }

  const nlohmann::json* Find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }

 private:
  absl::Status Missing(const char* key) const {
    return absl::InvalidArgumentError(
        absl::StrCat(where_, ": missing field \"", key, "\""));
  }
  absl::Status WrongType(const char* key, const char* expected,
                         const nlohmann::json& field) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": field \"", key,
                                                   "\" must be ", expected,
                                                   ", got ", field.dump()));
  }

  const nlohmann::json& object_;
  const std::string where_;
};

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

bool IsSha256Hex(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<ShardEntry> ParseShardEntry(const nlohmann::json& object,
                                           const std::string& where) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " must be an object"));
  }
  const JsonFields fields(object, where);
  ShardEntry shard;
  absl::Status status = fields.GetString("file", &shard.file);
  if (status.ok()) status = fields.GetString("split", &shard.split);
  if (status.ok()) status = fields.GetInt("tokens", 0, &shard.tokens);
  if (status.ok()) status = fields.GetString("sha256", &shard.sha256);
  if (!status.ok()) return status;
  if (!IsPlainFileName(shard.file)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        ": \"file\" must be a file name in the dataset directory, got \"",
        shard.file, "\""));
  }
  if (shard.split != kTrainSplit && shard.split != kValidationSplit) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"split\" must be \"", kTrainSplit, "\" or \"",
                     kValidationSplit, "\", got \"", shard.split, "\""));
  }
  if (!IsSha256Hex(shard.sha256)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": \"sha256\" must be 64 lowercase hex digits, got \"",
        shard.sha256, "\""));
  }
  return shard;
}

}  // namespace

void EncodeShardHeader(const ShardHeader& header, uint8_t* out) {
  std::memcpy(out, kShardMagic, kShardMagicBytes);
  StoreLittleEndian(header.version, 4, out + 8);
  StoreLittleEndian(header.bytes_per_token, 4, out + 12);
  StoreLittleEndian(header.tokens, 8, out + 16);
}

absl::StatusOr<ShardHeader> DecodeShardHeader(const uint8_t* data,
                                              size_t size_bytes,
                                              const std::string& path) {
  if (size_bytes < kShardHeaderBytes) {
    return absl::DataLossError(absl::StrCat(
        "token shard ", path, " is truncated: ", size_bytes,
        " bytes, shorter than the ", kShardHeaderBytes, "-byte header"));
  }
  if (std::memcmp(data, kShardMagic, kShardMagicBytes) != 0) {
    return absl::DataLossError(
        absl::StrCat("token shard ", path, " does not start with the magic \"",
                     kShardMagic, "\": not a token shard"));
  }
  ShardHeader header;
  header.version = static_cast<uint32_t>(LoadLittleEndian(data + 8, 4));
  header.bytes_per_token =
      static_cast<uint32_t>(LoadLittleEndian(data + 12, 4));
  header.tokens = LoadLittleEndian(data + 16, 8);
  return header;
}

uint32_t BytesPerToken(int64_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

std::string TokenDtypeName(uint32_t bytes_per_token) {
  return bytes_per_token == 2 ? "uint16" : "uint32";
}

std::string ShardFileName(const std::string& split, int64_t shard_index) {
  return absl::StrFormat("%s-%05d.bin", split, shard_index);
}

std::string DatasetIndexToJson(const DatasetIndex& index) {
  nlohmann::ordered_json json;
  json["format"] = kIndexFormatName;
  json["version"] = kIndexVersion;
  json["vocab_size"] = index.vocab_size;
  json["dtype"] = index.dtype;
  json["eos_id"] = index.eos_id;
  json["tokenizer"] = index.tokenizer_file;
  json["train_documents"] = index.train_documents;
  json["validation_documents"] = index.validation_documents;
  json["train_tokens"] = index.train_tokens;
  json["validation_tokens"] = index.validation_tokens;
  json["unigram_entropy_nats"] = index.unigram_entropy_nats;
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const ShardEntry& shard : index.shards) {
    nlohmann::ordered_json entry;
    entry["file"] = shard.file;
    entry["split"] = shard.split;
    entry["tokens"] = shard.tokens;
    entry["sha256"] = shard.sha256;
    shards.push_back(std::move(entry));
  }
  json["shards"] = std::move(shards);
  return json.dump(2) + "\n";
}

absl::StatusOr<DatasetIndex> ParseDatasetIndex(const std::string& json_text,
                                               const std::string& path) {
  const nlohmann::json json =
      nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a JSON object"));
  }
  const JsonFields fields(json, path);
  std::string format;
  int64_t version = 0;
  absl::Status status = fields.GetString("format", &format);
  if (status.ok()) status = fields.GetInt("version", 0, &version);
  if (!status.ok()) return status;
  if (format != kIndexFormatName) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": format is \"",
                                                   format, "\", expected \"",
                                                   kIndexFormatName, "\""));
  }
  if (version != kIndexVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": format version ", version,
        " is not supported; this build reads version ", kIndexVersion));
  }
  DatasetIndex index;
  status = fields.GetInt("vocab_size", 1, &index.vocab_size);
  if (status.ok()) status = fields.GetString("dtype", &index.dtype);
  if (status.ok()) status = fields.GetInt("eos_id", -1, &index.eos_id);
  if (status.ok())
    status = fields.GetString("tokenizer", &index.tokenizer_file);
  if (status.ok()) {
    status = fields.GetInt("train_documents", 0, &index.train_documents);
  }
  if (status.ok()) {
    status =
        fields.GetInt("validation_documents", 0, &index.validation_documents);
  }
  if (status.ok())
    status = fields.GetInt("train_tokens", 0, &index.train_tokens);
  if (status.ok()) {
    status = fields.GetInt("validation_tokens", 0, &index.validation_tokens);
  }
  if (status.ok()) {
    status =
        fields.GetDouble("unigram_entropy_nats", &index.unigram_entropy_nats);
  }
  if (!status.ok()) return status;
  if (index.vocab_size > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": vocab_size ", index.vocab_size, " does not fit int32 ids"));
  }
  const std::string expected_dtype =
      TokenDtypeName(BytesPerToken(index.vocab_size));
  if (index.dtype != expected_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": dtype \"", index.dtype, "\" does not match vocab_size ",
        index.vocab_size, " (expected \"", expected_dtype, "\")"));
  }
  if (index.eos_id >= index.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": eos_id ", index.eos_id,
                     " is outside the vocabulary of ", index.vocab_size));
  }
  if (!index.tokenizer_file.empty() && !IsPlainFileName(index.tokenizer_file)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": \"tokenizer\" must be a file name in the dataset "
                     "directory, or empty for none"));
  }
  const nlohmann::json* shards = fields.Find("shards");
  if (shards == nullptr || !shards->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": \"shards\" must be a list"));
  }
  int64_t train_tokens = 0;
  int64_t validation_tokens = 0;
  for (size_t i = 0; i < shards->size(); ++i) {
    absl::StatusOr<ShardEntry> shard =
        ParseShardEntry((*shards)[i], absl::StrCat(path, ": shards[", i, "]"));
    if (!shard.ok()) return shard.status();
    int64_t& split_tokens =
        shard->split == kTrainSplit ? train_tokens : validation_tokens;
    if (shard->tokens > std::numeric_limits<int64_t>::max() - split_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": shard token counts overflow int64"));
    }
    split_tokens += shard->tokens;
    index.shards.push_back(std::move(*shard));
  }
  if (train_tokens != index.train_tokens ||
      validation_tokens != index.validation_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the shards hold ", train_tokens, " train and ",
        validation_tokens, " validation tokens, but train_tokens is ",
        index.train_tokens, " and validation_tokens is ",
        index.validation_tokens));
  }
  return index;
}

absl::StatusOr<DatasetIndex> ReadDatasetIndex(const std::string& directory) {
  const std::string index_path = absl::StrCat(directory, "/", kIndexFileName);
  absl::StatusOr<std::string> index_text = ReadFileToString(index_path);
  if (absl::IsNotFound(index_text.status())) {
    return absl::NotFoundError(
        absl::StrCat("no ", kIndexFileName, " in ", directory,
                     ": not a token dataset (PrepareDataset writes one)"));
  }
  if (!index_text.ok()) return index_text.status();
  return ParseDatasetIndex(*index_text, index_path);
}

}  // namespace plateau::engine
