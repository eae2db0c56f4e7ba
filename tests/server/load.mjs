#!/usr/bin/env node
// Load test for ds4-server (standalone; not part of CTest):
//   DS4_SERVER_BIN=build/bin/ds4-server DS4_MKMODEL_BIN=build/bin/ds4-mkmodel \
//     node tests/server/load.mjs [--clients 32] [--duration 60] [--threads 1] [--seed 1] [--model FILE]
//                                [--abort-rate 0.06] [--warmup S] [--server-log FILE] [--batched-session N]
//                                [--cache-ram MIB] [--server-args="--max-decode-stall 4 ..."]
// Starts a fresh server on the tiny random model and runs N concurrent clients
// for D seconds, mixing chat, completions, Responses and Messages, streamed
// (mostly) and not, max_tokens 16–64, some aborted mid-stream by the client.
// Every raw SSE stream is parsed and checked for a proper ending ([DONE] /
// message_stop / response.completed|incomplete). Fails (exit 1) on any 5xx, any
// connection error, any malformed stream, a dead server at the end, an unclean
// shutdown, or RSS growth > 10 % after warm-up (sampled from /proc every
// second; the anonymous part is reported beside it).
// Reports latency p50/p95 (all and per API), aggregate generated tokens/s
// (from /metrics) and the server's mean batch size and queue wait.
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { startServer, MODEL_NAME, LONG_SYSTEM } from './support.mjs';

const { values: opt } = parseArgs({
  options: {
    clients: { type: 'string', default: '32' },
    duration: { type: 'string', default: '60' },
    threads: { type: 'string', default: '1' },
    seed: { type: 'string', default: '1' },
    model: { type: 'string' },
    'abort-rate': { type: 'string', default: '0.06' },
    warmup: { type: 'string', default: '' },
    'server-log': { type: 'string' },  // write the server's stderr here at the end
    'batched-session': { type: 'string', default: '1' },  // the server's slots (requests run at once)
    // The server's RAM prefix cache. Small by default so that it fills up within
    // the warm-up and the RSS check then sees its bound hold (0: off).
    'cache-ram': { type: 'string', default: '64' },
    'server-args': { type: 'string', default: '' },  // more ds4-server flags, space-separated
  },
});
const CLIENTS = Number(opt.clients);
const DURATION_S = Number(opt.duration);
const ABORT_RATE = Number(opt['abort-rate']);
// RSS is compared from the end of the warm-up, the first half of the run (at
// most 30 s): it fills up to a plateau until the steps carrying the most
// prompt tokens at once (the prompts that arrive together share one step, up
// to --prefill-chunk tokens) have sized the pass buffers and every connection
// thread has served; a leak still shows over the second half.
const WARMUP_S = opt.warmup ? Number(opt.warmup) : Math.min(30, Math.max(2, Math.round(DURATION_S / 2)));
const RSS_GROWTH_LIMIT = 0.10;

