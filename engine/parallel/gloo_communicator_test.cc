#include "engine/parallel/gloo_communicator.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

using Group = std::vector<std::unique_ptr<GlooCommunicator>>;

// Connects `size` ranks, one thread each, through one in-memory store.
Group ConnectGroup(int size, absl::Duration timeout = absl::Seconds(20)) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  Group group(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      auto communicator =
          GlooCommunicator::Create(store, "test", rank, size, timeout);
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      group[rank] = std::move(*communicator);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return group;
}

// Runs body(rank, communicator) on every rank at once.
void OnEveryRank(const Group& group,
                 const std::function<void(int, Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (size_t rank = 0; rank < group.size(); ++rank) {
    ASSERT_NE(group[rank], nullptr);
    threads.emplace_back([&, rank] { body(rank, *group[rank]); });
  }
  for (std::thread& thread : threads) thread.join();
}

// Small integers: every sum is exact whatever the order.
float ExactValue(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * 1000 + i % 997);
}

std::vector<float> RandomValues(int rank, int64_t count) {
  std::mt19937 generator(1234 + rank);
  std::uniform_real_distribution<float> exponent(-8.0f, 8.0f);
  std::normal_distribution<float> mantissa(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) {
    value = mantissa(generator) * std::exp2(exponent(generator));
  }
  return values;
}

class GlooGroupTest : public testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Sizes, GlooGroupTest, testing::Values(2, 3, 4),
                         testing::PrintToStringParamName());

TEST_P(GlooGroupTest, AllReduceSumMatchesReference) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  for (const int64_t count :
       {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{300001}}) {
    OnEveryRank(group, [&](int rank, Communicator& communicator) {
      std::vector<float> data(count);
      for (int64_t i = 0; i < count; ++i) data[i] = ExactValue(rank, i);
      ASSERT_TRUE(communicator.AllReduceSum(data.data(), count).ok());
      for (int64_t i = 0; i < count; ++i) {
        float expected = 0;
        for (int r = 0; r < size; ++r) expected += ExactValue(r, i);
        ASSERT_EQ(data[i], expected) << "count " << count << " i " << i;
      }
    });
  }
}

TEST_P(GlooGroupTest, AllReduceSumDoubles) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  OnEveryRank(group, [&](int rank, Communicator& communicator) {
    std::vector<double> data = {0.5 * rank, 1e300, -3.0 * rank};
    ASSERT_TRUE(communicator.AllReduceSum(data.data(), 3).ok());
    EXPECT_EQ(data[0], 0.25 * size * (size - 1));
    EXPECT_EQ(data[1], 1e300 * size);
    EXPECT_EQ(data[2], -1.5 * size * (size - 1));
  });
}

// The same inputs give bitwise the same sums: on every rank, on every
// repetition, and over a fresh set of connections.
TEST_P(GlooGroupTest, AllReduceSumIsDeterministic) {
  const int size = GetParam();
  const int64_t count = 100003;
  std::vector<std::vector<float>> results;
  absl::Mutex mutex;
  for (int connection = 0; connection < 2; ++connection) {
    Group group = ConnectGroup(size);
    for (int repetition = 0; repetition < 3; ++repetition) {
      OnEveryRank(group, [&](int rank, Communicator& communicator) {
        std::vector<float> data = RandomValues(rank, count);
        ASSERT_TRUE(communicator.AllReduceSum(data.data(), count).ok());
        absl::MutexLock lock(&mutex);
        results.push_back(std::move(data));
      });
    }
  }
  ASSERT_EQ(results.size(), 6u * size);
  for (const std::vector<float>& result : results) {
    ASSERT_EQ(
        std::memcmp(result.data(), results[0].data(), count * sizeof(float)),
        0);
  }
  // And the sums are right to rounding.
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < size; ++r) inputs.push_back(RandomValues(r, count));
  for (int64_t i = 0; i < count; i += 101) {
    double expected = 0;
    double magnitude = 0;
    for (int r = 0; r < size; ++r) {
      expected += inputs[r][i];
      magnitude += std::abs(inputs[r][i]);
    }
    EXPECT_NEAR(results[0][i], expected, 1e-6 * magnitude);
  }
}

