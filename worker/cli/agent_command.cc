#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/metrics_server.h"
#include "common/network_address.h"
#include "kernels/cpu/bf16_speedup.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/device.h"
#include "worker/agent/agent.h"
#include "worker/agent/coordinator_channel.h"
#include "worker/agent/devices.h"
#include "worker/agent/worker_metrics.h"
#include "worker/cli/commands.h"
#include "worker/cli/flags.h"

namespace plateau::worker {
namespace {

constexpr char kVersion[] = "plateau-worker 0.8";

std::atomic<bool> agent_stop{false};

extern "C" void StopAgent(int /*signal*/) { agent_stop.store(true); }

int Fail(const std::string& message) {
  std::cerr << "plateau-worker: " << message << "\n";
  return 1;
}

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// The token from --token_file or PLATEAU_TOKEN; "" when neither is set.
absl::StatusOr<std::string> NodeToken() {
  const std::string path = absl::GetFlag(FLAGS_token_file);
  if (path.empty()) {
    const char* token = std::getenv("PLATEAU_TOKEN");
    return token != nullptr ? token : "";
  }
  absl::StatusOr<std::string> token = ReadFileToString(path);
  if (!token.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file: ", token.status().message()));
  }
  return std::string(absl::StripAsciiWhitespace(*token));
}

// Who may read /metrics: with --metrics_token_file, a request bearing its
// token (compared in constant time); else anyone.
absl::StatusOr<MetricsAuthorization> MetricsReaders() {
  const std::string path = absl::GetFlag(FLAGS_metrics_token_file);
  if (path.empty()) return MetricsAuthorization();
  absl::StatusOr<std::string> read = ReadFileToString(path);
  if (!read.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_token_file: ", read.status().message()));
  }
  const std::string token(absl::StripAsciiWhitespace(*read));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_token_file: ", path, " is empty"));
  }
  return MetricsAuthorization(
      [expected = absl::StrCat("Bearer ", token)](const std::string& header) {
        unsigned char differs = header.size() != expected.size();
        for (size_t i = 0; i < expected.size(); ++i) {
          differs |= static_cast<unsigned char>(
              expected[i] ^ (i < header.size() ? header[i] : 0));
        }
        return differs == 0;
      });
}

// Ranks start in directories of their own, so they get absolute paths.
std::string AbsolutePath(const std::string& path) {
  return path.empty() ? path : std::filesystem::absolute(path).string();
}

// host:port to announce: the bound port, and this host's name when bound
// to every interface.
std::string AnnouncedMetricsAddress(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = HostName();
  return absl::StrCat(host, ":", port);
}

// Sets how much faster the CPU devices' bf16 products run than their fp32
// ones (--bf16_product_speedup, or measured), which precision: auto chooses
// by; the words for the agent's first line ("" without CPU devices).
std::string ReportBf16ProductSpeedup(std::vector<v1::Device>* devices) {
  const bool any_cpu = std::any_of(
      devices->begin(), devices->end(),
      [](const v1::Device& d) { return d.kind() == v1::DEVICE_KIND_CPU; });
  if (!any_cpu) return "";
  double speedup = absl::GetFlag(FLAGS_bf16_product_speedup);
  const bool measured = speedup <= 0;
  if (measured) speedup = kernels::cpu::MeasureBf16ProductSpeedup();
  for (v1::Device& device : *devices) {
    if (device.kind() == v1::DEVICE_KIND_CPU) {
      device.set_bf16_product_speedup(speedup);
    }
  }
  return absl::StrFormat(", bf16 products %.2fx fp32's (%s, %s)", speedup,
                         kernels::cpu::CpuOps::Bf16ProductsKernel(),
                         measured ? "measured" : "--bf16_product_speedup");
}

}  // namespace

