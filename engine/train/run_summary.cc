#include "engine/train/run_summary.h"

#include <utility>

#include "absl/status/status.h"
#include "common/file_util.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

nlohmann::json MemoryJson(const AccountedAllocator& allocator) {
  nlohmann::json memory;
  memory["device_capacity_bytes"] =
      allocator.capacity_bytes(MemoryPool::kDevice);
  for (int p = 0; p < kMemoryPoolCount; ++p) {
    const auto pool = static_cast<MemoryPool>(p);
    const MemoryUsage total = allocator.PoolUsage(pool);
    nlohmann::json pool_json;
    pool_json["peak_bytes"] = total.peak_bytes;
    pool_json["final_bytes"] = total.current_bytes;
    for (int c = 0; c < kMemoryComponentCount; ++c) {
      const auto component = static_cast<MemoryComponent>(c);
      const MemoryUsage usage = allocator.Usage(pool, component);
      pool_json["components"][MemoryComponentName(component)] = {
          {"peak_bytes", usage.peak_bytes},
          {"final_bytes", usage.current_bytes}};
    }
    memory["pools"][MemoryPoolName(pool)] = pool_json;
  }
  return memory;
}

nlohmann::json StatusJson(const absl::Status& status) {
  return {{"ok", status.ok()},
          {"code", absl::StatusCodeToString(status.code())},
          {"message", std::string(status.message())}};
}

}  // namespace

std::string RunSummaryToJson(const RunSummary& summary) {
  nlohmann::json json;
  json["command"] = summary.command;
  json["status"] = StatusJson(summary.status);
  if (summary.training != nullptr) {
    const TrainingRecord& record = *summary.training;
    nlohmann::json record_json =
        nlohmann::json::parse(TrainingRecordToJson(record));
    json["steps"] = std::move(record_json["steps"]);
    json["losses"] = nlohmann::json::array();
    for (const StepRecord& step : record.steps) {
      json["losses"].push_back(step.loss);
    }
    json["validation"] = std::move(record_json["validations"]);
    json["expert_tokens"] = std::move(record_json["expert_tokens"]);
    json["checkpoint_writes"] = std::move(record_json["checkpoint_writes"]);
    json["tokens_per_second"] = record.TokensPerSecond();
  }
  if (summary.evaluation.has_value()) {
    const EvaluationResult& result = *summary.evaluation;
    json["evaluation"] = {{"cross_entropy", result.cross_entropy},
                          {"perplexity", result.perplexity},
                          {"windows", result.windows},
                          {"predicted_tokens", result.predicted_tokens}};
  }
  if (summary.allocator != nullptr) {
    json["memory"] = MemoryJson(*summary.allocator);
  }
  json["optimizer_state_bytes"] = summary.optimizer_state_bytes;
  if (!summary.checkpoint.empty()) json["checkpoint"] = summary.checkpoint;
  return json.dump(2);
}

absl::Status WriteRunSummary(const std::string& path,
                             const RunSummary& summary) {
  const std::string json = RunSummaryToJson(summary) + "\n";
  return WriteFileAtomically(path, {absl::string_view(json)});
}

absl::Status ReplaceRunSummaryStatus(const std::string& path,
                                     const RunSummary& summary) {
  absl::StatusOr<std::string> existing = ReadFileToString(path);
  if (existing.ok()) {
    nlohmann::json json =
        nlohmann::json::parse(*existing, nullptr, /*allow_exceptions=*/false);
    if (json.is_object()) {
      json["status"] = StatusJson(summary.status);
      const std::string text = json.dump(2) + "\n";
      return WriteFileAtomically(path, {absl::string_view(text)});
    }
  }
  return WriteRunSummary(path, summary);
}

}  // namespace plateau::engine
