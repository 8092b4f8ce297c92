#include "engine/data/random_token_dataset.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/file_util.h"
#include "common/test_files.h"
#include "engine/data/shard_format.h"

namespace plateau::engine::testing {

ShardEntry WriteUint16Shard(const std::string& directory,
                            const std::string& split, int64_t shard_index,
                            const std::vector<uint16_t>& ids) {
  std::string bytes(kShardHeaderBytes + 2 * ids.size(), '\0');
  ShardHeader header;
  header.bytes_per_token = 2;
  header.tokens = ids.size();
  EncodeShardHeader(header, reinterpret_cast<uint8_t*>(bytes.data()));
  std::memcpy(bytes.data() + kShardHeaderBytes, ids.data(), 2 * ids.size());
  ShardEntry entry;
  entry.file = ShardFileName(split, shard_index);
  entry.split = split;
  entry.tokens = static_cast<int64_t>(ids.size());
  entry.sha256 = Sha256Hex(bytes.data(), bytes.size());
  plateau::testing::WriteTestFile(directory + "/" + entry.file, bytes);
  return entry;
}

void WriteRandomTokenDataset(const std::string& directory, int64_t vocab,
                             int64_t train_tokens, int64_t validation_tokens,
                             uint32_t seed) {
  std::mt19937 random(seed);
  auto tokens = [&](int64_t count) {
    std::vector<uint16_t> ids(count);
    for (uint16_t& id : ids) id = static_cast<uint16_t>(random() % vocab);
    return ids;
  };
  DatasetIndex index;
  index.vocab_size = vocab;
  index.dtype = TokenDtypeName(2);
  index.eos_id = 0;
  index.tokenizer_file = "tokenizer.model";
  index.train_documents = 1;
  index.validation_documents = 1;
  index.shards.push_back(
      WriteUint16Shard(directory, kTrainSplit, 0, tokens(train_tokens)));
  index.shards.push_back(WriteUint16Shard(directory, kValidationSplit, 0,
                                          tokens(validation_tokens)));
  index.train_tokens = index.shards[0].tokens;
  index.validation_tokens = index.shards[1].tokens;
  index.unigram_entropy_nats = std::log(static_cast<double>(vocab));
  plateau::testing::WriteTestFile(directory + "/" + kIndexFileName,
                                  DatasetIndexToJson(index));
}

}  // namespace plateau::engine::testing
