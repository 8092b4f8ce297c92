#include "engine/model/expert_spill.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/moe_footprint.h"

namespace plateau::engine {
namespace {

// The elements of one expert matrix.
int64_t MatrixElements(const ModelConfig& config) {
  return config.ffn_hidden * config.d_model;
}

// One matrix of every expert in `lent` (indices into this rank's own
// experts, grouped by peer in peer order) to the peers, `sent[peer]` of
// them each; `received[peer]` come from each, into `out` in peer order.
// They are packed into a buffer `packed_buffer` names
// (BorrowedWeightsBuffer or BorrowedGradientsBuffer of lent's size), whose
// element type `own` and `out` hold.
absl::Status ExchangeMatrices(const LayerContext& context,
                              const std::vector<int64_t>& lent,
                              const std::vector<int64_t>& sent,
                              const std::vector<int64_t>& received,
                              const BufferSpec& packed_buffer, const void* own,
                              void* out) {
  const int64_t matrix = MatrixElements(*context.config);
  ASSIGN_OR_RETURN(Tensor packed, context.Allocate(packed_buffer));
  for (size_t i = 0; i < lent.size(); ++i) {
    const int64_t from = lent[i] * matrix;
    const int64_t to = static_cast<int64_t>(i) * matrix;
    if (packed.dtype() == DType::kBfloat16) {
      context.ops->CopyBf16(matrix, static_cast<const uint16_t*>(own) + from,
                            packed.bf16() + to);
    } else {
      context.ops->Copy(matrix, static_cast<const float*>(own) + from,
                        packed.f32() + to);
    }
  }
  const int64_t matrix_bytes = matrix * DTypeBytes(packed.dtype());
  std::vector<int64_t> send_bytes, receive_bytes;
  for (size_t peer = 0; peer < sent.size(); ++peer) {
    send_bytes.push_back(sent[peer] * matrix_bytes);
    receive_bytes.push_back(received[peer] * matrix_bytes);
  }
  return context.groups.experts->AllToAllV(packed.data(), send_bytes, out,
                                           receive_bytes);
}

// The experts this rank lends, as indices into its own, grouped by borrower
// in rank order; and how many go to each rank.
void LentExperts(const LayerContext& context,
                 const std::vector<ExpertSpill>& spills,
                 std::vector<int64_t>* lent, std::vector<int64_t>* to_each) {
  const int self = context.groups.experts->rank();
  to_each->assign(context.expert_ranks(), 0);
  for (int borrower = 0; borrower < context.expert_ranks(); ++borrower) {
    for (const ExpertSpill& spill : spills) {
      if (spill.owner != self || spill.borrower != borrower) continue;
      lent->push_back(spill.expert - context.shard.first_expert);
      ++(*to_each)[borrower];
    }
  }
}

// How many experts this rank borrows from each rank.
std::vector<int64_t> BorrowedFromEach(const LayerContext& context,
                                      const std::vector<ExpertSpill>& spills) {
  std::vector<int64_t> from_each(context.expert_ranks(), 0);
  for (const ExpertSpill* spill :
       SpillsBorrowedBy(spills, context.groups.experts->rank())) {
    ++from_each[spill->owner];
  }
  return from_each;
}

// How many experts this rank borrows.
int64_t BorrowedCount(const LayerContext& context,
                      const std::vector<ExpertSpill>& spills) {
  return static_cast<int64_t>(
      SpillsBorrowedBy(spills, context.groups.experts->rank()).size());
}

absl::StatusOr<BorrowedExperts> AllocateBorrowed(const LayerContext& context,
                                                 const BufferSpec& matrices) {
  BorrowedExperts experts;
  ASSIGN_OR_RETURN(experts.w1, context.Allocate(matrices));
  ASSIGN_OR_RETURN(experts.w3, context.Allocate(matrices));
  ASSIGN_OR_RETURN(experts.w2, context.Allocate(matrices));
  return experts;
}

}  // namespace

absl::StatusOr<BorrowedExperts> BorrowExperts(
    const LayerContext& context, const std::vector<ExpertSpill>& spills,
    const ExpertParameters<const float>& own) {
  if (spills.empty()) return BorrowedExperts();
  if (own.w1.element_bytes() != DTypeBytes(ProductInputType(*context.config))) {
    return absl::InternalError(absl::StrCat(
        "PipelinedLLEP: the experts to lend are operands of ",
        own.w1.element_bytes(), "-byte elements, but their products read ",
        DTypeBytes(ProductInputType(*context.config)),
        "-byte ones (under bf16 products Model::LayerWeightsForPass hands "
        "over the stored bf16 weights or the pass's bf16 copy)"));
  }
  const ModelConfig& config = *context.config;
  ASSIGN_OR_RETURN(
      BorrowedExperts borrowed,
      AllocateBorrowed(context, BorrowedWeightsBuffer(
                                    config, BorrowedCount(context, spills))));
  std::vector<int64_t> lent, to_each;
  LentExperts(context, spills, &lent, &to_each);
  const std::vector<int64_t> from_each = BorrowedFromEach(context, spills);
  for (const auto& [mine, copy] :
       {std::pair<LinearOperand, Tensor*>{own.w1, &borrowed.w1},
        std::pair<LinearOperand, Tensor*>{own.w3, &borrowed.w3},
        std::pair<LinearOperand, Tensor*>{own.w2, &borrowed.w2}}) {
    RETURN_IF_ERROR(ExchangeMatrices(
        context, lent, to_each, from_each,
        BorrowedWeightsBuffer(config, static_cast<int64_t>(lent.size())),
        mine.data(), copy->data()));
  }
  return borrowed;
}

absl::StatusOr<BorrowedExperts> ZeroBorrowedGradients(
    const LayerContext& context, const std::vector<ExpertSpill>& spills) {
  if (spills.empty()) return BorrowedExperts();
  ASSIGN_OR_RETURN(
      BorrowedExperts gradients,
      AllocateBorrowed(
          context, BorrowedGradientsBuffer(*context.config,
                                           BorrowedCount(context, spills))));
  for (Tensor* matrix : {&gradients.w1, &gradients.w3, &gradients.w2}) {
    context.ops->Fill(matrix->elements(), 0.0f, matrix->f32());
  }
  return gradients;
}

absl::Status ReturnBorrowedGradients(const LayerContext& context,
                                     const std::vector<ExpertSpill>& spills,
                                     BorrowedExperts gradients,
                                     const ExpertParameters<float>& own) {
  if (spills.empty()) return absl::OkStatus();
  // The borrowed list is grouped by owner, so it goes out as it lies.
  const std::vector<int64_t> from_each = BorrowedFromEach(context, spills);
  std::vector<int64_t> in_order(
      std::accumulate(from_each.begin(), from_each.end(), int64_t{0}));
  std::iota(in_order.begin(), in_order.end(), 0);
  std::vector<int64_t> lent, to_each;
  LentExperts(context, spills, &lent, &to_each);
  const int64_t matrix = MatrixElements(*context.config);
  ASSIGN_OR_RETURN(Tensor returned,
                   context.Allocate(BorrowedGradientsBuffer(
                       *context.config, static_cast<int64_t>(lent.size()))));
  for (const auto& [borrowed, mine] :
       {std::pair<Tensor*, float*>{&gradients.w1, own.w1},
        std::pair<Tensor*, float*>{&gradients.w3, own.w3},
        std::pair<Tensor*, float*>{&gradients.w2, own.w2}}) {
    RETURN_IF_ERROR(ExchangeMatrices(
        context, in_order, from_each, to_each,
        BorrowedGradientsBuffer(*context.config,
                                static_cast<int64_t>(in_order.size())),
        borrowed->f32(), returned.f32()));
    borrowed->Reset();
    for (size_t i = 0; i < lent.size(); ++i) {
      float* target = mine + lent[i] * matrix;
      context.ops->Add(matrix, target,
                       returned.f32() + static_cast<int64_t>(i) * matrix,
                       target);
    }
  }
  return absl::OkStatus();
}

}  // namespace plateau::engine
