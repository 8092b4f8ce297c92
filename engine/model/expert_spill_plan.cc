#include "engine/model/expert_spill_plan.h"

#include <algorithm>
#include <numeric>

namespace plateau::engine {

std::vector<ExpertSpill> PlanExpertSpill(
    const std::vector<int64_t>& rank_expert_counts, int ranks,
    int64_t experts) {
  std::vector<ExpertSpill> spills;
  if (ranks < 2) return spills;
  const int64_t local = experts / ranks;
  std::vector<int64_t> expert_load(experts, 0), rank_load(ranks, 0);
  for (int s = 0; s < ranks; ++s) {
    for (int64_t e = 0; e < experts; ++e) {
      expert_load[e] += rank_expert_counts[s * experts + e];
      rank_load[e / local] += rank_expert_counts[s * experts + e];
    }
  }
  const int64_t total =
      std::accumulate(rank_load.begin(), rank_load.end(), int64_t{0});
  const int64_t mean = total / ranks;
  std::vector<bool> lent(experts, false);
  while (true) {
    // Ties go to the lower rank, on every rank alike.
    const int busiest =
        static_cast<int>(std::max_element(rank_load.begin(), rank_load.end()) -
                         rank_load.begin());
    const int idlest =
        static_cast<int>(std::min_element(rank_load.begin(), rank_load.end()) -
                         rank_load.begin());
    if (rank_load[busiest] <= kSpillFactor * static_cast<double>(mean) ||
        busiest == idlest) {
      break;
    }
    int64_t expert = -1;
    for (int64_t e = busiest * local; e < (busiest + 1) * local; ++e) {
      if (!lent[e] && (expert < 0 || expert_load[e] > expert_load[expert])) {
        expert = e;
      }
    }
    if (expert < 0) break;
    lent[expert] = true;
    const int64_t amount =
        std::min({rank_load[busiest] - mean, mean - rank_load[idlest],
                  expert_load[expert]});
    if (amount <= 0) continue;
    // Spread over the sources in proportion to their copies (all of them
    // still the owner's: an expert is lent once); the rounding remainder
    // goes one by one to the sources in rank order.
    ExpertSpill spill;
    spill.expert = expert;
    spill.owner = busiest;
    spill.borrower = idlest;
    spill.copies.assign(ranks, 0);
    int64_t assigned = 0;
    for (int s = 0; s < ranks; ++s) {
      spill.copies[s] = amount * rank_expert_counts[s * experts + expert] /
                        expert_load[expert];
      assigned += spill.copies[s];
    }
    for (int s = 0; assigned < amount; s = (s + 1) % ranks) {
      if (spill.copies[s] < rank_expert_counts[s * experts + expert]) {
        ++spill.copies[s];
        ++assigned;
      }
    }
    rank_load[busiest] -= amount;
    rank_load[idlest] += amount;
    spills.push_back(std::move(spill));
  }
  return spills;
}

std::vector<const ExpertSpill*> SpillsBorrowedBy(
    const std::vector<ExpertSpill>& spills, int rank) {
  std::vector<const ExpertSpill*> borrowed;
  for (const ExpertSpill& spill : spills) {
    if (spill.borrower == rank) borrowed.push_back(&spill);
  }
  std::stable_sort(borrowed.begin(), borrowed.end(),
                   [](const ExpertSpill* a, const ExpertSpill* b) {
                     return a->owner < b->owner;
                   });
  return borrowed;
}

std::vector<int64_t> SpilledCopies(const std::vector<ExpertSpill>& spills,
                                   int ranks, int64_t experts) {
  std::vector<int64_t> spilled(ranks * experts, 0);
  for (const ExpertSpill& spill : spills) {
    for (int s = 0; s < ranks; ++s) {
      spilled[s * experts + spill.expert] = spill.copies[s];
    }
  }
  return spilled;
}

std::vector<int64_t> DispatchListLengths(
    const std::vector<int64_t>& rank_expert_counts,
    const std::vector<ExpertSpill>& spills, int ranks, int64_t experts) {
  const int64_t local = experts / ranks;
  std::vector<int64_t> lengths(ranks * ranks, 0);
  for (int s = 0; s < ranks; ++s) {
    for (int64_t e = 0; e < experts; ++e) {
      lengths[s * ranks + e / local] += rank_expert_counts[s * experts + e];
    }
  }
  for (const ExpertSpill& spill : spills) {
    for (int s = 0; s < ranks; ++s) {
      lengths[s * ranks + spill.owner] -= spill.copies[s];
      lengths[s * ranks + spill.borrower] += spill.copies[s];
    }
  }
  return lengths;
}

}  // namespace plateau::engine
