// The RAM prefix cache (--cache-ram, issue 23): a conversation under a system
// prompt another one already evaluated starts from its head, the same request
// again starts generating at once, and a conversation whose slot was taken by
// another client resumes where it was. Truth: a server with the cache off
// (--cache-ram 0) evaluates every prompt itself; greedy replies must be the
// same text, and its usage shows what it could not reuse.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, openaiClient, checkOpenAIUsage, MODEL_NAME, LONG_SYSTEM } from './support.mjs';

let withRam;
let noRam;

before(async () => {
  // One slot each: every new conversation replaces the live one.
  [withRam, noRam] = await Promise.all([
    startServer({ args: ['--batched-session', '1'] }),
    startServer({ args: ['--batched-session', '1', '--cache-ram', '0'] }),
  ]);
});

after(async () => {
  for (const s of [withRam, noRam]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, `clean exit on SIGTERM\n${s.stderr()}`);
  }
});

const base = { model: MODEL_NAME, max_tokens: 12, thinking: { type: 'disabled' }, temperature: 0 };
const chat = (server, messages) => openaiClient(server).chat.completions.create({ ...base, messages });
const ask = (system, question) => [{ role: 'system', content: system }, { role: 'user', content: question }];
const cachedOf = (r) => r.usage.prompt_tokens_details.cached_tokens;

test('a new conversation under the same system prompt starts from its head', async () => {
  for (const s of [withRam, noRam]) await chat(s, ask(LONG_SYSTEM, 'Which build tool does the project use?'));
  const second = ask(LONG_SYSTEM, 'Where do the tests live?');
  const [hit, cold] = [await chat(withRam, second), await chat(noRam, second)];
  checkOpenAIUsage(hit.usage);
  assert.equal(cachedOf(cold), 0, 'without the cache the other conversation in the slot gives nothing');
  assert.ok(cachedOf(hit) >= 100, `the system prompt came from RAM (cached ${cachedOf(hit)})`);
  assert.ok(cachedOf(hit) < hit.usage.prompt_tokens, 'the new question is not cached');
  assert.equal(hit.choices[0].message.content, cold.choices[0].message.content, 'the same greedy reply');
});

test('the same request again starts generating at once', async () => {
  const request = ask(LONG_SYSTEM, 'Name one test framework the project uses.');
  const first = await chat(withRam, request);
  await chat(withRam, ask('You are a poet.', 'Write a line about the sea.'));  // takes the slot
  const again = await chat(withRam, request);
  checkOpenAIUsage(again.usage);
  assert.equal(cachedOf(again), again.usage.prompt_tokens, 'the whole prompt came from RAM');
  const cold = await chat(noRam, request);
  assert.equal(again.choices[0].message.content, first.choices[0].message.content);
  assert.equal(again.choices[0].message.content, cold.choices[0].message.content);
});

test('a conversation whose slot was taken resumes where it was', async () => {
  const turn = async (server) => {
    const messages = ask('You answer arithmetic questions in one sentence.', 'What is seven times six?');
    const t1 = await chat(server, messages);
    await chat(server, ask('You translate into French.', 'Good evening, friends.'));  // takes the slot
    messages.push(t1.choices[0].message, { role: 'user', content: 'And seven times seven?' });
    const t2 = await chat(server, messages);
    checkOpenAIUsage(t2.usage);
    return { t1, t2 };
  };
  const ram = await turn(withRam);
  const cold = await turn(noRam);
  assert.ok(cachedOf(ram.t2) >= ram.t1.usage.prompt_tokens,
    `turn 2 reuses turn 1 and its reply (cached ${cachedOf(ram.t2)}, turn 1 prompt ${ram.t1.usage.prompt_tokens})`);
  assert.equal(cachedOf(cold.t2), 0);
  assert.equal(ram.t2.choices[0].message.content, cold.t2.choices[0].message.content);
});

test('/metrics counts the RAM hits and what the cache holds', async () => {
  const text = await (await fetch(`${withRam.origin}/metrics`)).text();
  const value = (name) => Number(new RegExp(`^${name.replace(/[{}"]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1]);
  assert.ok(value('ds4_cache_decisions_total{source="ram"}') >= 3, text);
  assert.ok(value('ds4_ram_cache_entries') >= 2);
  assert.ok(value('ds4_ram_cache_bytes') > 0);
  assert.ok(value('ds4_ram_cache_stores_total') >= value('ds4_ram_cache_entries'));
  const off = await (await fetch(`${noRam.origin}/metrics`)).text();
  assert.match(off, /^ds4_cache_decisions_total\{source="ram"\} 0$/m);
  assert.match(off, /^ds4_ram_cache_entries 0$/m);
});
