#include "client/args.h"

#include <optional>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace plateau::client {
namespace {

// The accepted flag called `name` (mapped from a short name), or nullptr.
absl::CommandLineFlag* FindFlag(
    std::string* name, const std::set<std::string>& flags,
    const std::map<std::string, std::string>& short_names) {
  if (auto it = short_names.find(*name); it != short_names.end()) {
    *name = it->second;
  }
  if (flags.count(*name) == 0) return nullptr;
  return absl::FindCommandLineFlag(*name);
}

}  // namespace

absl::StatusOr<ParsedArgs> ParseArgs(
    const std::vector<std::string>& args, const std::set<std::string>& flags,
    const std::map<std::string, std::string>& short_names) {
  ParsedArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      parsed.positional.insert(parsed.positional.end(), args.begin() + i + 1,
                               args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      parsed.positional.push_back(arg);
      continue;
    }
    absl::string_view body(arg);
    body.remove_prefix(absl::StartsWith(body, "--") ? 2 : 1);
    std::string name(body.substr(0, body.find('=')));
    std::optional<std::string> value;
    if (name.size() < body.size()) {
      value = std::string(body.substr(name.size() + 1));
    }
    if (name == "h" || name == "help") {
      parsed.help = true;
      continue;
    }
    absl::CommandLineFlag* flag = FindFlag(&name, flags, short_names);
    if (flag == nullptr && !value.has_value() && absl::StartsWith(name, "no")) {
      // --nowatch: a boolean flag turned off.
      std::string positive = name.substr(2);
      absl::CommandLineFlag* negated = FindFlag(&positive, flags, short_names);
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        name = positive;
        value = "false";
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", arg.substr(0, arg.find('='))));
    }
    if (!value.has_value()) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, ": ", error));
    }
    parsed.flags_given.push_back(name);
  }
  return parsed;
}

}  // namespace plateau::client
