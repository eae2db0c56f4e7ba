// Shared by the ds4-server client tests and the load test: a tiny random-weight
// model, a ds4-server started on a free port with its own lock file, SDK clients
// pointed at it, and assertions on what every API's reply must satisfy
// (PROTOCOL.md §3.4 ids, §5.5 shapes, §5.6 usage arithmetic).
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { existsSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

export const MODEL_NAME = 'deepseek-v4-flash';
export const CTX = 4096;

export const CALL_ID = /^call_[0-9a-f]{32}$/;
export const TOOLU_ID = /^toolu_[0-9a-f]{32}$/;
export const RESP_ID = /^resp_[0-9a-f]{24}$/;
export const MSG_ID = /^msg_[0-9a-f]{24}$/;
export const RS_ID = /^rs_[0-9a-f]{24}$/;
export const FC_ID = /^fc_[0-9a-f]{24}$/;
export const CHATCMPL_ID = /^chatcmpl-[0-9]+$/;
export const CMPL_ID = /^cmpl-[0-9]+$/;

function requiredEnv(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (the path of the built binary; CTest sets it)`);
  if (!existsSync(value)) throw new Error(`${name}=${value} does not exist (build it first)`);
  return value;
}

// Servers still running and temp folders made here are cleaned up when the
// test process ends, however it ends.
const tempDirs = [];
const liveServers = new Set();
process.on('exit', () => {
  for (const pid of liveServers) {
    try { process.kill(pid, 'SIGKILL'); } catch { /* already gone */ }
  }
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

export async function makeTempDir(tag) {
  const dir = await mkdtemp(path.join(os.tmpdir(), `ds4-sdk-${tag}-`));
  tempDirs.push(dir);
  return dir;
}

let modelPromise = null;

// DS4_TEST_MODEL when set, else a tiny f32 model generated once per process.
export function testModel() {
  if (process.env.DS4_TEST_MODEL) return Promise.resolve(process.env.DS4_TEST_MODEL);
  modelPromise ??= (async () => {
    const mkmodel = requiredEnv('DS4_MKMODEL_BIN');
    const dir = await makeTempDir('model');
    const out = path.join(dir, 'tiny.gguf');
    await promisify(execFile)(mkmodel, ['--preset', 'tiny', '--mix', 'f32', '--out', out]);
    return out;
  })();
  return modelPromise;
}

// Starts ds4-server on a free port. The lock file lives in a fresh temp folder
// so tests never collide with each other or with a user's server.
export async function startServer({ args = [], model, threads = 1, ctx = CTX, lockDir } = {}) {
  const bin = requiredEnv('DS4_SERVER_BIN');
  model ??= await testModel();
  lockDir ??= await makeTempDir('lock');
  const env = { ...process.env, DS4_LOCK_FILE: path.join(lockDir, 'ds4.lock') };
  delete env.DS4_API_KEY;
  const argv = ['-m', model, '--port', '0', '-c', String(ctx), '-t', String(threads), ...args];
  const child = spawn(bin, argv, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  liveServers.add(child.pid);
  let stderr = '';
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      liveServers.delete(child.pid);
      resolve({ code, signal });
    });
  });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`ds4-server did not start in 30 s:\n${stderr}`)), 30000);
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
      const m = /listening on http:\/\/[^\s:]+:(\d+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`ds4-server exited (code ${code}, signal ${signal}) before listening:\n${stderr}`));
    });
  });
  const origin = `http://127.0.0.1:${port}`;
  return {
    port,
    pid: child.pid,
    origin,
    exited,
    stderr: () => stderr,
    alive: () => child.exitCode === null && child.signalCode === null,
    // SIGTERM = clean shutdown (drains, saves the live session to the disk cache).
    async stop({ timeoutMs = 20000 } = {}) {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const result = await exited;
      clearTimeout(timer);
      return result;
    },
  };
}

export function openaiClient(server) {
  return new OpenAI({ apiKey: 'unused', baseURL: `${server.origin}/v1`, maxRetries: 0, timeout: 60000 });
}

export function anthropicClient(server) {
  return new Anthropic({ apiKey: 'unused', baseURL: server.origin, maxRetries: 0, timeout: 60000 });
}

// Raw JSON POST (for the fields the SDK types do not know, and the load test).
export async function postJson(server, route, body) {
  const res = await fetch(`${server.origin}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

const isCount = (n) => Number.isInteger(n) && n >= 0;

// OpenAI usage U (§5.6): total = prompt + completion; cached + written = prompt.
export function checkOpenAIUsage(u, { maxCompletion } = {}) {
  assert.ok(u, 'usage present');
  assert.ok(isCount(u.prompt_tokens) && u.prompt_tokens > 0, `prompt_tokens ${u.prompt_tokens}`);
  assert.ok(isCount(u.completion_tokens), `completion_tokens ${u.completion_tokens}`);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, 'total = prompt + completion');
  const d = u.prompt_tokens_details;
  assert.ok(d && isCount(d.cached_tokens) && isCount(d.cache_write_tokens), 'prompt_tokens_details');
  assert.equal(d.cached_tokens + d.cache_write_tokens, u.prompt_tokens, 'cached + written = prompt');
  if (maxCompletion !== undefined) assert.ok(u.completion_tokens <= maxCompletion, 'completion ≤ max_tokens');
}

// Responses usage UR (§5.6).
export function checkResponsesUsage(u, { maxOutput } = {}) {
  assert.ok(u, 'usage present');
  assert.ok(isCount(u.input_tokens) && u.input_tokens > 0, `input_tokens ${u.input_tokens}`);
  assert.ok(isCount(u.output_tokens), `output_tokens ${u.output_tokens}`);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens, 'total = input + output');
  const d = u.input_tokens_details;
  assert.ok(d && isCount(d.cached_tokens) && isCount(d.cache_write_tokens), 'input_tokens_details');
  assert.equal(d.cached_tokens + d.cache_write_tokens, u.input_tokens, 'cached + written = input');
  assert.deepEqual(u.output_tokens_details, { reasoning_tokens: 0 });
  if (maxOutput !== undefined) assert.ok(u.output_tokens <= maxOutput, 'output ≤ max_output_tokens');
}

// Anthropic usage UA (§5.6): the prompt splits into uncached input, cache read
// and cache creation; ds4 puts everything uncached under cache creation.
export function checkAnthropicUsage(u, { maxOutput } = {}) {
  assert.ok(u, 'usage present');
  for (const k of ['input_tokens', 'output_tokens', 'cache_read_input_tokens', 'cache_creation_input_tokens']) {
    assert.ok(isCount(u[k]), `${k} ${u[k]}`);
  }
  assert.ok(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens > 0, 'prompt tokens > 0');
  if (maxOutput !== undefined) assert.ok(u.output_tokens <= maxOutput, 'output ≤ max_tokens');
}

export const anthropicPromptTokens = (u) => u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;

// A finish reason and the token count agree: a length stop used the whole budget.
export function checkLengthStop(finishIsLength, completionTokens, maxTokens) {
  if (finishIsLength) assert.equal(completionTokens, maxTokens, 'length stop uses the whole budget');
  else assert.ok(completionTokens <= maxTokens);
}

// A long, fixed system prompt (well over 100 tokens on any tokenizer).
export const LONG_SYSTEM = [
  'You are the build assistant of a small C++ project.',
  'Always answer in short, plain sentences and never invent file names.',
  'The project is built with CMake and Ninja; tests use GoogleTest and CTest.',
  'When asked about a failure, first quote the exact error line, then the command that reproduces it,',
  'then the smallest change that fixes it, and finally how to check the fix.',
  'Prefer standard library facilities over third-party code, keep functions short,',
  'name things for what they are, and write comments that say why rather than what.',
  'Every answer must fit on one screen. Numbers are given with their units.',
  'If a question is ambiguous, state the assumption you make in one sentence before answering.',
  'Do not apologise, do not repeat the question, and do not add a summary at the end.',
].join(' ');

// JSON Schema check for the small schemas the tool tests use (object with
// typed properties, required keys, enums, no extra keys when forbidden).
export function validateAgainstSchema(value, schema, where = 'arguments') {
  const type = schema.type;
  if (type === 'object') {
    assert.ok(value && typeof value === 'object' && !Array.isArray(value), `${where} is an object`);
    for (const key of schema.required ?? []) assert.ok(key in value, `${where}.${key} is present`);
    for (const [key, v] of Object.entries(value)) {
      const sub = schema.properties?.[key];
      if (!sub) {
        assert.notEqual(schema.additionalProperties, false, `${where}.${key} is not in the schema`);
        continue;
      }
      validateAgainstSchema(v, sub, `${where}.${key}`);
    }
  } else if (type === 'string') {
    assert.equal(typeof value, 'string', `${where} is a string`);
    const chars = [...value].length;  // JSON Schema counts characters
    if (schema.maxLength !== undefined) assert.ok(chars <= schema.maxLength, `${where} has at most ${schema.maxLength} characters`);
    if (schema.minLength !== undefined) assert.ok(chars >= schema.minLength, `${where} has at least ${schema.minLength} characters`);
  } else if (type === 'integer') {
    assert.ok(Number.isInteger(value), `${where} is an integer`);
  } else if (type === 'number') {
    assert.equal(typeof value, 'number', `${where} is a number`);
  } else if (type === 'boolean') {
    assert.equal(typeof value, 'boolean', `${where} is a boolean`);
  }
  if (schema.enum) assert.ok(schema.enum.includes(value), `${where} is one of ${JSON.stringify(schema.enum)}`);
}
