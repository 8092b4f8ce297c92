// A file of token ids written by another pipeline, read in place (mapped):
//   - numpy's .npy (np.save): a 1-D array of little-endian uint16 ('<u2') or
//     uint32 ('<u4'), its dtype and length taken from the header;
//   - a raw array (nanoGPT's train.bin, OLMo's memmapped .npy files): the
//     ids and nothing else, of a width the caller states.
// A file that starts with numpy's magic is read as .npy whatever its name.
// Errors name the file and what is wrong with it; nothing is read past the
// ids the file holds.
#ifndef PLATEAU_ENGINE_DATA_TOKEN_ARRAY_H_
#define PLATEAU_ENGINE_DATA_TOKEN_ARRAY_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace plateau {
class MappedFile;  // common/file_util.h
}  // namespace plateau

namespace plateau::engine {

class TokenArray {
 public:
  // stated_bytes_per_token: 2 or 4 for a raw file, 0 to require a .npy
  // header. A .npy file whose header disagrees with a stated width is an
  // error.
  static absl::StatusOr<std::unique_ptr<TokenArray>> Open(
      const std::string& path, uint32_t stated_bytes_per_token);
  ~TokenArray();
  TokenArray(const TokenArray&) = delete;
  TokenArray& operator=(const TokenArray&) = delete;

  const std::string& path() const { return path_; }
  int64_t tokens() const { return tokens_; }
  uint32_t bytes_per_token() const { return bytes_per_token_; }

  // REQUIRES: 0 <= index < tokens().
  uint32_t At(int64_t index) const {
    if (bytes_per_token_ == 2) {
      uint16_t value;
      std::memcpy(&value, ids_ + 2 * index, 2);
      return value;
    }
    uint32_t value;
    std::memcpy(&value, ids_ + 4 * index, 4);
    return value;
  }

  // Gives the mapped pages holding ids before `index` back to the kernel
  // (they are read again if used): a pass that calls this as it goes keeps
  // a bounded part of the file resident, whatever its size.
  void ReleaseBefore(int64_t index) const;

 private:
  TokenArray() = default;

  std::string path_;
  std::unique_ptr<MappedFile> file_;
  const uint8_t* ids_ = nullptr;
  int64_t tokens_ = 0;
  uint32_t bytes_per_token_ = 0;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_TOKEN_ARRAY_H_
