// Where the CLI finds plateaud and how it proves who is calling. Each setting
// comes from the first source that has it: the flag (--coordinator,
// --token, --ca_cert), the environment (PLATEAU_COORDINATOR, PLATEAU_TOKEN),
// the config file, then the default (coordinator 127.0.0.1:7070, no token,
// no TLS).
//
// The config file is YAML with the optional keys `coordinator`, `token` and
// `ca_cert` (a PEM file; a relative path is taken from the config file's
// directory). It lives at $XDG_CONFIG_HOME/plateau/config.yaml, or
// ~/.config/plateau/config.yaml; a missing file is no error. Errors are
// INVALID_ARGUMENT and start with the file's path.
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

// Merges the sources by precedence and applies the default coordinator.
absl::StatusOr<ClientConfig> ResolveConfig(const ConfigSources& sources);

// ConfigSources::environment and ConfigFilePath from this process's
// environment.
ClientConfig ConfigFromEnvironment();
std::string ConfigFilePathFromEnvironment();

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_CONFIG_H_
