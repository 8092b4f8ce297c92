// Fuzz target for the job spec front door: YAML decoding with defaults and
// validation, and specs arriving as binary protos (SubmitJob's `spec`).
// Besides not crashing, leaking or hanging, it checks the contract: a spec
// that parses is valid, and it round-trips through JobSpecToYaml unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "google/protobuf/util/message_differencer.h"
#include "proto/job_spec.h"

namespace {

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "contract broken: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void CheckRoundTrip(const plateau::v1::JobSpec& spec) {
  const std::string yaml = plateau::JobSpecToYaml(spec);
  const auto again = plateau::ParseJobSpecYaml(yaml);
  Require(again.ok(), "a valid spec's YAML does not parse back",
          yaml + "\n" + again.status().ToString());
  Require(google::protobuf::util::MessageDifferencer::Equals(*again, spec),
          "the YAML round trip changed the spec", yaml);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto parsed = plateau::ParseJobSpecYaml(text);
  if (parsed.ok()) {
    const absl::Status valid = plateau::ValidateJobSpec(*parsed);
    Require(valid.ok(), "a parsed spec fails validation", valid.ToString());
    CheckRoundTrip(*parsed);
  }
  plateau::v1::JobSpec proto;
  if (proto.ParseFromArray(data, static_cast<int>(size)) &&
      plateau::ValidateJobSpec(proto).ok()) {
    CheckRoundTrip(proto);
  }
  return 0;
}
