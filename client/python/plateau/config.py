"""Where the client finds plateaud and how it proves who is calling, as the
plateau CLI does (client/config.h): each setting from the first source that
has it, the arguments, the environment (PLATEAU_COORDINATOR,
PLATEAU_TOKEN), the config file, then the default (127.0.0.1:7070, no
token, no TLS).

The config file is YAML with the optional keys `coordinator`, `token`,
`ca_cert` (a PEM file; relative to the file's directory) and
`allow_plaintext_token`, at $XDG_CONFIG_HOME/plateau/config.yaml or
~/.config/plateau/config.yaml. A missing file is no error; one that holds a
token and that others may read is. A token is never sent in plaintext to
an address that is not loopback unless allowed.
"""

import dataclasses
import ipaddress
import os
import socket
import stat

import yaml

DEFAULT_COORDINATOR = "127.0.0.1:7070"
_KEYS = ("coordinator", "token", "ca_cert", "allow_plaintext_token")


class ConfigError(ValueError):
    """A setting or the config file is wrong; the message says which."""


@dataclasses.dataclass
class ClientConfig:
    coordinator: str = ""
    token: str = ""
    ca_cert: str = ""  # PEM roots; "" connects without TLS
    allow_plaintext_token: bool = False


def config_file_path(environment=None):
    """The config file's path from XDG_CONFIG_HOME and HOME; "" when both
    are unset."""
    environment = os.environ if environment is None else environment
    if environment.get("XDG_CONFIG_HOME"):
        return os.path.join(environment["XDG_CONFIG_HOME"], "plateau",
                            "config.yaml")
    if environment.get("HOME"):
        return os.path.join(environment["HOME"], ".config", "plateau",
                            "config.yaml")
    return ""


def read_config_file(path):
    """The settings of the file at `path`; all empty when it does not
    exist."""
    try:
        with open(path) as file:
            text = file.read()
    except FileNotFoundError:
        return ClientConfig()
    except OSError as error:
        raise ConfigError(f"{path}: {error.strerror}") from None
    try:
        root = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = (f"line {mark.line + 1}, column {mark.column + 1}: "
                 if mark else "")
        raise ConfigError(f"{path}: {where}{error}") from None
    if root is None:
        return ClientConfig()
    if not isinstance(root, dict):
        raise ConfigError(
            f"{path}: expected a mapping (coordinator: HOST:PORT, ...)")
    config = ClientConfig()
    for key, value in root.items():
        if key not in _KEYS:
            raise ConfigError(f"{path}: unknown key '{key}'; expected "
                              f"{', '.join(_KEYS)}")
        if key == "allow_plaintext_token":
            if not isinstance(value, bool):
                raise ConfigError(f"{path}: {key}: expected true or false")
            config.allow_plaintext_token = value
            continue
        if not isinstance(value, (str, int, float)) or isinstance(value,
                                                                  bool):
            raise ConfigError(f"{path}: {key}: expected a string")
        setattr(config, key, str(value))
    if config.ca_cert and not os.path.isabs(config.ca_cert):
        config.ca_cert = os.path.join(os.path.dirname(path), config.ca_cert)
    mode = os.stat(path).st_mode
    if config.token and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: holds a token, but others may read it "
                          f"(mode {stat.S_IMODE(mode):04o}); run chmod 600 "
                          f"{path}")
    return config


def is_loopback_address(address):
    """Whether every address HOST of HOST:PORT resolves to is loopback."""
    if address.startswith("unix:"):
        return True
    host = address.rsplit(":", 1)[0] if ":" in address else address
    host = host.strip("[]")
    if not host:
        return False
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return bool(found) and all(
        ipaddress.ip_address(entry[4][0].split("%")[0]).is_loopback
        for entry in found)


def resolve_config(coordinator="", token="", ca_cert="",
                   allow_plaintext_token=False, environment=None,
                   config_file=None):
    """The settings by precedence: these arguments (the CLI's flags), the
    environment, the config file (config_file_path() unless given).
    Raises ConfigError for a bad file or a token that would travel in
    plaintext off loopback."""
    environment = os.environ if environment is None else environment
    path = config_file_path(environment) if config_file is None else \
        config_file
    file = read_config_file(path) if path else ClientConfig()
    config = ClientConfig(
        coordinator=(coordinator or environment.get("PLATEAU_COORDINATOR")
                     or file.coordinator or DEFAULT_COORDINATOR),
        token=token or environment.get("PLATEAU_TOKEN") or file.token,
        ca_cert=ca_cert or file.ca_cert,
        allow_plaintext_token=(allow_plaintext_token
                               or file.allow_plaintext_token))
    if (config.token and not config.ca_cert
            and not config.allow_plaintext_token
            and not is_loopback_address(config.coordinator)):
        raise ConfigError(
            f"refusing to send the token in plaintext to "
            f"{config.coordinator}, which is not a loopback address: give "
            f"ca_cert (or the config file's ca_cert) for TLS, or "
            f"allow_plaintext_token=True on a network you trust")
    return config