TEST_P(GlooGroupTest, ReduceScatterSumGivesEachRankItsBlock) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  for (const int64_t per_rank : {int64_t{1}, int64_t{5}, int64_t{40000}}) {
    OnEveryRank(group, [&](int rank, Communicator& communicator) {
      std::vector<float> input(size * per_rank);
      for (int64_t i = 0; i < size * per_rank; ++i) {
        input[i] = ExactValue(rank, i);
      }
      std::vector<float> output(per_rank, -1.0f);
      ASSERT_TRUE(
          communicator.ReduceScatterSum(input.data(), output.data(), per_rank)
              .ok());
      for (int64_t i = 0; i < per_rank; ++i) {
        float expected = 0;
        for (int r = 0; r < size; ++r) {
          expected += ExactValue(r, rank * per_rank + i);
        }
        ASSERT_EQ(output[i], expected) << "per_rank " << per_rank;
      }
    });
  }
}

// Reduce-scatter's sums are the all-reduce's to rounding, and repeatable.
TEST_P(GlooGroupTest, ReduceScatterSumIsDeterministic) {
  const int size = GetParam();
  const int64_t per_rank = 5001;
  Group group = ConnectGroup(size);
  std::vector<std::vector<float>> first(size);
  for (int repetition = 0; repetition < 3; ++repetition) {
    OnEveryRank(group, [&](int rank, Communicator& communicator) {
      const std::vector<float> input = RandomValues(rank, size * per_rank);
      std::vector<float> output(per_rank);
      ASSERT_TRUE(
          communicator.ReduceScatterSum(input.data(), output.data(), per_rank)
              .ok());
      if (repetition == 0) {
        first[rank] = output;
        return;
      }
      ASSERT_EQ(std::memcmp(output.data(), first[rank].data(),
                            per_rank * sizeof(float)),
                0);
    });
  }
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < size; ++r)
    inputs.push_back(RandomValues(r, size * per_rank));
  for (int rank = 0; rank < size; ++rank) {
    for (int64_t i = 0; i < per_rank; i += 7) {
      double expected = 0;
      double magnitude = 0;
      for (int r = 0; r < size; ++r) {
        expected += inputs[r][rank * per_rank + i];
        magnitude += std::abs(inputs[r][rank * per_rank + i]);
      }
      EXPECT_NEAR(first[rank][i], expected, 1e-6 * magnitude);
    }
  }
}

TEST_P(GlooGroupTest, AllGatherIsInRankOrder) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  for (const int64_t per_rank : {int64_t{1}, int64_t{3}, int64_t{100000}}) {
    OnEveryRank(group, [&](int rank, Communicator& communicator) {
      std::vector<float> input(per_rank);
      for (int64_t i = 0; i < per_rank; ++i) input[i] = ExactValue(rank, i);
      std::vector<float> output(size * per_rank, -1.0f);
      ASSERT_TRUE(
          communicator.AllGather(input.data(), output.data(), per_rank).ok());
      for (int r = 0; r < size; ++r) {
        for (int64_t i = 0; i < per_rank; ++i) {
          ASSERT_EQ(output[r * per_rank + i], ExactValue(r, i));
        }
      }
    });
  }
}

TEST_P(GlooGroupTest, AllGatherOfBf16IsInRankOrderBitForBit) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  // Odd counts: a bf16 block need not fill whole floats.
  for (const int64_t per_rank : {int64_t{1}, int64_t{3}, int64_t{100001}}) {
    OnEveryRank(group, [&](int rank, Communicator& communicator) {
      auto bits = [](int r, int64_t i) {
        return static_cast<uint16_t>((r * 7919 + i * 31) & 0xffff);
      };
      std::vector<uint16_t> input(per_rank);
      for (int64_t i = 0; i < per_rank; ++i) input[i] = bits(rank, i);
      std::vector<uint16_t> output(size * per_rank + 1, 0xdead);
      ASSERT_TRUE(
          communicator.AllGather(input.data(), output.data(), per_rank).ok());
      for (int r = 0; r < size; ++r) {
        for (int64_t i = 0; i < per_rank; ++i) {
          ASSERT_EQ(output[r * per_rank + i], bits(r, i));
        }
      }
      EXPECT_EQ(output.back(), 0xdead) << "wrote past the gathered blocks";
    });
  }
}

