// The environment through which a launcher tells a `plateau-worker train`
// process that it is one rank of a group, and how that rank finds the
// others. The standalone launcher (`train --world N`) rendezvous in a
// directory; the worker agent through plateaud's Rendezvous service, and
// asks each rank to publish its status (rank_status.h) for it to relay.
#ifndef PLATEAU_WORKER_AGENT_RANK_ENVIRONMENT_H_
#define PLATEAU_WORKER_AGENT_RANK_ENVIRONMENT_H_

namespace plateau::worker {

// Set by the launcher for every rank (rank_launcher.h).
inline constexpr char kRankVariable[] = "PLATEAU_RANK";
inline constexpr char kWorldSizeVariable[] = "PLATEAU_WORLD_SIZE";
// The rank's index among the ranks of its launcher (its node's share).
inline constexpr char kLocalRankVariable[] = "PLATEAU_LOCAL_RANK";
// Standalone: a directory for Gloo's file store.
inline constexpr char kRendezvousDirectoryVariable[] = "PLATEAU_RENDEZVOUS_DIR";
// Agent: plateaud's address, the attempt's rendezvous scope, the node's
// token ("" without auth), the CA certificate file ("" for plaintext), the
// node's client certificate and key files ("" without).
inline constexpr char kCoordinatorVariable[] = "PLATEAU_COORDINATOR";
inline constexpr char kRendezvousScopeVariable[] = "PLATEAU_RENDEZVOUS_SCOPE";
inline constexpr char kNodeTokenVariable[] = "PLATEAU_NODE_TOKEN";
inline constexpr char kCaCertVariable[] = "PLATEAU_CA_CERT";
inline constexpr char kClientCertVariable[] = "PLATEAU_CLIENT_CERT";
inline constexpr char kClientKeyVariable[] = "PLATEAU_CLIENT_KEY";
// Agent: where the rank writes rank-<rank>.status.
inline constexpr char kStatusDirectoryVariable[] = "PLATEAU_STATUS_DIR";
// Agent: the address the rank listens on for its peers (Gloo).
inline constexpr char kRankAddressVariable[] = "PLATEAU_RANK_ADDRESS";
// Agent: the lease file the rank watches (rank_lease.h); unset without a
// lease.
inline constexpr char kRankLeaseVariable[] = "PLATEAU_RANK_LEASE";

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_AGENT_RANK_ENVIRONMENT_H_
