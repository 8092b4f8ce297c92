#include "client/config.h"

#include <sys/stat.h>

#include <cstdlib>
#include <exception>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/network_address.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace plateau::client {
namespace {

std::string Getenv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

const std::string& FirstSet(const std::string& a, const std::string& b,
                            const std::string& c) {
  if (!a.empty()) return a;
  if (!b.empty()) return b;
  return c;
}

absl::Status FileError(const std::string& path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

// Reads the mapping `root` into `config`; yaml-cpp's exceptions are caught
// by the caller.
absl::Status ReadKeys(const std::string& path, const YAML::Node& root,
                      ClientConfig* config) {
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>();
    std::string* field = nullptr;
    if (key == "allow_plaintext_token") {
      if (!entry.second.IsScalar() ||
          !YAML::convert<bool>::decode(entry.second,
                                       config->allow_plaintext_token)) {
        return FileError(path, absl::StrCat(key, ": expected true or false"));
      }
      continue;
    }
    if (key == "coordinator") {
      field = &config->coordinator;
    } else if (key == "token") {
      field = &config->token;
    } else if (key == "ca_cert") {
      field = &config->ca_cert_file;
    } else {
      return FileError(path,
                       absl::StrCat("unknown key '", key,
                                    "'; expected coordinator, token, ca_cert, "
                                    "allow_plaintext_token"));
    }
    if (!entry.second.IsScalar()) {
      return FileError(path, absl::StrCat(key, ": expected a string"));
    }
    *field = entry.second.as<std::string>();
  }
  if (!config->ca_cert_file.empty()) {
    const std::filesystem::path ca_cert(config->ca_cert_file);
    if (ca_cert.is_relative()) {
      config->ca_cert_file =
          (std::filesystem::path(path).parent_path() / ca_cert).string();
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ConfigFilePath(const std::string& xdg_config_home,
                           const std::string& home) {
  if (!xdg_config_home.empty()) {
    return absl::StrCat(xdg_config_home, "/plateau/config.yaml");
  }
  if (!home.empty()) return absl::StrCat(home, "/.config/plateau/config.yaml");
  return "";
}

absl::StatusOr<ClientConfig> ReadConfigFile(const std::string& path) {
  ClientConfig config;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (absl::IsNotFound(text.status())) return config;
  if (!text.ok()) return text.status();  // names the path
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return FileError(path, e.msg);
    return FileError(path, absl::StrCat("line ", e.mark.line + 1, ", column ",
                                        e.mark.column + 1, ": ", e.msg));
  } catch (const std::exception& e) {
    return FileError(path, e.what());
  }
  if (root.IsNull()) return config;  // an empty file
  if (!root.IsMap()) {
    return FileError(path, "expected a mapping (coordinator: HOST:PORT, ...)");
  }
  try {
    RETURN_IF_ERROR(ReadKeys(path, root, &config));
  } catch (const std::exception& e) {
    return FileError(path, e.what());
  }
  struct stat file_status = {};
  if (!config.token.empty() && stat(path.c_str(), &file_status) == 0 &&
      (file_status.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return FileError(
        path, absl::StrFormat("holds a token, but others may read it (mode "
                              "%04o); run chmod 600 %s",
                              file_status.st_mode & 07777, path));
  }
  return config;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> token = ReadFileToString(path);
  if (!token.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file: ", token.status().message()));
  }
  const absl::string_view stripped = absl::StripAsciiWhitespace(*token);
  if (stripped.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file: ", path, " is empty"));
  }
  return std::string(stripped);
}

absl::Status CheckTokenTransport(const ClientConfig& config) {
  if (config.token.empty() || !config.ca_cert_file.empty() ||
      config.allow_plaintext_token || IsLoopbackAddress(config.coordinator)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to send the token in plaintext to ", config.coordinator,
      ", which is not a loopback address: give --ca_cert (or the config "
      "file's ca_cert) for TLS, or --allow_plaintext_token on a network you "
      "trust"));
}

absl::StatusOr<ClientConfig> ResolveConfig(const ConfigSources& sources) {
  ClientConfig file;
  if (!sources.file_path.empty()) {
    ASSIGN_OR_RETURN(file, ReadConfigFile(sources.file_path));
  }
  const ClientConfig& flags = sources.flags;
  const ClientConfig& environment = sources.environment;
  ClientConfig config;
  config.coordinator =
      FirstSet(flags.coordinator, environment.coordinator, file.coordinator);
  if (config.coordinator.empty()) config.coordinator = kDefaultCoordinator;
  config.token = FirstSet(flags.token, environment.token, file.token);
  config.ca_cert_file =
      FirstSet(flags.ca_cert_file, environment.ca_cert_file, file.ca_cert_file);
  config.allow_plaintext_token =
      flags.allow_plaintext_token || file.allow_plaintext_token;
  return config;
}

ClientConfig ConfigFromEnvironment() {
  ClientConfig config;
  config.coordinator = Getenv("PLATEAU_COORDINATOR");
  config.token = Getenv("PLATEAU_TOKEN");
  return config;
}

std::string ConfigFilePathFromEnvironment() {
  return ConfigFilePath(Getenv("XDG_CONFIG_HOME"), Getenv("HOME"));
}

}  // namespace plateau::client