// xorshift64*: one reproducible stream of choices per client.
function rng(seed) {
  let s = BigInt(seed) || 0x9e3779b97f4a7c15n;
  return () => {
    s ^= s >> 12n; s ^= (s << 25n) & 0xffffffffffffffffn; s ^= s >> 27n;
    return Number(((s * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 40n) / 2 ** 24;
  };
}

const QUESTIONS = [
  'Name three prime numbers.', 'What is the capital of Italy?', 'Write a haiku about rain.',
  'Explain recursion in one sentence.', 'How many legs does a spider have?', 'List four colours.',
  'Translate "good morning" into French.', 'What is 12 times 12?',
];
const TOOL = {
  name: 'get_weather', description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

// One random request: which API, streamed or not, its body.
function makeRequest(rand) {
  const apis = ['chat', 'completions', 'responses', 'messages'];
  const api = apis[Math.floor(rand() * apis.length)];
  const stream = rand() < 0.8;
  const maxTokens = 16 + Math.floor(rand() * 49);
  const think = rand() < 0.35;
  const useTools = rand() < 0.2;
  const longSystem = rand() < 0.3;
  const question = QUESTIONS[Math.floor(rand() * QUESTIONS.length)];
  const system = longSystem ? LONG_SYSTEM : 'You are a concise assistant.';
  let path;
  let body;
  switch (api) {
    case 'chat':
      path = '/v1/chat/completions';
      body = {
        model: MODEL_NAME, max_tokens: maxTokens, stream, temperature: 0,
        messages: [{ role: 'system', content: system }, { role: 'user', content: question }],
        ...(think ? {} : { thinking: { type: 'disabled' } }),
        ...(stream && rand() < 0.5 ? { stream_options: { include_usage: true } } : {}),
        ...(useTools ? { tools: [{ type: 'function', function: TOOL }] } : {}),
      };
      break;
    case 'completions':
      path = '/v1/completions';
      body = { model: MODEL_NAME, prompt: question, max_tokens: maxTokens, stream, temperature: 0, think };
      break;
    case 'responses':
      path = '/v1/responses';
      body = {
        model: MODEL_NAME, instructions: system, input: question, max_output_tokens: maxTokens, stream, temperature: 0,
        reasoning: think ? { effort: 'high', ...(rand() < 0.5 ? { summary: 'auto' } : {}) } : { effort: 'none' },
        ...(useTools ? { tools: [{ type: 'function', ...TOOL }] } : {}),
      };
      break;
    default:
      path = '/v1/messages';
      body = {
        model: MODEL_NAME, system, max_tokens: maxTokens, stream, temperature: 0,
        messages: [{ role: 'user', content: question }],
        thinking: think ? { type: 'enabled', budget_tokens: 1024 } : { type: 'disabled' },
        ...(useTools ? { tools: [{ name: TOOL.name, description: TOOL.description, input_schema: TOOL.parameters }] } : {}),
      };
  }
  const abortAfterEvents = stream && rand() < ABORT_RATE ? 1 + Math.floor(rand() * 6) : 0;
  return { api, path, body, stream, maxTokens, abortAfterEvents };
}

// A stream or body that breaks the protocol (as opposed to a network failure).
class Malformed extends Error {}

// Splits an SSE body into events: { event, data, comment } per blank-line block.
function* sseEvents(buffer) {
  let rest = buffer;
  for (;;) {
    const end = rest.indexOf('\n\n');
    if (end < 0) return rest;
    const block = rest.slice(0, end);
    rest = rest.slice(end + 2);
    const ev = { event: null, data: null, comment: false };
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) ev.comment = true;
      else if (line.startsWith('event: ')) ev.event = line.slice(7);
      else if (line.startsWith('data: ')) ev.data = ev.data === null ? line.slice(6) : `${ev.data}\n${line.slice(6)}`;
      else throw new Malformed(`malformed SSE line ${JSON.stringify(line.slice(0, 80))}`);
    }
    yield ev;
  }
}

// Checks one stream's event sequence as it arrives; `done` once it ended properly.
class StreamChecker {
  constructor(api) {
    this.api = api;
    this.count = 0;
    this.done = false;
    this.finished = false;  // chat/completions: a finish_reason was seen
    this.seq = 0;
  }

  push(ev) {
    if (ev.comment && ev.data === null) return;  // keep-alive
    if (this.done) throw new Malformed('event after the end of the stream');
    if (ev.data === null) throw new Malformed('event without data');
    this.count++;
    if (this.api === 'chat' || this.api === 'completions') {
      if (ev.event !== null) throw new Malformed('OpenAI streams have no event: lines');
      if (ev.data === '[DONE]') {
        if (!this.finished) throw new Malformed('[DONE] before a finish_reason');
        this.done = true;
        return;
      }
      const chunk = JSON.parse(ev.data);
      if (chunk.error) throw new Malformed(`stream error event: ${ev.data}`);
      const want = this.api === 'chat' ? 'chat.completion.chunk' : 'text_completion';
      if (chunk.object !== want) throw new Malformed(`object ${chunk.object}`);
      if (chunk.choices.length === 0) {
        if (!chunk.usage || !this.finished) throw new Malformed('empty choices without usage after finish');
        return;
      }
      if (this.finished) throw new Malformed('choice after finish_reason');
      if (chunk.choices[0].finish_reason) {
        if (chunk.choices[0].finish_reason === 'error') throw new Malformed('finish_reason error');
        this.finished = true;
      }
    } else if (this.api === 'responses') {
      if (ev.event !== null) throw new Malformed('Responses streams have no event: lines');
      const body = JSON.parse(ev.data);
      if (body.sequence_number !== this.seq) throw new Malformed(`sequence_number ${body.sequence_number} != ${this.seq}`);
      if (Object.keys(body)[1] !== 'sequence_number') throw new Malformed('sequence_number is not the 2nd field');
      this.seq++;
      if (this.count === 1 && body.type !== 'response.created') throw new Malformed(`first event ${body.type}`);
      if (body.type === 'response.completed' || body.type === 'response.incomplete') this.done = true;
      else if (body.type === 'response.failed' || body.type === 'error') throw new Malformed(`stream failed: ${ev.data}`);
    } else {
      const body = JSON.parse(ev.data);
      if (ev.event !== body.type) throw new Malformed(`event: ${ev.event} but data type ${body.type}`);
      if (this.count === 1 && body.type !== 'message_start') throw new Malformed(`first event ${body.type}`);
      if (body.type === 'error') throw new Malformed(`stream error: ${ev.data}`);
      if (body.type === 'message_stop') this.done = true;
    }
  }
}

const stats = {
  requests: 0, ok: 0, aborted: 0, status: new Map(), fiveXX: 0, connErrors: 0, malformed: 0, other4xx: 0,
  latencies: [], byApi: new Map(), failures: [],
};

function fail(kind, req, detail) {
  if (stats.failures.length < 20) {
    stats.failures.push(`${kind}: ${req.api}${req.stream ? ' stream' : ''} ${String(detail).slice(0, 300)}`);
  }
}

async function runOne(origin, req) {
  const started = performance.now();
  const controller = new AbortController();
  let aborted = false;
  let res;
  stats.requests++;
  try {
    res = await fetch(origin + req.path, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(req.body),
      signal: controller.signal,
    });
  } catch (err) {
    stats.connErrors++;
    fail('connection', req, err.cause?.code ?? err.message);
    return;
  }
  stats.status.set(res.status, (stats.status.get(res.status) ?? 0) + 1);
  if (res.status >= 500) {
    stats.fiveXX++;
    fail(`HTTP ${res.status}`, req, await res.text().catch(() => ''));
    return;
  }
  if (res.status !== 200) {
    stats.other4xx++;
    fail(`HTTP ${res.status}`, req, await res.text().catch(() => ''));
    return;
  }
  try {
    if (!req.stream) {
      const json = JSON.parse(await res.text());
      if (!json.usage) throw new Malformed('no usage');
    } else {
      if (!String(res.headers.get('content-type')).startsWith('text/event-stream')) {
        throw new Malformed(`content-type ${res.headers.get('content-type')}`);
      }
      const checker = new StreamChecker(req.api);
      const decoder = new TextDecoder();
      let buffer = '';
      for await (const bytes of res.body) {
        buffer += decoder.decode(bytes, { stream: true });
        const it = sseEvents(buffer);
        for (;;) {
          const { value, done } = it.next();
          if (done) { buffer = value; break; }
          checker.push(value);
          if (req.abortAfterEvents && checker.count >= req.abortAfterEvents && !checker.done) {
            aborted = true;
            controller.abort();
            break;
          }
        }
        if (aborted) break;
      }
      if (!aborted) {
        buffer += decoder.decode();
        if (buffer.trim() !== '') throw new Malformed(`trailing bytes after the last event: ${JSON.stringify(buffer.slice(0, 80))}`);
        if (!checker.done) throw new Malformed(`stream ended without its final event after ${checker.count} events`);
      }
    }
  } catch (err) {
    if (aborted || err.name === 'AbortError') {
      aborted = true;
    } else if (err instanceof Malformed || err instanceof SyntaxError) {
      stats.malformed++;
      fail('malformed', req, err.message);
      return;
    } else {
      stats.connErrors++;
      fail('connection', req, err.cause?.code ?? err.message);
      return;
    }
  }
  if (aborted) {
    stats.aborted++;
    return;
  }
  const ms = performance.now() - started;
  stats.ok++;
  stats.latencies.push(ms);
  const key = `${req.api}${req.stream ? '' : ' (non-stream)'}`;
  if (!stats.byApi.has(key)) stats.byApi.set(key, []);
  stats.byApi.get(key).push(ms);
}

