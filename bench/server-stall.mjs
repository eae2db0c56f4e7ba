#!/usr/bin/env node
// How much a running stream slows down while another request's long prompt
// prefills beside it (issue 23: per-token latency <= 2x its latency alone).
//   DS4_SERVER_BIN=build/bin/ds4-server DS4_GGUF_BIN=build/bin/ds4-gguf \
//     node bench/server-stall.mjs --model FILE [--prompt-tokens 4096] [--tokens 64] [--runs 5]
//                                 [--threads 2] [--max-decode-stall 2] [--ctx N]
// Starts ds4-server with two slots. Each run, in alternating order: stream A
// alone (the gaps between its first --tokens content events), and stream A
// again while request B (a fresh --prompt-tokens prompt, one reply token) is
// sent after A's fourth token: the gaps of A between B's start and B's
// reply. Prints per run the mean and p95 gap of each, B's prefill time, and
// the median over runs of the ratio (beside / alone).
import { execFileSync } from 'node:child_process';
import { parseArgs } from 'node:util';

import { startServer } from '../tests/server/support.mjs';

const { values: opt } = parseArgs({
  options: {
    model: { type: 'string' },
    'prompt-tokens': { type: 'string', default: '4096' },
    tokens: { type: 'string', default: '64' },
    runs: { type: 'string', default: '5' },
    threads: { type: 'string', default: '2' },
    'max-decode-stall': { type: 'string', default: '2' },
    ctx: { type: 'string' },
  },
});
if (!opt.model) {
  console.error('server-stall: --model FILE is required');
  process.exit(2);
}
const PROMPT_TOKENS = Number(opt['prompt-tokens']);
const TOKENS = Number(opt.tokens);
const RUNS = Number(opt.runs);
const CTX = Number(opt.ctx ?? PROMPT_TOKENS + 8192);

// EOS from the model's metadata: banned, so A runs as long as it is needed.
function eosId() {
  const bin = process.env.DS4_GGUF_BIN ?? process.env.DS4_SERVER_BIN.replace(/ds4-server$/, 'ds4-gguf');
  const info = execFileSync(bin, ['info', opt.model], { encoding: 'utf8', maxBuffer: 1 << 26 });
  const m = /tokenizer\.ggml\.eos_token_id\D+(\d+)/.exec(info);
  if (!m) throw new Error('no tokenizer.ggml.eos_token_id in the model');
  return Number(m[1]);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const p95 = (xs) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(0.95 * xs.length))];

// Streams A; onToken(i, t) is called at every content event; stops when
// shouldStop() says so (the client aborts) or at max_tokens.
async function streamA(origin, eos, maxTokens, onToken, shouldStop) {
  const controller = new AbortController();
  const res = await fetch(`${origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    signal: controller.signal,
    body: JSON.stringify({
      messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: maxTokens, stream: true,
      temperature: 0, thinking: { type: 'disabled' }, logit_bias: { [eos]: -100 },
    }),
  });
  if (res.status !== 200) throw new Error(`stream A: HTTP ${res.status} ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = '';
  let i = 0;
  try {
    for await (const bytes of res.body) {
      buffer += decoder.decode(bytes, { stream: true });
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (event.startsWith('data: {') && event.includes('"content"')) onToken(i++, performance.now());
      }
      if (shouldStop()) {
        controller.abort();
        break;
      }
    }
  } catch (err) {
    if (err.name !== 'AbortError') throw err;
  }
}

// A prompt of about n tokens (the server counts them), unique per run so
// that nothing of it is cached.
async function longPrompt(origin, n, run) {
  const words = (k) => Array.from({ length: k }, (_, i) => `w${(i * 7919 + run) % 10007}`).join(' ');
  const count = async (text) => {
    const r = await fetch(`${origin}/v1/messages/count_tokens`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: text }] }),
    });
    return (await r.json()).input_tokens;
  };
  let k = n;
  for (let i = 0; i < 4; ++i) {
    const got = await count(`run ${run}: ${words(k)}`);
    if (Math.abs(got - n) <= 8) break;
    k = Math.max(1, Math.round(k * n / got));
  }
  return `run ${run}: ${words(k)}`;
}

async function alone(origin, eos) {
  const times = [];
  await streamA(origin, eos, TOKENS + 1, (i, t) => times.push(t), () => false);
  return times.slice(1).map((t, i) => t - times[i]);
}

async function beside(origin, eos, prompt) {
  const times = [];
  let bStart = null;
  let bEnd = null;
  let bPromise = null;
  await streamA(origin, eos, CTX - 64, (i, t) => {
    times.push(t);
    if (i === 3) {
      bStart = performance.now();
      bPromise = fetch(`${origin}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          messages: [{ role: 'user', content: prompt }], max_tokens: 1, temperature: 0,
          thinking: { type: 'disabled' },
        }),
      }).then(async (r) => {
        if (r.status !== 200) throw new Error(`request B: HTTP ${r.status} ${await r.text()}`);
        await r.text();
        bEnd = performance.now();
      });
    }
  }, () => bEnd !== null);
  await bPromise;
  const gaps = [];
  for (let i = 1; i < times.length; ++i) {
    if (times[i - 1] >= bStart && times[i] <= bEnd) gaps.push(times[i] - times[i - 1]);
  }
  return { gaps, prefillMs: bEnd - bStart };
}

async function main() {
  const eos = eosId();
  const server = await startServer({
    model: opt.model, threads: Number(opt.threads), ctx: CTX,
    args: ['--batched-session', '2', '--max-decode-stall', opt['max-decode-stall']],
  });
  const origin = server.origin;
  try {
    await alone(origin, eos);  // warm-up: pages the weights in
    const ratios = [];
    for (let run = 0; run < RUNS; ++run) {
      const prompt = await longPrompt(origin, PROMPT_TOKENS, run);
      let a;
      let b;
      if (run % 2 === 0) {
        a = await alone(origin, eos);
        b = await beside(origin, eos, prompt);
      } else {
        b = await beside(origin, eos, prompt);
        a = await alone(origin, eos);
      }
      if (b.gaps.length === 0) throw new Error('stream A ended before request B');
      const ratio = mean(b.gaps) / mean(a);
      ratios.push(ratio);
      console.log(`run ${run}: alone mean ${mean(a).toFixed(1)} ms p95 ${p95(a).toFixed(1)} ms | beside a ` +
                  `${PROMPT_TOKENS}-token prefill (${(b.prefillMs / 1000).toFixed(1)} s, ${b.gaps.length} tokens) ` +
                  `mean ${mean(b.gaps).toFixed(1)} ms p95 ${p95(b.gaps).toFixed(1)} ms | ratio ${ratio.toFixed(2)}`);
    }
    console.log(`server-stall: median ratio ${median(ratios).toFixed(2)} over ${RUNS} runs ` +
                `(per-token latency beside a ${PROMPT_TOKENS}-token prefill / alone; --max-decode-stall ` +
                `${opt['max-decode-stall']}, ${opt.threads} threads)`);
  } finally {
    await server.stop();
  }
}

main().catch((err) => {
  console.error(`server-stall: FAIL ${err.stack ?? err}`);
  process.exit(1);
});
