// The Gloo rendezvous store of ranks launched by a worker: plateaud's
// Rendezvous service (proto/rendezvous.proto), under the job attempt's
// rendezvous key as scope, so ranks on different nodes find each other
// through the coordinator and a new attempt never sees an old one's keys.
//
// Gloo's Store interface reports failure by throwing; so does this store
// (gloo::IoException naming the RPC, the key and the coordinator's error),
// and GlooCommunicator::Create turns that into a Status. get() and wait()
// give up after `timeout` (gloo::IoException too). Thread-safe.
#ifndef PLATEAU_WORKER_RENDEZVOUS_COORDINATOR_STORE_H_
#define PLATEAU_WORKER_RENDEZVOUS_COORDINATOR_STORE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gloo/rendezvous/store.h"
#include "grpcpp/channel.h"
#include "proto/rendezvous.grpc.pb.h"

namespace plateau::worker {

class CoordinatorStore final : public gloo::rendezvous::Store {
 public:
  // token: the node's bearer token ("" when plateaud runs without auth).
  CoordinatorStore(std::shared_ptr<grpc::Channel> channel, std::string scope,
                   std::string token, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  const std::string scope_;
  const std::string token_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_RENDEZVOUS_COORDINATOR_STORE_H_
