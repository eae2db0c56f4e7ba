// libFuzzer target for the distributed protocol's decoders (dist/messages.h):
// what a peer sends arrives here first. Input: one byte choosing the
// decoder, then the message bytes. Checks that decoding never crashes (a bad
// message is a ds4::Error), and that a message that decodes encodes back to
// the same bytes (hidden states sent as f16 excepted: a NaN's payload may
// change; they must still decode again).
// Built with -DDS4_FUZZ_REPLAY it is a plain program that runs every file of
// the directories given on the command line through the same target.
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "dist/messages.h"

namespace {

using namespace ds4::dist;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

template <typename Decode>
void round_trip(std::span<const uint8_t> bytes, Decode decode, bool exact) {
  try {
    const auto m = decode(bytes, "fuzz");
    const Bytes again = encode(m);
    if (exact) check(Bytes(bytes.begin(), bytes.end()) == again);
    (void)decode(again, "fuzz");
  } catch (const ds4::Error&) {
    // refused with a message: what a damaged or foreign message gets
  }
}

bool hidden_is_f16(std::span<const uint8_t> bytes) {
  // The hidden-bits field is not at a fixed offset; re-encoding f16 is
  // exact except for NaN payloads, so only exactness is relaxed.
  for (size_t i = 0; i + 4 <= bytes.size(); ++i)
    if (bytes[i] == 16 && bytes[i + 1] == 0 && bytes[i + 2] == 0 && bytes[i + 3] == 0) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  try {
    (void)message_type(bytes, "fuzz");
  } catch (const ds4::Error&) {
  }
  const bool f16 = hidden_is_f16(bytes);
  switch (data[0] % 9) {
    case 0: round_trip(bytes, decode_hello, true); break;
    case 1: round_trip(bytes, decode_welcome, true); break;
    case 2: round_trip(bytes, decode_refuse, true); break;
    case 3: round_trip(bytes, decode_eval, !f16); break;
    case 4: round_trip(bytes, decode_result, !f16); break;
    case 5: round_trip(bytes, decode_heartbeat, true); break;
    case 6: round_trip(bytes, decode_session_op, true); break;
    case 7: round_trip(bytes, decode_session_op_done, true); break;
    default: round_trip(bytes, decode_forward_lost, true); break;
  }
  return 0;
}

#include "replay_main.h"
