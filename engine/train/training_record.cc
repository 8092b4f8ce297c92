#include "engine/train/training_record.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {

double TrainingRecord::TokensPerSecond() const {
  const size_t first = steps.size() > 1 ? 1 : 0;
  double seconds = 0.0;
  int64_t tokens = 0;
  for (size_t i = first; i < steps.size(); ++i) {
    seconds += steps[i].seconds;
    tokens += steps[i].tokens;
  }
  return seconds > 0.0 ? static_cast<double>(tokens) / seconds : 0.0;
}

std::string TrainingRecordToJson(const TrainingRecord& record) {
  nlohmann::json json;
  json["steps"] = nlohmann::json::array();
  for (const StepRecord& step : record.steps) {
    json["steps"].push_back(
        {{"step", step.step},
         {"loss", step.loss},
         {"cross_entropy", step.cross_entropy},
         {"load_balancing", step.load_balancing},
         {"z_loss", step.z_loss},
         {"gradient_norm", step.gradient_norm},
         {"learning_rate", step.learning_rate},
         {"seconds", step.seconds},
         {"tokens", step.tokens},
         {"expert_load_imbalance", step.expert_load_imbalance}});
  }
  json["validations"] = nlohmann::json::array();
  for (const ValidationRecord& validation : record.validations) {
    json["validations"].push_back(
        {{"step", validation.step},
         {"cross_entropy", validation.cross_entropy},
         {"perplexity", validation.perplexity},
         {"predicted_tokens", validation.predicted_tokens}});
  }
  json["expert_tokens"] = record.expert_tokens;
  json["checkpoint_writes"] = nlohmann::json::array();
  for (const CheckpointWriteRecord& write : record.checkpoint_writes) {
    json["checkpoint_writes"].push_back(
        {{"step", write.step},
         {"background", write.background},
         {"stall_seconds", write.stall_seconds},
         {"write_seconds", write.write_seconds},
         {"bytes_written", write.bytes_written},
         {"most_bytes_written", write.most_bytes_written}});
  }
  return json.dump();
}

absl::StatusOr<TrainingRecord> TrainingRecordFromJson(const std::string& text) {
  try {
    const nlohmann::json json = nlohmann::json::parse(text);
    TrainingRecord record;
    for (const nlohmann::json& item : json.at("steps")) {
      StepRecord step;
      step.step = item.at("step").get<int64_t>();
      step.loss = item.at("loss").get<double>();
      step.cross_entropy = item.at("cross_entropy").get<double>();
      step.load_balancing = item.at("load_balancing").get<double>();
      // Records written before the z-loss hold none.
      step.z_loss = item.value("z_loss", 0.0);
      step.gradient_norm = item.at("gradient_norm").get<double>();
      step.learning_rate = item.at("learning_rate").get<double>();
      step.seconds = item.at("seconds").get<double>();
      step.tokens = item.at("tokens").get<int64_t>();
      step.expert_load_imbalance =
          item.at("expert_load_imbalance").get<std::vector<double>>();
      record.steps.push_back(step);
    }
    for (const nlohmann::json& item : json.at("validations")) {
      ValidationRecord validation;
      validation.step = item.at("step").get<int64_t>();
      validation.cross_entropy = item.at("cross_entropy").get<double>();
      validation.perplexity = item.at("perplexity").get<double>();
      validation.predicted_tokens = item.at("predicted_tokens").get<int64_t>();
      record.validations.push_back(validation);
    }
    record.expert_tokens =
        json.at("expert_tokens").get<std::vector<std::vector<int64_t>>>();
    // Records of version-1 checkpoints hold none.
    for (const nlohmann::json& item :
         json.value("checkpoint_writes", nlohmann::json::array())) {
      CheckpointWriteRecord write;
      write.step = item.at("step").get<int64_t>();
      // Records of the first sharded checkpoints hold no write time: those
      // were written blocking, inside the stall.
      write.background = item.value("background", false);
      write.stall_seconds = item.at("stall_seconds").get<double>();
      write.write_seconds = item.value("write_seconds", write.stall_seconds);
      write.bytes_written = item.at("bytes_written").get<int64_t>();
      write.most_bytes_written = item.at("most_bytes_written").get<int64_t>();
      record.checkpoint_writes.push_back(std::move(write));
    }
    return record;
  } catch (const std::exception& error) {
    return absl::DataLossError(
        absl::StrCat("training record is not valid: ", error.what()));
  }
}

}  // namespace plateau::engine
