// Where the CLI finds plateaud and how it proves who is calling. Each setting
// comes from the first source that has it: the flag (--coordinator,
// --token_file, --ca_cert, --allow_plaintext_token), the environment
// (PLATEAU_COORDINATOR, PLATEAU_TOKEN), the config file, then the default
// (coordinator 127.0.0.1:7070, no token, no TLS). A token is never a flag:
// command lines are visible to every user of the machine.
//
// The config file is YAML with the optional keys `coordinator`, `token`,
// `ca_cert` (a PEM file; a relative path is taken from the config file's
// directory) and `allow_plaintext_token` (true or false). It lives at
// $XDG_CONFIG_HOME/plateau/config.yaml, or ~/.config/plateau/config.yaml; a
// missing file is no error, one that holds a token and that others may read
// is. Errors are INVALID_ARGUMENT and start with the file's path.
#ifndef PLATEAU_CLIENT_CONFIG_H_
#define PLATEAU_CLIENT_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"

namespace plateau::client {

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";

// Every field "" where the source does not set it.
struct ClientConfig {
  std::string coordinator;  // host:port
  std::string token;
  std::string ca_cert_file;  // PEM roots; "" connects without TLS
  // Send the token without TLS to an address that is not loopback.
  bool allow_plaintext_token = false;
};

struct ConfigSources {
  ClientConfig flags;
  ClientConfig environment;
  std::string file_path;  // "": no config file
};

// The config file's path from the values of XDG_CONFIG_HOME and HOME ("" for
// an unset variable); "" when both are empty.
std::string ConfigFilePath(const std::string& xdg_config_home,
                           const std::string& home);

// The settings of the config file at `path`; all empty if it does not exist.
absl::StatusOr<ClientConfig> ReadConfigFile(const std::string& path);

// The token in the file at `path` (--token_file), without surrounding
// whitespace; errors name the flag and the file.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// FAILED_PRECONDITION when `config` would send its token in plaintext to an
// address that is not loopback and does not allow it; the message says
// how to turn TLS on or allow it.
absl::Status CheckTokenTransport(const ClientConfig& config);

// Merges the sources by precedence and applies the default coordinator.
absl::StatusOr<ClientConfig> ResolveConfig(const ConfigSources& sources);

// ConfigSources::environment and ConfigFilePath from this process's
// environment.
ClientConfig ConfigFromEnvironment();
std::string ConfigFilePathFromEnvironment();

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_CONFIG_H_