TEST_P(GlooGroupTest, AllGatherInPlace) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  OnEveryRank(group, [&](int rank, Communicator& communicator) {
    const int64_t per_rank = 4;
    std::vector<float> buffer(size * per_rank, -1.0f);
    float* own = buffer.data() + rank * per_rank;
    for (int64_t i = 0; i < per_rank; ++i) own[i] = ExactValue(rank, i);
    ASSERT_TRUE(communicator.AllGather(own, buffer.data(), per_rank).ok());
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < per_rank; ++i) {
        EXPECT_EQ(buffer[r * per_rank + i], ExactValue(r, i));
      }
    }
  });
}

// Bytes rank `from` sends to rank `to`: uneven, and zero for some pairs
// (including every pair from the last rank).
int64_t PairBytes(int from, int to, int size) {
  if (from == size - 1) return 0;
  return ((from * 7 + to * 3) % 4) * 5;
}

char PairByte(int from, int to, int64_t i) {
  return static_cast<char>(from * 31 + to * 17 + i);
}

TEST_P(GlooGroupTest, AllToAllVWithUnevenAndZeroSizes) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  for (int repetition = 0; repetition < 2; ++repetition) {
    OnEveryRank(group, [&](int rank, Communicator& communicator) {
      std::vector<int64_t> send_bytes(size);
      std::vector<int64_t> recv_bytes(size);
      std::string send;
      for (int to = 0; to < size; ++to) {
        send_bytes[to] = PairBytes(rank, to, size);
        for (int64_t i = 0; i < send_bytes[to]; ++i) {
          send.push_back(PairByte(rank, to, i));
        }
      }
      int64_t recv_total = 0;
      for (int from = 0; from < size; ++from) {
        recv_bytes[from] = PairBytes(from, rank, size);
        recv_total += recv_bytes[from];
      }
      std::string receive(recv_total, '\0');
      ASSERT_TRUE(
          communicator
              .AllToAllV(send.data(), send_bytes, receive.data(), recv_bytes)
              .ok());
      int64_t offset = 0;
      for (int from = 0; from < size; ++from) {
        for (int64_t i = 0; i < recv_bytes[from]; ++i) {
          ASSERT_EQ(receive[offset + i], PairByte(from, rank, i));
        }
        offset += recv_bytes[from];
      }
    });
  }
}

TEST_P(GlooGroupTest, AllToAllVWithNothingToMove) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  OnEveryRank(group, [&](int, Communicator& communicator) {
    const std::vector<int64_t> zeros(size, 0);
    EXPECT_TRUE(communicator.AllToAllV(nullptr, zeros, nullptr, zeros).ok());
  });
}

// Each rank sends to the next and receives from the previous, in both
// directions around the ring, with distinct tags and a zero-byte message.
TEST_P(GlooGroupTest, SendAndReceiveWithTags) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  OnEveryRank(group, [&](int rank, Communicator& communicator) {
    for (const int direction : {1, -1}) {
      const int to = (rank + direction + size) % size;
      const int from = (rank - direction + size) % size;
      const uint32_t tag = direction == 1 ? 11 : 12;
      std::vector<int32_t> out = {rank, direction, 42};
      std::vector<int32_t> in(3, -1);
      auto send = [&] {
        ASSERT_TRUE(communicator.Send(out.data(), 12, to, tag).ok());
        ASSERT_TRUE(communicator.Send(nullptr, 0, to, tag + 100).ok());
      };
      auto receive = [&] {
        ASSERT_TRUE(communicator.Receive(in.data(), 12, from, tag).ok());
        ASSERT_TRUE(communicator.Receive(nullptr, 0, from, tag + 100).ok());
      };
      // Even ranks send first so that a blocking send always finds its
      // receiver; with an odd size rank 0 and the last rank are both even,
      // so the last rank receives first.
      const bool send_first =
          rank % 2 == 0 && !(size % 2 == 1 && rank == size - 1);
      if (send_first) {
        send();
        receive();
      } else {
        receive();
        send();
      }
      EXPECT_EQ(in, (std::vector<int32_t>{from, direction, 42}));
    }
  });
}

