#include "engine/data/corpus.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file_util.h"
#include "engine/data/compressed_file.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

namespace fs = std::filesystem;

// Plain English has the odd "and/or"; tagged text has a tag on every token.
constexpr double kMinTaggedTokenFraction = 0.95;
constexpr char kWhitespace[] = " \t\r\n\v\f";

bool IsTagChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         std::strchr("$'()*+,-.:`", c) != nullptr;
}

// If `token` is `word/tag` (cut at the last '/'), stores the word in *word
// and returns true.
bool SplitTaggedToken(absl::string_view token, absl::string_view* word) {
  const size_t slash = token.rfind('/');
  if (slash == absl::string_view::npos || slash == 0 ||
      slash + 1 == token.size()) {
    return false;
  }
  for (char c : token.substr(slash + 1)) {
    if (!IsTagChar(c)) return false;
  }
  *word = token.substr(0, slash);
  return true;
}

// Byte offset of the first byte that is not part of well-formed UTF-8
// (no overlong forms, surrogates or code points above U+10FFFF), or -1.
int64_t FirstInvalidUtf8Offset(absl::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  size_t i = 0;
  while (i < size) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length;
    unsigned char min_second = 0x80, max_second = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) min_second = 0xa0;  // overlong
      if (lead == 0xed) max_second = 0x9f;  // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) min_second = 0x90;  // overlong
      if (lead == 0xf4) max_second = 0x8f;  // above U+10FFFF
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + length > size) return static_cast<int64_t>(i);
    if (bytes[i + 1] < min_second || bytes[i + 1] > max_second) {
      return static_cast<int64_t>(i);
    }
    for (size_t k = 2; k < length; ++k) {
      if ((bytes[i + k] & 0xc0) != 0x80) return static_cast<int64_t>(i);
    }
    i += length;
  }
  return -1;
}

bool IsSkippedName(const std::string& name) {
  return name.empty() || name[0] == '.' || name == "README" ||
         absl::StartsWith(name, "README.") || name == "CONTENTS" ||
         name == "cats.txt" || absl::EndsWith(name, ".json") ||
         absl::EndsWith(name, ".pickle");
}

// Paths of the candidate files under `directory`, sorted by relative path.
absl::StatusOr<std::vector<std::string>> ListCandidateFiles(
    const std::string& directory) {
  std::error_code error;
  const fs::file_status status = fs::status(directory, error);
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(
        absl::StrCat("corpus directory ", directory, " does not exist"));
  }
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot read corpus directory ", directory, ": ", error.message()));
  }
  if (status.type() != fs::file_type::directory) {
    return absl::InvalidArgumentError(
        absl::StrCat("corpus path ", directory, " is not a directory"));
  }
  std::vector<std::pair<std::string, std::string>> relative_and_full;
  fs::recursive_directory_iterator it(directory, error);
  const fs::recursive_directory_iterator end;
  for (; !error && it != end; it.increment(error)) {
    const fs::path& path = it->path();
    const std::string name = path.filename().string();
    std::error_code entry_error;  // e.g. a dangling link: not a candidate
    if (IsSkippedName(name)) {
      if (it->is_directory(entry_error)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(entry_error)) continue;
    relative_and_full.emplace_back(
        path.lexically_relative(directory).generic_string(), path.string());
  }
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot list corpus directory ", directory, ": ", error.message()));
  }
  std::sort(relative_and_full.begin(), relative_and_full.end());
  std::vector<std::string> paths;
  paths.reserve(relative_and_full.size());
  for (auto& [relative, full] : relative_and_full) {
    paths.push_back(std::move(full));
  }
  return paths;
}

bool IsJsonLinesFile(const std::string& path) {
  return absl::EndsWith(path, ".jsonl") || absl::EndsWith(path, ".jsonl.gz") ||
         absl::EndsWith(path, ".jsonl.zst");
}

// A plain or tagged file as its one document; nullopt when it is skipped
// (not of either format, or no text in it).
absl::StatusOr<std::optional<std::string>> ReadWholeFileDocument(
    const std::string& path) {
  absl::StatusOr<std::string> content = ReadFileToString(path);
  if (!content.ok()) return content.status();
  const bool tagged = LooksLikeTaggedText(*content);
  if (!tagged && !absl::EndsWith(path, ".txt")) return std::nullopt;
  if (const int64_t offset = FirstInvalidUtf8Offset(*content); offset >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corpus file ", path, " is not UTF-8 (invalid byte at offset ", offset,
        "); convert it, e.g. with iconv -t UTF-8"));
  }
  std::string document =
      tagged ? TaggedTextToDocument(*content) : std::move(*content);
  if (absl::StripAsciiWhitespace(document).empty()) return std::nullopt;
  return document;
}

}  // namespace

