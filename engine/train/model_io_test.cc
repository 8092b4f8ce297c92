#include "engine/train/model_io.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/model/tiny_model_config.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/train/checkpoint_footprint.h"
#include "gtest/gtest.h"
#include "kernels/tiered_update.h"

namespace plateau::engine {
namespace {

// Element i of the test's whole tensors: exact in bf16, so that a bf16
// piece holds it unrounded.
float ValueAt(int64_t i) {
  return kernels::Bfloat16ToFloat(
      kernels::FloatToBfloat16(static_cast<float>(i % 4099) - 2049.0f));
}

// Pieces of every kind (a device float32 piece, host bf16 and float32
// ones, a device bf16 one, a replica) are copied exactly into one host
// buffer of the `snapshot` component, replicas left out, in order.
TEST(SnapshotShardTest, CopiesEveryKindOfPieceIntoOneHostBuffer) {
  std::unique_ptr<Backend> backend = Backend::CreateCpu(1, int64_t{1} << 30);
  AccountedAllocator& allocator = backend->allocator();
  const std::vector<int64_t> shape = {5000};
  std::vector<Tensor> held;
  held.reserve(5);
  auto hold = [&](MemoryPool pool, DType dtype, int64_t first, int64_t elements,
                  bool replica) {
    held.push_back(Tensor::Create(allocator, pool, MemoryComponent::kWeights,
                                  {elements}, dtype)
                       .value());
    Tensor& values = held.back();
    for (int64_t i = 0; i < elements; ++i) {
      if (dtype == DType::kBfloat16) {
        values.bf16()[i] = kernels::FloatToBfloat16(ValueAt(first + i));
      } else {
        values.f32()[i] = ValueAt(first + i);
      }
    }
    TensorPiece piece{"w", shape, first, elements};
    piece.pool = pool;
    piece.replica = replica;
    if (dtype == DType::kBfloat16) {
      piece.bfloat16_data = values.bf16();
    } else {
      piece.data = values.f32();
    }
    return piece;
  };
  const std::vector<TensorPiece> weights = {
      hold(MemoryPool::kDevice, DType::kFloat32, 0, 1000, false),
      hold(MemoryPool::kHost, DType::kBfloat16, 1000, 1500, false),
      hold(MemoryPool::kDevice, DType::kFloat32, 2500, 100, true)};
  const std::vector<TensorPiece> state = {
      hold(MemoryPool::kHost, DType::kFloat32, 2500, 1200, false),
      hold(MemoryPool::kDevice, DType::kBfloat16, 3700, 1300, false)};
  absl::StatusOr<ShardSnapshot> snapshot =
      SnapshotShard(weights, state, backend->ops(), allocator);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(allocator.Usage(MemoryPool::kHost, MemoryComponent::kSnapshot)
                .current_bytes,
            5000 * kFloatBytes);
  ASSERT_EQ(snapshot->contents.weights.size(), 2u);
  ASSERT_EQ(snapshot->contents.optimizer_state.size(), 2u);
  for (const std::vector<ChunkView>* chunks :
       {&snapshot->contents.weights, &snapshot->contents.optimizer_state}) {
    for (const ChunkView& chunk : *chunks) {
      EXPECT_EQ(chunk.shape, shape);
      for (int64_t i = 0; i < chunk.elements; ++i) {
        ASSERT_EQ(chunk.data[i], ValueAt(chunk.begin + i))
            << "element " << chunk.begin + i;
      }
    }
  }
  EXPECT_EQ(snapshot->contents.weights[1].data,
            snapshot->contents.weights[0].data + 1000);
}

// What each rank of an ep2 x dp2 x pp2 run writes to a checkpoint (the
// weights of its shards, from the model or from an offloaded optimizer's
// masters, with float32 or bf16-stored weights) is what the planner counts
// for it (OwnedWeightElements); the masters are the trained owned parts;
// and all ranks together write every element of every weight exactly once.
TEST(OwnedWeightPiecesTest, EveryElementOnceAndAsThePlannerCounts) {
  for (const bool offloaded : {false, true}) {
    for (const bool bf16_stored : {false, true}) {
      if (bf16_stored && !offloaded) continue;
      SCOPED_TRACE(absl::StrCat(offloaded ? "offloaded" : "on the device",
                                bf16_stored ? ", bf16 storage" : ""));
      ModelConfig config = TinyExpertBiasModelConfig();
      config.matmul_precision = kernels::GemmPrecision::kBf16;
      config.bf16_weight_storage = bf16_stored;
      const int ep = 2, dp = 2, pp = 2;
      // name -> the [begin, end) ranges written, over all ranks.
      std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> written;
      for (int pp_index = 0; pp_index < pp; ++pp_index) {
        for (int ep_index = 0; ep_index < ep; ++ep_index) {
          for (int dp_index = 0; dp_index < dp; ++dp_index) {
            SCOPED_TRACE(absl::StrCat("pp ", pp_index, " ep ", ep_index, " dp ",
                                      dp_index));
            std::unique_ptr<Backend> backend =
                Backend::CreateCpu(1, int64_t{256} << 20);
            const ModelShard shard =
                ModelShard::ForRank(config, pp_index, pp, ep_index, ep, dp);
            auto model = Model::Create(config, shard, &backend->ops(),
                                       &backend->allocator());
            ASSERT_TRUE(model.ok()) << model.status();
            const ParameterLayout& layout = (*model)->layout();
            // The batch group is ep x dp ranks, in that order.
            const std::vector<OwnedRange> owned = OwnedRangesOf(ZeroRegionsOf(
                layout, ep * dp, ep_index * dp + dp_index, dp, dp_index));
            AdamWSettings settings;
            settings.offload =
                offloaded ? OptimizerOffload::kStream : OptimizerOffload::kNone;
            auto optimizer = AdamWOptimizer::Create(
                settings, &layout, owned, (*model)->weight_buffers(),
                (*model)->gradient_buffers(), &backend->ops(),
                &backend->allocator());
            ASSERT_TRUE(optimizer.ok()) << optimizer.status();
            std::vector<TensorPiece> pieces;
            if (offloaded) {
              pieces = (*optimizer)->MasterPieces();
              int64_t masters = 0;
              for (const TensorPiece& piece : pieces) masters += piece.elements;
              int64_t trained = 0;
              for (const TensorPiece& piece :
                   OwnedWeightPieces(**model, owned, /*trained=*/true,
                                     /*untrained=*/false)) {
                trained += piece.elements;
              }
              EXPECT_EQ(masters, trained);
            }
            for (TensorPiece& piece :
                 OwnedWeightPieces(**model, owned, /*trained=*/!offloaded,
                                   /*untrained=*/true)) {
              pieces.push_back(std::move(piece));
            }
            int64_t elements = 0;
            for (const TensorPiece& piece : pieces) {
              elements += piece.elements;
              written[piece.name].push_back(
                  {piece.offset, piece.offset + piece.elements});
            }
            EXPECT_EQ(elements, OwnedWeightElements(layout, owned));
          }
        }
      }
      const ParameterLayout whole_model(config);
      ASSERT_EQ(written.size(), whole_model.parameters().size());
      for (const ParameterInfo& info : whole_model.parameters()) {
        std::vector<std::pair<int64_t, int64_t>>& ranges = written[info.name];
        std::sort(ranges.begin(), ranges.end());
        int64_t next = 0;
        for (const auto& [begin, end] : ranges) {
          EXPECT_EQ(begin, next) << info.name;
          next = end;
        }
        EXPECT_EQ(next, info.elements) << info.name;
      }
    }
  }
}

}  // namespace
}  // namespace plateau::engine