// Every rank sends to the next and receives from the previous at the same
// time: plain Sends would all wait for receivers that never come.
TEST_P(GlooGroupTest, SendAndReceiveAroundTheRing) {
  const int size = GetParam();
  Group group = ConnectGroup(size, absl::Seconds(5));
  OnEveryRank(group, [&](int rank, Communicator& communicator) {
    const int next = (rank + 1) % size;
    const int previous = (rank + size - 1) % size;
    const std::vector<int32_t> out = {rank, 7};
    std::vector<int32_t> in(2, -1);
    ASSERT_TRUE(communicator
                    .SendAndReceive(out.data(), 8, next, 100 + rank, in.data(),
                                    8, previous, 100 + previous)
                    .ok());
    EXPECT_EQ(in, (std::vector<int32_t>{previous, 7}));
    // Zero-byte messages.
    ASSERT_TRUE(
        communicator
            .SendAndReceive(nullptr, 0, next, 5, nullptr, 0, previous, 5)
            .ok());
  });
}

// One side exchanges, the other answers with a plain Receive then Send.
TEST(GlooCommunicatorTest, SendAndReceiveMatchesPlainCalls) {
  Group group = ConnectGroup(2, absl::Seconds(5));
  OnEveryRank(group, [&](int rank, Communicator& communicator) {
    int64_t out = 1000 + rank;
    int64_t in = 0;
    if (rank == 0) {
      ASSERT_TRUE(
          communicator.SendAndReceive(&out, 8, 1, 1, &in, 8, 1, 2).ok());
    } else {
      ASSERT_TRUE(communicator.Receive(&in, 8, 0, 1).ok());
      ASSERT_TRUE(communicator.Send(&out, 8, 0, 2).ok());
    }
    EXPECT_EQ(in, 1000 + (1 - rank));
  });
}

TEST_P(GlooGroupTest, BarrierWaitsForTheSlowestRank) {
  const int size = GetParam();
  Group group = ConnectGroup(size);
  OnEveryRank(group, [&](int rank, Communicator& communicator) {
    const absl::Time start = absl::Now();
    if (rank == size - 1) absl::SleepFor(absl::Milliseconds(300));
    ASSERT_TRUE(communicator.Barrier().ok());
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
  });
}

