// The plateau CLI from its arguments to its exit status: flags and
// configuration, the verb table, usage errors (status 2, message on stderr),
// other errors ("plateau: <message>" on stderr, status 1), and the verbs'
// own statuses (exit_codes.h). The usage text documents all of it.
#ifndef PLATEAU_CLIENT_CLI_H_
#define PLATEAU_CLIENT_CLI_H_

#include <string>
#include <vector>

namespace plateau::client {

// `args` excludes argv[0]. Reads the environment, stdin/stdout's terminal
// state and the config file; prints on stdout and stderr.
int RunCli(const std::vector<std::string>& args);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_CLI_H_
