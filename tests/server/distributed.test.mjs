// ds4-server as the coordinator of a pipeline (issue 25) with a ds4-worker
// process serving layers 2:output over ZeroMQ/CURVE on 127.0.0.1. Truth: the
// same model in one ds4-server; greedy replies must be the same text. Then
// the faults and the door: a worker killed with SIGKILL makes the next
// request fail with 503 naming the missing stage within 5 s while the
// server stays up and /health reports the incomplete route; a worker started
// again serves within 5 s of joining; a worker with another key never
// joins (the coordinator logs the failed handshake); a worker whose layers
// overlap the coordinator's is refused with the reason and exits 1.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

import { startServer, makeTempDir, testModel, postJson, MODEL_NAME, CTX } from './support.mjs';

const workerBin = process.env.DS4_WORKER_BIN;
if (!workerBin || !existsSync(workerBin)) throw new Error('DS4_WORKER_BIN is not set to the built ds4-worker');

let single;
let coordinator;
let distPort;
let keyFile;
const workers = new Set();

async function genKey(dir, name) {
  const file = path.join(dir, name);
  await promisify(execFile)(workerBin, ['--gen-key', file]);
  return file;
}

function startWorker({ key, layers = '2:output' }) {
  const child = spawn(workerBin, ['-m', modelPath, '--coordinator', `127.0.0.1:${distPort}`, '--layers', layers,
    '--dist-key', key, '-c', String(CTX), '-t', '1', '--name', `w${workers.size}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (c) => { stderr += c; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => { workers.delete(child); resolve({ code, signal }); }));
  workers.add(child);
  return { child, exited, stderr: () => stderr };
}

async function waitFor(predicate, ms, what) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if (await predicate()) return Date.now() - t0;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`not within ${ms} ms: ${what}`);
}

const health = async () => {
  const res = await fetch(`${coordinator.origin}/health`);
  return { status: res.status, json: await res.json() };
};

const request = {
  model: MODEL_NAME, max_tokens: 12, temperature: 0, thinking: { type: 'disabled' },
  messages: [{ role: 'user', content: 'Name three prime numbers.' }],
};

let modelPath;

before(async () => {
  modelPath = await testModel();
  const dir = await makeTempDir('dist');
  keyFile = await genKey(dir, 'cluster.key');
  single = await startServer({ args: ['--cache-ram', '0'] });
  coordinator = await startServer({ args: ['--cache-ram', '0', '--dist-listen', '127.0.0.1:0', '--dist-key', keyFile,
    '--layers', '0:2'] });
  const m = /dist: coordinator on tcp:\/\/127\.0\.0\.1:(\d+)/.exec(coordinator.stderr());
  assert.ok(m, `the coordinator prints its endpoint:\n${coordinator.stderr()}`);
  distPort = Number(m[1]);
});

after(async () => {
  for (const w of workers) w.kill('SIGKILL');
  for (const s of [single, coordinator]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, `clean exit on SIGTERM\n${s.stderr()}`);
  }
});

test('without workers the route is incomplete: /health and requests answer 503 naming the layers', async () => {
  const h = await health();
  assert.equal(h.status, 503);
  assert.equal(h.json.route.complete, false);
  assert.equal(h.json.route.missing, '2:output');
  const r = await postJson(coordinator, '/v1/chat/completions', request);
  assert.equal(r.status, 503, r.text);
  assert.match(r.text, /no worker serves layers 2:output/);
});

test('a worker with another key never joins; overlapping layers are refused by name', async () => {
  const dir = await makeTempDir('dist-other');
  const intruder = startWorker({ key: await genKey(dir, 'other.key') });
  await waitFor(() => /handshake with .* failed|refused/.test(coordinator.stderr()), 5000, 'the failed handshake is logged');
  assert.equal((await health()).status, 503, 'the intruder does not complete the route');
  intruder.child.kill('SIGKILL');
  await intruder.exited;

  const overlap = startWorker({ key: keyFile, layers: '1:output' });
  const { code } = await overlap.exited;
  assert.equal(code, 1);
  assert.match(overlap.stderr(), /refused this worker: layers 1:output overlap the coordinator's own 0:2/);
});

test('through the worker the replies equal one process; SIGKILL -> 503 within 5 s; a returning worker serves', async () => {
  let worker = startWorker({ key: keyFile });
  await waitFor(async () => (await health()).status === 200, 15000, 'the worker joins');
  const [a, b] = [await postJson(coordinator, '/v1/chat/completions', request), await postJson(single, '/v1/chat/completions', request)];
  assert.equal(a.status, 200, a.text);
  assert.equal(a.json.choices[0].message.content, b.json.choices[0].message.content, 'the same greedy reply');
  assert.equal(a.json.usage.completion_tokens, b.json.usage.completion_tokens);
  const metrics = await (await fetch(`${coordinator.origin}/metrics`)).text();
  assert.match(metrics, /^ds4_dist_route_complete 1$/m);
  const served = /^ds4_dist_stage_requests_total\{layers="2:output"\} (\d+)/m.exec(metrics);
  assert.ok(served && Number(served[1]) > 0, 'the stage answered evaluations');

  worker.child.kill('SIGKILL');
  await worker.exited;
  const killed = Date.now();
  const r = await postJson(coordinator, '/v1/chat/completions', request);
  assert.equal(r.status, 503, r.text);
  assert.match(r.text, /2:output/);
  assert.ok(Date.now() - killed < 5000, `the error came ${Date.now() - killed} ms after the kill`);
  const h = await health();
  assert.equal(h.status, 503);
  assert.equal(h.json.route.missing, '2:output');
  assert.ok(coordinator.alive(), 'the server stays up');

  worker = startWorker({ key: keyFile });
  await waitFor(() => /joined the coordinator/.test(worker.stderr()), 15000, 'the worker rejoins');
  const joined = Date.now();
  let again;
  await waitFor(async () => {
    again = await postJson(coordinator, '/v1/chat/completions', request);
    return again.status === 200;
  }, 5000, 'a request succeeds after the worker joined');
  assert.ok(Date.now() - joined < 5000);
  assert.equal(again.json.choices[0].message.content, b.json.choices[0].message.content);
  worker.child.kill('SIGTERM');
  assert.equal((await worker.exited).code, 0, 'SIGTERM stops a worker cleanly');
});
