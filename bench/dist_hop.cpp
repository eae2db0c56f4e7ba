// ds4-bench-hop: the transport's cost of one pipeline hop, without any
// model: a Hub and a Link in one process over TCP on 127.0.0.1 (CURVE, as
// ds4-server --dist-listen uses it), the "worker" thread echoing a reply of
// --reply-bytes for each request of --request-bytes. Prints the median and
// the 10th/90th percentile round trip over --rounds (after --warmup), one
// JSON line. A decode step of V4 Flash sends 64 KiB of hidden state per hop
// (4 x 4096 f32) and gets back 64 KiB (to the next stage) or the logits
// (129280 f32 = 505 KiB) from the last stage. A prefill wave carries 64 KiB
// a token (64 MiB for 1024 tokens), in pieces of --piece-bytes
// (dist/pieces.h; a piece size above the message size sends it whole).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/curve_key.h"
#include "dist/zmq_transport.h"
#include "version/version.h"

int main(int argc, char** argv) {
  CLI::App app{"Round trip of one pipeline hop through the ZeroMQ/CURVE transport on 127.0.0.1", "ds4-bench-hop"};
  app.set_version_flag("--version", ds4::version_line("ds4-bench-hop"));
  size_t request = 65536, reply = 65536;
  size_t piece_bytes = ds4::dist::kDefaultPieceBytes;
  int rounds = 2000, warmup = 200;
  app.add_option("--request-bytes", request, "bytes sent to the worker per round")->capture_default_str();
  app.add_option("--reply-bytes", reply, "bytes it sends back")->capture_default_str();
  app.add_option("--piece-bytes", piece_bytes, "longer messages go in pieces of this size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "timed round trips")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed round trips first")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const ds4::dist::CurveKey key = ds4::dist::generate_curve_key();
    auto hub = ds4::dist::make_zmq_hub("tcp://127.0.0.1:*", key, piece_bytes);
    auto link = ds4::dist::make_zmq_link(hub->endpoint(), key, "", piece_bytes);
    std::atomic<bool> stop{false};
    std::thread worker([&] {
      const ds4::dist::Bytes answer(reply, 7);
      while (!stop) {
        if (link->receive(std::chrono::milliseconds(20))) link->send(answer);
      }
    });
    // The first message names the worker's routing id.
    link->send(ds4::dist::Bytes(1, 0));
    std::optional<ds4::dist::Incoming> first;
    while (!(first = hub->receive(std::chrono::milliseconds(100)))) {
    }
    const ds4::dist::PeerId peer = first->peer;
    const ds4::dist::Bytes payload(request, 3);
    std::vector<double> us;
    for (int i = 0; i < warmup + rounds; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      hub->send(peer, payload);
      std::optional<ds4::dist::Incoming> in;
      while (!(in = hub->receive(std::chrono::milliseconds(1000)))) {
      }
      if (in->bytes.size() != reply) throw ds4::Error("a reply of the wrong size");
      if (i >= warmup)
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    stop = true;
    worker.join();
    std::sort(us.begin(), us.end());
    auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
    std::printf(
        "{\"transport\":\"zmq+curve\",\"request_bytes\":%zu,\"reply_bytes\":%zu,\"piece_bytes\":%zu,\"rounds\":%d,"
        "\"median_us\":%.1f,\"p10_us\":%.1f,\"p90_us\":%.1f}\n",
        request, reply, piece_bytes, rounds, at(0.5), at(0.1), at(0.9));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-bench-hop: %s\n", e.what());
    return 1;
  }
  return 0;
}