TEST(GlooCommunicatorTest, SingleRankGroupNeedsNoNetwork) {
  // No peer, no store traffic: an unreachable address must not matter.
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto created = GlooCommunicator::Create(store, "solo", 0, 1, absl::Seconds(1),
                                          "203.0.113.1");
  ASSERT_TRUE(created.ok()) << created.status();
  GlooCommunicator& communicator = **created;
  EXPECT_EQ(communicator.rank(), 0);
  EXPECT_EQ(communicator.size(), 1);
  std::vector<float> data = {1.5f, -2.0f};
  EXPECT_TRUE(communicator.AllReduceSum(data.data(), 2).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  std::vector<double> doubles = {3.0};
  EXPECT_TRUE(communicator.AllReduceSum(doubles.data(), 1).ok());
  EXPECT_EQ(doubles[0], 3.0);
  std::vector<float> output(2);
  EXPECT_TRUE(
      communicator.ReduceScatterSum(data.data(), output.data(), 2).ok());
  EXPECT_EQ(output, data);
  output.assign(2, 0.0f);
  EXPECT_TRUE(communicator.AllGather(data.data(), output.data(), 2).ok());
  EXPECT_EQ(output, data);
  const std::string send = "hello";
  std::string receive(5, '\0');
  const std::vector<int64_t> sizes = {5};
  EXPECT_TRUE(
      communicator.AllToAllV(send.data(), sizes, receive.data(), sizes).ok());
  EXPECT_EQ(receive, "hello");
  EXPECT_TRUE(communicator.Barrier().ok());
  EXPECT_EQ(communicator.Send(send.data(), 5, 0, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GlooCommunicatorTest, RejectsBadArguments) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  EXPECT_EQ(GlooCommunicator::Create(store, "g", 2, 2, absl::Seconds(1))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlooCommunicator::Create(store, "g", 0, 0, absl::Seconds(1))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlooCommunicator::Create(nullptr, "g", 0, 1, absl::Seconds(1))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlooCommunicator::Create(store, "g", 0, 1, absl::ZeroDuration())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  Group group = ConnectGroup(2);
  Communicator& communicator = *group[0];
  const std::vector<int64_t> one_size = {4};
  char buffer[8] = {};
  EXPECT_EQ(communicator.AllToAllV(buffer, one_size, buffer, one_size).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int64_t> send_sizes = {4, 0};
  const std::vector<int64_t> recv_sizes = {3, 0};
  EXPECT_EQ(
      communicator.AllToAllV(buffer, send_sizes, buffer, recv_sizes).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(communicator.Send(buffer, 4, 2, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(communicator.Receive(buffer, 4, -1, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(communicator.AllReduceSum(static_cast<float*>(nullptr), 3).code(),
            absl::StatusCode::kInvalidArgument);
  // Argument errors do not break the group.
  OnEveryRank(group, [](int, Communicator& member) {
    EXPECT_TRUE(member.Barrier().ok());
  });
}

// Rank 1 never joins rank 0's collective: rank 0 gets DEADLINE_EXCEEDED after
// about the group's timeout, and the group stays failed.
TEST(GlooCommunicatorTest, DeadPeerGivesDeadlineExceeded) {
  const absl::Duration timeout = absl::Seconds(2);
  Group group = ConnectGroup(2, timeout);
  absl::Notification done;
  std::thread idle_peer([&] { done.WaitForNotification(); });
  const absl::Time start = absl::Now();
  std::vector<float> data(1000, 1.0f);
  const absl::Status status = group[0]->AllReduceSum(data.data(), 1000);
  const absl::Duration elapsed = absl::Now() - start;
  done.Notify();
  idle_peer.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("AllReduceSum"), std::string::npos);
  EXPECT_GE(elapsed, timeout - absl::Milliseconds(100));
  EXPECT_LE(elapsed, timeout + absl::Seconds(2));
  EXPECT_EQ(group[0]->Barrier().code(), absl::StatusCode::kFailedPrecondition);
}

// A peer that closes its connections mid-collective gives UNAVAILABLE (and
// no SIGPIPE kills the process).
TEST(GlooCommunicatorTest, PeerThatLeavesGivesUnavailable) {
  Group group = ConnectGroup(2, absl::Seconds(10));
  std::thread leaver([&] {
    absl::SleepFor(absl::Milliseconds(200));
    group[1].reset();
  });
  std::vector<float> data(1000, 1.0f);
  const absl::Status status = group[0]->AllReduceSum(data.data(), 1000);
  leaver.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

TEST(GlooCommunicatorTest, ReceiveFromSilentPeerNamesIt) {
  Group group = ConnectGroup(2, absl::Seconds(1));
  char byte = 0;
  const absl::Status status = group[1]->Receive(&byte, 1, 0, 5);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("peer rank 0"), std::string::npos) << status;
}

TEST(GlooCommunicatorTest, MissingMemberTimesOutTheConnect) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  const absl::Time start = absl::Now();
  auto created =
      GlooCommunicator::Create(store, "lonely", 0, 2, absl::Seconds(1));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kDeadlineExceeded)
      << created.status();
  EXPECT_LE(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace plateau::engine
