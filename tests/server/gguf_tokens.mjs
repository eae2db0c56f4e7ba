// The token table of a GGUF file (tokenizer.ggml.tokens), read from its
// metadata the way SYSTEMS.md §1 lays it out: the tests need special token
// ids (</think>) to bias them, and the server has no endpoint that names ids.
import { openSync, readSync, closeSync } from 'node:fs';

const FIXED = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };  // type -> bytes
const STRING = 8;
const ARRAY = 9;

class Reader {
  constructor(file) {
    this.fd = openSync(file, 'r');
    this.pos = 0;
  }
  bytes(n) {
    const b = Buffer.alloc(n);
    if (readSync(this.fd, b, 0, n, this.pos) !== n) throw new Error('GGUF metadata ends early');
    this.pos += n;
    return b;
  }
  u32() { return this.bytes(4).readUInt32LE(0); }
  u64() { return Number(this.bytes(8).readBigUInt64LE(0)); }
  string() { return this.bytes(this.u64()).toString('utf8'); }
  // A value of `type`: strings (and arrays of them) read, everything else skipped.
  value(type) {
    if (type === STRING) return this.string();
    if (type === ARRAY) {
      const inner = this.u32();
      const n = this.u64();
      if (inner === STRING) return Array.from({ length: n }, () => this.string());
      if (!(inner in FIXED)) throw new Error(`GGUF array of type ${inner} is not read here`);
      this.pos += n * FIXED[inner];
      return null;
    }
    if (!(type in FIXED)) throw new Error(`GGUF value type ${type} is unknown`);
    this.pos += FIXED[type];
    return null;
  }
  close() { closeSync(this.fd); }
}

export function ggufTokens(file) {
  const r = new Reader(file);
  try {
    if (r.bytes(4).toString('latin1') !== 'GGUF') throw new Error(`${file} is not a GGUF file`);
    r.u32();  // version
    r.u64();  // tensors
    const kvs = r.u64();
    for (let i = 0; i < kvs; i++) {
      const key = r.string();
      const value = r.value(r.u32());
      if (key === 'tokenizer.ggml.tokens') return value;
    }
    throw new Error(`${file} has no tokenizer.ggml.tokens`);
  } finally {
    r.close();
  }
}

// The id of the token whose text is exactly `text`.
export function tokenId(file, text) {
  const id = ggufTokens(file).indexOf(text);
  if (id < 0) throw new Error(`no token ${JSON.stringify(text)} in ${file}`);
  return id;
}
