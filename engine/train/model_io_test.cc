#include "engine/train/model_io.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/model/tiny_model_config.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/parallel/gloo_communicator.h"
#include "engine/train/checkpoint_footprint.h"
#include "gloo/rendezvous/hash_store.h"
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

// Rank 1 sends more than one message's worth, in pieces of every kind (a
// device float32 piece, host bf16 and float32 ones, a device bf16 one)
// whose boundaries fall inside messages, and a message boundary inside a
// piece: rank 0 assembles the whole tensors exactly, and the sender's
// device staging is one message, not all of its pieces.
TEST(GatherWholeTensorsTest, SendsInBoundedMessages) {
  const int64_t long_elements = 2 * kCheckpointChunkElements + 5000;
  const int64_t short_elements = 3001;
  const std::vector<int64_t> long_shape = {long_elements};
  const std::vector<int64_t> short_shape = {short_elements};
  std::vector<float> snapshot_values[2];
  int64_t sender_staging_peak = 0;
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Backend> backend =
          Backend::CreateCpu(1, int64_t{1} << 30);
      auto world =
          GlooCommunicator::Create(store, "world", rank, 2, absl::Seconds(30));
      ASSERT_TRUE(world.ok()) << world.status();
      AccountedAllocator& allocator = backend->allocator();
      auto tensor = [&](MemoryPool pool, int64_t elements, DType dtype) {
        return Tensor::Create(allocator, pool, MemoryComponent::kWeights,
                              {elements}, dtype)
            .value();
      };
      // The values of whole-tensor elements [first, first + count).
      auto fill = [&](Tensor& values, int64_t first) {
        for (int64_t i = 0; i < values.elements(); ++i) {
          if (values.dtype() == DType::kBfloat16) {
            values.bf16()[i] = kernels::FloatToBfloat16(ValueAt(first + i));
          } else {
            values.f32()[i] = ValueAt(first + i);
          }
        }
      };
      // "long": rank 0 holds [0, 700); rank 1 the rest, as a device float32
      // piece to 3,000,000 and a host bf16 piece after it. "short": rank 1,
      // a host float32 half and a device bf16 half.
      const int64_t split = 3'000'000;
      const int64_t half = short_elements / 2;
      std::vector<Tensor> held;
      std::vector<TensorPiece> pieces;
      auto hold = [&](const char* name, const std::vector<int64_t>& shape,
                      MemoryPool pool, DType dtype, int64_t first,
                      int64_t elements) {
        held.push_back(tensor(pool, elements, dtype));
        Tensor& values = held.back();
        fill(values, first);
        TensorPiece piece{name, shape, first, elements};
        piece.pool = pool;
        if (dtype == DType::kBfloat16) {
          piece.bfloat16_data = values.bf16();
        } else {
          piece.data = values.f32();
        }
        pieces.push_back(piece);
      };
      held.reserve(4);
      if (rank == 0) {
        hold("long", long_shape, MemoryPool::kHost, DType::kFloat32, 0, 700);
      } else {
        hold("long", long_shape, MemoryPool::kDevice, DType::kFloat32, 700,
             split - 700);
        hold("long", long_shape, MemoryPool::kHost, DType::kBfloat16, split,
             long_elements - split);
        hold("short", short_shape, MemoryPool::kHost, DType::kFloat32, 0, half);
        hold("short", short_shape, MemoryPool::kDevice, DType::kBfloat16, half,
             short_elements - half);
      }
      allocator.ResetPeaks();
      absl::StatusOr<HostSnapshot> snapshot =
          GatherWholeTensors(pieces, world->get(), backend->ops(), allocator);
      ASSERT_TRUE(snapshot.ok()) << snapshot.status();
      if (rank == 1) {
        EXPECT_TRUE(snapshot->views.empty());
        sender_staging_peak =
            allocator.Usage(MemoryPool::kDevice, MemoryComponent::kStaging)
                .peak_bytes;
        return;
      }
      ASSERT_EQ(snapshot->views.size(), 2u);
      for (int v = 0; v < 2; ++v) {
        const TensorView& view = snapshot->views[v];
        const float* data = static_cast<const float*>(view.data);
        snapshot_values[v].assign(data, data + view.bytes / sizeof(float));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // Sorted by name: "long", then "short".
  ASSERT_EQ(snapshot_values[0].size(), static_cast<size_t>(long_elements));
  ASSERT_EQ(snapshot_values[1].size(), static_cast<size_t>(short_elements));
  for (int v = 0; v < 2; ++v) {
    for (size_t i = 0; i < snapshot_values[v].size(); ++i) {
      ASSERT_EQ(snapshot_values[v][i], ValueAt(static_cast<int64_t>(i)))
          << (v == 0 ? "long" : "short") << " element " << i;
    }
  }
  // One message of staging (and the piece list's few bytes before it).
  EXPECT_LE(sender_staging_peak, kCheckpointChunkElements * kFloatBytes);
  EXPECT_GE(sender_staging_peak, kCheckpointChunkElements * kFloatBytes / 2);
}

// What each rank of an ep2 x dp2 x pp2 run sends to a checkpoint
// (CheckpointWeightPieces, from the model or from an offloaded optimizer's
// masters, with float32 or bf16-stored weights) is what the planner counts
// for it (CheckpointWeightElements), and all ranks together send every
// element of every weight exactly once.
TEST(CheckpointWeightPiecesTest, MatchThePlannersCountRankByRank) {
  for (const bool offloaded : {false, true}) {
    for (const bool bf16_stored : {false, true}) {
      if (bf16_stored && !offloaded) continue;
      SCOPED_TRACE(absl::StrCat(offloaded ? "offloaded" : "on the device",
                                bf16_stored ? ", bf16 storage" : ""));
      ModelConfig config = TinyExpertBiasModelConfig();
      config.matmul_precision = kernels::GemmPrecision::kBf16;
      config.bf16_weight_storage = bf16_stored;
      const int ep = 2, dp = 2, pp = 2;
      int64_t total_sent = 0;
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
            const CheckpointWeights sent =
                CheckpointWeightsOf(ep_index, dp_index, offloaded);
            int64_t elements = 0;
            for (const TensorPiece& piece : CheckpointWeightPieces(
                     **model, sent, (*optimizer)->MasterPieces())) {
              if (!piece.replica) elements += piece.elements;
            }
            EXPECT_EQ(elements, CheckpointWeightElements(layout, sent, owned));
            total_sent += elements;
          }
        }
      }
      int64_t whole = 0;
      const ParameterLayout whole_model(config);
      for (const ParameterInfo& info : whole_model.parameters()) {
        whole += info.elements;
      }
      EXPECT_EQ(total_sent, whole);
    }
  }
}

}  // namespace
}  // namespace plateau::engine
