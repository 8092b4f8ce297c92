#include "engine/model/expert_spill.h"

#include <algorithm>
#include <numeric>

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
absl::Status ExchangeMatrices(const LayerContext& context,
                              const std::vector<int64_t>& lent,
                              const std::vector<int64_t>& sent,
                              const std::vector<int64_t>& received,
                              const float* own, float* out) {
  const int64_t matrix = MatrixElements(*context.config);
  const int64_t matrix_bytes = matrix * static_cast<int64_t>(sizeof(float));
  ASSIGN_OR_RETURN(Tensor packed,
                   context.Allocate(ExpertMatricesBuffer(
                       *context.config, static_cast<int64_t>(lent.size()))));
  for (size_t i = 0; i < lent.size(); ++i) {
    context.ops->Copy(matrix, own + lent[i] * matrix,
                      packed.f32() + static_cast<int64_t>(i) * matrix);
  }
  std::vector<int64_t> send_bytes, receive_bytes;
  for (size_t peer = 0; peer < sent.size(); ++peer) {
    send_bytes.push_back(sent[peer] * matrix_bytes);
    receive_bytes.push_back(received[peer] * matrix_bytes);
  }
  return context.groups.experts->AllToAllV(packed.f32(), send_bytes, out,
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

absl::StatusOr<BorrowedExperts> AllocateBorrowed(
    const LayerContext& context, const std::vector<ExpertSpill>& spills) {
  const ModelConfig& config = *context.config;
  const int64_t borrowed = static_cast<int64_t>(
      SpillsBorrowedBy(spills, context.groups.experts->rank()).size());
  const BufferSpec matrices = ExpertMatricesBuffer(config, borrowed);
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
  ASSIGN_OR_RETURN(BorrowedExperts borrowed, AllocateBorrowed(context, spills));
  std::vector<int64_t> lent, to_each;
  LentExperts(context, spills, &lent, &to_each);
  const std::vector<int64_t> from_each = BorrowedFromEach(context, spills);
  RETURN_IF_ERROR(ExchangeMatrices(context, lent, to_each, from_each,
                                   own.w1.f32, borrowed.w1.f32()));
  RETURN_IF_ERROR(ExchangeMatrices(context, lent, to_each, from_each,
                                   own.w3.f32, borrowed.w3.f32()));
  RETURN_IF_ERROR(ExchangeMatrices(context, lent, to_each, from_each,
                                   own.w2.f32, borrowed.w2.f32()));
  return borrowed;
}

absl::StatusOr<BorrowedExperts> ZeroBorrowedGradients(
    const LayerContext& context, const std::vector<ExpertSpill>& spills) {
  if (spills.empty()) return BorrowedExperts();
  ASSIGN_OR_RETURN(BorrowedExperts gradients,
                   AllocateBorrowed(context, spills));
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
                   context.Allocate(ExpertMatricesBuffer(
                       *context.config, static_cast<int64_t>(lent.size()))));
  for (const auto& [borrowed, mine] :
       {std::pair<Tensor*, float*>{&gradients.w1, own.w1},
        std::pair<Tensor*, float*>{&gradients.w3, own.w3},
        std::pair<Tensor*, float*>{&gradients.w2, own.w2}}) {
    RETURN_IF_ERROR(ExchangeMatrices(context, in_order, from_each, to_each,
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