function rssKiB(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

// Anonymous vs file-backed (the mmapped model) resident memory, for the summary.
function rssSplit(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const field = (name) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN);
    return { anon: field('RssAnon'), file: field('RssFile') };
  } catch {
    return null;
  }
}

const pct = (xs, p) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const mib = (kib) => (kib / 1024).toFixed(1);

// Sample values from the server's /metrics text, by exact sample name.
async function scrape(origin) {
  const text = await (await fetch(`${origin}/metrics`)).text();
  const values = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    values.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return values;
}

async function main() {
  const server = await startServer({
    model: opt.model, threads: Number(opt.threads), args: ['--batched-session', opt['batched-session'], '--cache-ram', opt['cache-ram'], ...opt['server-args'].split(' ').filter(Boolean)],
  });
  const origin = server.origin;
  const before = await scrape(origin);
  const t0 = performance.now();
  const samples = [];  // [seconds, KiB, anonymous KiB]
  const sample = (t) => {
    const kib = rssKiB(server.pid);
    const split = rssSplit(server.pid);
    if (kib !== null && split) samples.push([t, kib, split.anon]);
  };
  const sampler = setInterval(() => sample((performance.now() - t0) / 1000), 1000);
  sample(0);

  const deadline = t0 + DURATION_S * 1000;
  const clients = Array.from({ length: CLIENTS }, async (_, i) => {
    const rand = rng(Number(opt.seed) * 1000003 + i + 1);
    while (performance.now() < deadline) await runOne(origin, makeRequest(rand));
  });
  await Promise.all(clients);
  const elapsed = (performance.now() - t0) / 1000;
  clearInterval(sampler);
  const after = await scrape(origin).catch(() => new Map());
  const delta = (name) => (after.get(name) ?? NaN) - (before.get(name) ?? 0);
  const generatedTps = delta('ds4_generated_tokens_total') / elapsed;
  const meanBatch = delta('ds4_batch_sessions_sum') / delta('ds4_batch_sessions_count');
  const meanQueueMs = 1000 * delta('ds4_queue_wait_seconds_sum') / delta('ds4_queue_wait_seconds_count');
  const ramHits = delta('ds4_cache_decisions_total{source="ram"}');
  const decisions = [...after.keys()].filter((k) => k.startsWith('ds4_cache_decisions_total{'))
    .reduce((sum, k) => sum + delta(k), 0);
  const ramMiB = (after.get('ds4_ram_cache_bytes') ?? 0) / 2 ** 20;
  sample(elapsed);

  // The server must still answer, deterministically, after the storm.
  let alive = server.alive();
  if (alive) {
    try {
      const models = await fetch(`${origin}/v1/models`);
      const probe = await fetch(`${origin}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'ping' }], max_tokens: 4, think: false, temperature: 0 }),
      });
      alive = models.status === 200 && probe.status === 200 && (await probe.json()).choices.length === 1;
    } catch {
      alive = false;
    }
  }
  const endRss = rssKiB(server.pid);
  const endSplit = rssSplit(server.pid);
  const stop = await server.stop({ timeoutMs: 30000 });
  const cleanExit = stop.code === 0;
  if (opt['server-log']) writeFileSync(opt['server-log'], server.stderr());

  const valid = samples;
  const startRss = valid[0][1];
  const maxRss = Math.max(...valid.map(([, k]) => k), endRss ?? 0);
  const warm = valid.find(([t]) => t >= WARMUP_S) ?? valid.at(-1);
  const lastRss = endRss ?? valid.at(-1)[1];
  const lastAnon = endSplit?.anon ?? valid.at(-1)[2];
  const growth = (lastRss - warm[1]) / warm[1];
  const rssFlag = growth > RSS_GROWTH_LIMIT;

  const statusText = [...stats.status].sort((a, b) => a[0] - b[0]).map(([s, n]) => `${s}:${n}`).join(' ');
  console.log(`clients ${CLIENTS}, duration ${elapsed.toFixed(1)} s, server threads ${opt.threads}, ` +
              `batched sessions ${opt['batched-session']}, RAM prefix cache ${opt['cache-ram']} MiB`);
  console.log(`prompts from the RAM prefix cache ${ramHits} of ${decisions}; it holds ${ramMiB.toFixed(1)} MiB at the end`);
  console.log(`aggregate ${generatedTps.toFixed(1)} generated tokens/s; mean sessions per step ${meanBatch.toFixed(2)}; ` +
              `mean queue wait ${meanQueueMs.toFixed(0)} ms`);
  console.log(`HTTP status counts: ${statusText}`);
  for (const [key, xs] of [...stats.byApi].sort()) {
    console.log(`  ${key.padEnd(24)} n=${String(xs.length).padStart(5)}  p50 ${pct(xs, 50).toFixed(0)} ms  p95 ${pct(xs, 95).toFixed(0)} ms`);
  }
  console.log(`RSS (MiB): start ${mib(startRss)}, after ${warm[0].toFixed(0)} s warm-up ${mib(warm[1])} ` +
              `(anonymous ${mib(warm[2])}), end ${mib(lastRss)} (anonymous ${mib(lastAnon)}), max ${mib(maxRss)}; ` +
              `growth after warm-up ${(growth * 100).toFixed(1)} %${rssFlag ? ' (> 10 %: FLAGGED)' : ''}` +
              (endSplit ? `; at the end file-backed (the model) ${mib(endSplit.file)}` : ''));
  const every5 = valid.filter(([t], i) => i === 0 || Math.floor(t / 5) !== Math.floor(valid[i - 1][0] / 5));
  console.log(`RSS every 5 s (MiB): ${every5.map(([, k]) => mib(k)).join(' ')}; anonymous ${every5.map(([, , a]) => mib(a)).join(' ')}`);
  for (const f of stats.failures) console.log(`  failure ${f}`);
  if (!cleanExit) console.log(`server exit on SIGTERM: ${JSON.stringify(stop)}\n${server.stderr().slice(-2000)}`);

  const ok = stats.fiveXX === 0 && stats.connErrors === 0 && stats.malformed === 0 && stats.other4xx === 0 &&
             alive && cleanExit && !rssFlag && stats.ok > 0;
  console.log(`load: ${ok ? 'PASS' : 'FAIL'} requests ${stats.requests} (completed ${stats.ok}, aborted ${stats.aborted}) ` +
              `in ${elapsed.toFixed(1)} s = ${(stats.ok / elapsed).toFixed(1)} req/s; latency p50 ${pct(stats.latencies, 50).toFixed(0)} ms ` +
              `p95 ${pct(stats.latencies, 95).toFixed(0)} ms; aggregate ${generatedTps.toFixed(1)} tok/s; 5xx ${stats.fiveXX}, 4xx ${stats.other4xx}, ` +
              `connection errors ${stats.connErrors}, malformed streams ${stats.malformed}; alive ${alive}, clean exit ${cleanExit}; ` +
              `RSS start ${mib(startRss)} end ${mib(lastRss)} max ${mib(maxRss)} MiB (growth ${(growth * 100).toFixed(1)} %)`);
  process.exit(ok ? 0 : 1);
}

main().catch((err) => {
  console.error(`load: FAIL ${err.stack ?? err}`);
  process.exit(1);
});
