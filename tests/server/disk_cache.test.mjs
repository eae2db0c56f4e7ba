// Disk KV cache across a restart (PROTOCOL.md §6.3–6.6): a long system prompt
// is saved (cold save of the shared prefix, shutdown save of the live session
// on SIGTERM), and a new server on the same folder answers the same system
// prompt with another question from the cached prefix in every API.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdir, open } from 'node:fs/promises';
import path from 'node:path';

import {
  startServer, makeTempDir, openaiClient, anthropicClient, checkOpenAIUsage, checkResponsesUsage,
  checkAnthropicUsage, MODEL_NAME, LONG_SYSTEM,
} from './support.mjs';

const servers = [];
after(async () => {
  for (const s of servers) await s.stop();
});

const CACHE_ARGS = (dir) => [
  '--kv-disk-dir', dir, '--kv-cache-min-tokens', '16',
  '--kv-cache-boundary-align-tokens', '16', '--kv-cache-boundary-trim-tokens', '4',
];

async function kvFiles(dir) {
  const names = (await readdir(dir)).filter((n) => n.endsWith('.kv'));
  const files = [];
  for (const name of names) {
    assert.match(name, /^[0-9a-f]{40}\.kv$/, 'file name = SHA1 hex of the key text');
    const fh = await open(path.join(dir, name));
    const header = Buffer.alloc(48);
    await fh.read(header, 0, 48, 0);
    await fh.close();
    assert.equal(header.subarray(0, 3).toString('latin1'), 'KVC', `${name} magic`);
    assert.equal(header[3], 1, `${name} version`);
    files.push({ name, reason: header[5], tokens: header.readUInt32LE(8), hits: header.readUInt32LE(12) });
  }
  return files;
}

test('a long system prompt is cached on disk and reused after a restart', async () => {
  const dir = await makeTempDir('kv');
  const base = { model: MODEL_NAME, max_tokens: 8, thinking: { type: 'disabled' }, temperature: 0 };

  const first = await startServer({ args: CACHE_ARGS(dir) });
  servers.push(first);
  const r1 = await openaiClient(first).chat.completions.create({
    ...base, messages: [{ role: 'system', content: LONG_SYSTEM }, { role: 'user', content: 'How do I run the tests?' }],
  });
  checkOpenAIUsage(r1.usage);
  assert.ok(r1.usage.prompt_tokens >= 100, `a long prompt (${r1.usage.prompt_tokens} tokens)`);
  assert.equal(r1.usage.prompt_tokens_details.cached_tokens, 0, 'empty cache folder: a cold start');
  const stopped = await first.stop();
  assert.equal(stopped.code, 0, `clean exit on SIGTERM\n${first.stderr()}`);

  const saved = await kvFiles(dir);
  assert.ok(saved.length >= 1, 'KV files were written');
  const REASON_COLD = 1;
  const REASON_SHUTDOWN = 4;
  assert.ok(saved.some((f) => f.reason === REASON_COLD), 'a cold save of the shared prefix');
  assert.ok(saved.some((f) => f.reason === REASON_SHUTDOWN), 'a shutdown save of the live session');
  for (const f of saved) assert.ok(f.tokens >= 16 && f.tokens <= r1.usage.prompt_tokens + r1.usage.completion_tokens);

  const second = await startServer({ args: CACHE_ARGS(dir) });
  servers.push(second);
  const openai = openaiClient(second);
  const r2 = await openai.chat.completions.create({
    ...base, messages: [{ role: 'system', content: LONG_SYSTEM }, { role: 'user', content: 'Where is the build folder?' }],
  });
  checkOpenAIUsage(r2.usage);
  const cached = r2.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= 100, `the system prompt came from the disk cache (cached ${cached})`);
  assert.ok(cached < r2.usage.prompt_tokens, 'the new question is not cached');
  const afterHit = await kvFiles(dir);
  assert.ok(afterHit.some((f) => f.hits >= 1), 'the hit was counted in the file header');

  // The other APIs render the same system prompt to the same prefix: each new
  // question is a live-session miss that the disk cache answers.
  const a = await anthropicClient(second).messages.create({
    ...base, system: LONG_SYSTEM, messages: [{ role: 'user', content: 'Which compiler is used?' }],
  });
  checkAnthropicUsage(a.usage);
  assert.ok(a.usage.cache_read_input_tokens >= 100, `messages: cache_read ${a.usage.cache_read_input_tokens}`);

  const r = await openai.responses.create({
    model: MODEL_NAME, instructions: LONG_SYSTEM, input: 'What does a test need?', max_output_tokens: 8,
    reasoning: { effort: 'none' }, temperature: 0,
  });
  checkResponsesUsage(r.usage);
  assert.ok(r.usage.input_tokens_details.cached_tokens >= 100,
    `responses: cached ${r.usage.input_tokens_details.cached_tokens}`);
});
