// The command line of the CLI, read into absl flags through the flag
// registry: flags may come anywhere (before or after the verb) as
// --name=value, --name value, -name value, --bool, --nobool; short names
// (`-o json`, `-f`) stand for long ones; "--" ends the flags; -h and --help
// ask for help. Only the flags the caller names are accepted. Unlike
// absl::ParseCommandLine, which exits 1, errors are returned, so the CLI can
// exit with its usage status.
#ifndef PLATEAU_CLIENT_ARGS_H_
#define PLATEAU_CLIENT_ARGS_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace plateau::client {

struct ParsedArgs {
  // The verb and its operands, in order.
  std::vector<std::string> positional;
  // Long names of the flags given, in order (a flag given twice: twice).
  std::vector<std::string> flags_given;
  bool help = false;
};

// `args` excludes argv[0]. `flags` are the long names accepted (each an
// ABSL_FLAG linked into the binary); `short_names` maps a short name to one
// of them. INVALID_ARGUMENT (a usage error) for an unknown flag or a
// missing or malformed value; flags already parsed keep their new values.
absl::StatusOr<ParsedArgs> ParseArgs(
    const std::vector<std::string>& args, const std::set<std::string>& flags,
    const std::map<std::string, std::string>& short_names);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_ARGS_H_
