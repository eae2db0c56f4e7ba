// libFuzzer target for the GGUF reader: any byte string must either parse or
// throw ds4::Error, and everything a parsed file exposes must be readable
// without touching memory outside the input (ASan/UBSan watch).
// Built with -DDS4_FUZZ_REPLAY it is a plain program that runs every file of
// the directories given on the command line through the same target.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"

namespace {

using ds4::gguf::File;
using ds4::gguf::MetaValue;
using ds4::gguf::Value;
using ds4::gguf::ValueType;

volatile uint64_t g_sink;

// Reads a value through every accessor that applies to it. Conversions may
// legitimately refuse (a negative i32 read as u32), so Errors are caught per call.
void visit(const Value& v, int depth) {
  auto attempt = [](auto&& fn) {
    try {
      fn();
    } catch (const ds4::Error&) {
    }
  };
  g_sink = g_sink + v.raw().size() + v.type_description().size();
  switch (v.type()) {
    case ValueType::STRING: g_sink = g_sink + v.as_string().size(); break;
    case ValueType::BOOL: g_sink = g_sink + v.as_bool(); break;
    case ValueType::F32:
    case ValueType::F64: g_sink = g_sink + static_cast<uint64_t>(v.as_f64() != 0.0) + (v.as_f32() != 0.0f); break;
    case ValueType::ARRAY: {
      if (depth > static_cast<int>(ds4::gguf::kMaxArrayDepth)) __builtin_trap();
      attempt([&] { g_sink = g_sink + v.array_u32().size(); });
      attempt([&] { g_sink = g_sink + v.array_i64().size(); });
      attempt([&] { g_sink = g_sink + v.array_f32().size(); });
      attempt([&] { g_sink = g_sink + v.array_bool().size(); });
      attempt([&] { g_sink = g_sink + v.array_strings().size(); });
      uint64_t n = 0;
      v.for_each_element([&](const Value& e) {
        visit(e, depth + 1);
        ++n;
      });
      if (n != v.size()) __builtin_trap();
      if (n > 0) visit(v.element(n - 1), depth + 1);
      break;
    }
    default:
      attempt([&] { g_sink = g_sink + v.as_u64(); });
      attempt([&] { g_sink = g_sink + static_cast<uint64_t>(v.as_i32()); });
      break;
  }
}

// The encoded bytes of a value as they sit in the file: its payload plus the
// string length or array header in front of it.
std::span<const uint8_t> encoding_in_file(const Value& v) {
  const std::span<const uint8_t> raw = v.raw();
  const size_t head = v.type() == ValueType::STRING ? 8 : v.type() == ValueType::ARRAY ? 12 : 0;
  return {raw.data() - head, raw.size() + head};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const File f = File::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
    for (const auto& e : f.metadata()) {
      if (f.find(e.key) != &e.value) __builtin_trap();
      visit(e.value, 0);
      // Re-encoding what was read must give back the file's bytes.
      const MetaValue m = MetaValue::copy_of(e.value);
      const auto enc = m.encoded();
      const auto orig = encoding_in_file(e.value);
      if (enc.size() != orig.size() || !std::equal(enc.begin(), enc.end(), orig.begin())) __builtin_trap();
    }
    for (const auto& t : f.tensors()) {
      if (f.find_tensor(t.name) != &t) __builtin_trap();
      if (t.data < data || t.data + t.nbytes > data + size) __builtin_trap();
      g_sink = g_sink + t.data[0] + t.data[t.nbytes - 1] + t.row_bytes() + t.n_rows();
    }
  } catch (const ds4::Error&) {
  }
  return 0;
}

#include "replay_main.h"