int RunAgentCommand() {
  std::signal(SIGINT, StopAgent);
  std::signal(SIGTERM, StopAgent);
  std::signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<int64_t> device_memory =
      DeviceMemoryFlagBytes(kDefaultCpuDeviceMemoryBytes);
  if (!device_memory.ok()) {
    return Fail(std::string(device_memory.status().message()));
  }
  AgentOptions options;
  absl::StatusOr<OfferedDevices> offered =
      DevicesOf(absl::GetFlag(FLAGS_devices), *device_memory,
                kernels::cuda::ListCudaDevices());
  if (!offered.ok()) return Fail(std::string(offered.status().message()));
  options.devices = std::move(offered->devices);
  absl::StatusOr<std::string> token = NodeToken();
  if (!token.ok()) return Fail(std::string(token.status().message()));
  options.token = *std::move(token);

  std::error_code error;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return Fail("cannot find my own executable: " + error.message());
  options.worker_binary = self.string();
  const std::string work_dir = absl::GetFlag(FLAGS_work_dir);
  std::filesystem::create_directories(work_dir, error);
  if (error || chdir(work_dir.c_str()) != 0) {
    return Fail(absl::StrCat("--work_dir ", work_dir, ": cannot use it",
                             error ? ": " + error.message() : ""));
  }
  options.tls.ca_cert_path = AbsolutePath(absl::GetFlag(FLAGS_ca_cert));
  options.tls.client_cert_path = AbsolutePath(absl::GetFlag(FLAGS_client_cert));
  options.tls.client_key_path = AbsolutePath(absl::GetFlag(FLAGS_client_key));
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (!options.token.empty() && options.tls.ca_cert_path.empty() &&
      !absl::GetFlag(FLAGS_allow_plaintext_token) &&
      !IsLoopbackAddress(options.coordinator)) {
    return Fail(absl::StrCat(
        "refusing to send the node's token in plaintext to --coordinator=",
        options.coordinator,
        ", which is not a loopback address: give --ca_cert for TLS, or "
        "--allow_plaintext_token on a network you trust"));
  }
  options.rank_address = absl::GetFlag(FLAGS_rank_address);
  if (options.rank_address.empty()) {
    absl::StatusOr<std::string> address =
        LocalAddressToward(options.coordinator);
    if (!address.ok()) {
      return Fail(absl::StrCat("--coordinator: ", address.status().message(),
                               "; pass --rank_address"));
    }
    options.rank_address = *std::move(address);
  }
  options.node_name = absl::GetFlag(FLAGS_name);
  if (options.node_name.empty()) options.node_name = HostName();
  options.host_memory_bytes = HostMemoryBytes();
  options.worker_version = kVersion;
  options.threads_per_rank =
      ThreadsPerRank(static_cast<int>(options.devices.size()));
  const std::string bf16_speed = ReportBf16ProductSpeedup(&options.devices);

  WorkerMetrics metrics;
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  absl::StatusOr<MetricsAuthorization> metrics_readers = MetricsReaders();
  if (!metrics_readers.ok()) {
    return Fail(std::string(metrics_readers.status().message()));
  }
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics_server =
      MetricsServer::Start(metrics_listen, metrics.registry(),
                           *std::move(metrics_readers));
  if (!metrics_server.ok()) {
    return Fail(std::string(metrics_server.status().message()));
  }
  options.metrics_address =
      AnnouncedMetricsAddress(metrics_listen, (*metrics_server)->port());
  // The agent makes its own channels; this finds bad TLS flags now.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateCoordinatorChannel(options.coordinator, options.tls);
  if (!channel.ok()) return Fail(std::string(channel.status().message()));

  std::cout << "plateau-worker: node " << options.node_name << ", "
            << offered->summary << bf16_speed << ", metrics on "
            << options.metrics_address << ", ranks on " << options.rank_address
            << ", work dir " << std::filesystem::current_path().string()
            << ", plateaud at " << options.coordinator << "\n";
  std::cout.flush();
  WorkerAgent agent(std::move(options), &metrics, &std::cout);
  agent.Run(&agent_stop);
  std::cout << "plateau-worker: stopped\n";
  return 0;
}

}  // namespace plateau::worker