bool LooksLikeTaggedText(const std::string& content) {
  int64_t tokens = 0;
  int64_t tagged_tokens = 0;
  absl::string_view word;
  for (absl::string_view token : absl::StrSplit(
           content, absl::ByAnyChar(kWhitespace), absl::SkipEmpty())) {
    ++tokens;
    if (SplitTaggedToken(token, &word)) ++tagged_tokens;
  }
  return tokens > 0 && tagged_tokens >= kMinTaggedTokenFraction * tokens;
}

std::string TaggedTextToDocument(const std::string& content) {
  std::vector<std::string> paragraphs;
  std::string paragraph;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    bool blank = true;
    for (absl::string_view token : absl::StrSplit(
             line, absl::ByAnyChar(kWhitespace), absl::SkipEmpty())) {
      blank = false;
      absl::string_view word = token;
      SplitTaggedToken(token, &word);  // untagged tokens are kept whole
      if (word == "``" || word == "''") word = "\"";
      if (!paragraph.empty()) paragraph.push_back(' ');
      paragraph.append(word.data(), word.size());
    }
    if (blank && !paragraph.empty()) {
      paragraphs.push_back(std::move(paragraph));
      paragraph.clear();
    }
  }
  if (!paragraph.empty()) paragraphs.push_back(std::move(paragraph));
  return absl::StrJoin(paragraphs, "\n");
}

absl::StatusOr<std::unique_ptr<CorpusReader>> CorpusReader::Open(
    const std::string& directory) {
  absl::StatusOr<std::vector<std::string>> paths =
      ListCandidateFiles(directory);
  if (!paths.ok()) return paths.status();
  return std::unique_ptr<CorpusReader>(
      new CorpusReader(directory, *std::move(paths)));
}

CorpusReader::CorpusReader(std::string directory,
                           std::vector<std::string> paths)
    : directory_(std::move(directory)), paths_(std::move(paths)) {}

CorpusReader::~CorpusReader() = default;

absl::StatusOr<bool> CorpusReader::Next(std::string* document) {
  while (true) {
    if (json_lines_ != nullptr) {
      absl::StatusOr<bool> found = NextJsonLinesDocument(document);
      if (!found.ok() || *found) return found;
      if (file_documents_ == 0) ++skipped_files_;
      json_lines_.reset();
      continue;
    }
    if (next_path_ == paths_.size()) {
      if (documents_ > 0) return false;
      return absl::InvalidArgumentError(absl::StrCat(
          "corpus directory ", directory_, " has no usable file (",
          paths_.size(), " candidate files, ", skipped_files_,
          " skipped): expected Brown-format tagged files (word/tag tokens), "
          "plain-text *.txt files or JSON Lines files (*.jsonl, *.jsonl.gz, "
          "*.jsonl.zst) with some text in them"));
    }
    const std::string& path = paths_[next_path_++];
    if (IsJsonLinesFile(path)) {
      absl::StatusOr<std::unique_ptr<DecompressedLines>> lines =
          DecompressedLines::Open(path);
      if (!lines.ok()) return lines.status();
      json_lines_ = *std::move(lines);
      json_lines_path_ = path;
      line_number_ = 0;
      file_documents_ = 0;
      continue;
    }
    absl::StatusOr<std::optional<std::string>> whole =
        ReadWholeFileDocument(path);
    if (!whole.ok()) return whole.status();
    if (!whole->has_value()) {
      ++skipped_files_;
      continue;
    }
    *document = **std::move(whole);
    ++documents_;
    return true;
  }
}

absl::StatusOr<bool> CorpusReader::NextJsonLinesDocument(
    std::string* document) {
  std::string line;
  while (true) {
    absl::StatusOr<bool> more = json_lines_->Next(&line);
    if (!more.ok() || !*more) return more;
    ++line_number_;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const nlohmann::json record =
        nlohmann::json::parse(line.begin(), line.end(), /*cb=*/nullptr,
                              /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("corpus file ", json_lines_path_, " line ", line_number_,
                       " is not a JSON object (in UTF-8)"));
    }
    const auto text = record.find("text");
    if (text == record.end() || !text->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("corpus file ", json_lines_path_, " line ", line_number_,
                       " has no string field \"text\""));
    }
    *document = text->get<std::string>();
    if (absl::StripAsciiWhitespace(*document).empty()) continue;
    ++file_documents_;
    ++documents_;
    return true;
  }
}

}  // namespace plateau::engine
