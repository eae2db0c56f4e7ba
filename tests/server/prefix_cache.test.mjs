// Multi-turn prefix reuse (PROTOCOL.md §6.1–6.2): the second turn re-sends the
// first turn and the reply, so it continues on the live KV, and each API
// reports the reused prefix in its own usage field (§5.6).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import {
  startServer, openaiClient, anthropicClient, checkOpenAIUsage, checkResponsesUsage, checkAnthropicUsage,
  anthropicPromptTokens, MODEL_NAME,
} from './support.mjs';
import { collectChat } from './streams.mjs';

let server;
let openai;
let anthropic;

before(async () => {
  server = await startServer();
  openai = openaiClient(server);
  anthropic = anthropicClient(server);
});

after(async () => {
  if (!server) return;  // start failed; that error is already reported
  const { code } = await server.stop();
  assert.equal(code, 0, `clean exit on SIGTERM\n${server.stderr()}`);
});

const SYSTEM = 'You answer questions about arithmetic in one short sentence.';
const Q1 = 'What is two plus two?';
const Q2 = 'And three plus three?';
const Q3 = 'And four plus four?';

test('chat: turns 2 and 3 reuse everything before them', async () => {
  const base = { model: MODEL_NAME, max_tokens: 16, thinking: { type: 'disabled' }, temperature: 0 };
  const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: Q1 }];
  const t1 = await openai.chat.completions.create({ ...base, messages });
  checkOpenAIUsage(t1.usage);
  messages.push(t1.choices[0].message, { role: 'user', content: Q2 });

  const t2 = await openai.chat.completions.create({ ...base, messages });
  checkOpenAIUsage(t2.usage);
  const cached2 = t2.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached2 >= t1.usage.prompt_tokens, `turn 2 reuses at least turn 1's prompt (cached ${cached2})`);
  assert.ok(cached2 < t2.usage.prompt_tokens, 'the new user message is not cached');

  // Streamed third turn: the usage chunk reports the reuse the same way.
  messages.push(t2.choices[0].message, { role: 'user', content: Q3 });
  const t3 = await collectChat(await openai.chat.completions.create({
    ...base, messages, stream: true, stream_options: { include_usage: true },
  }));
  checkOpenAIUsage(t3.usage);
  assert.ok(t3.usage.prompt_tokens_details.cached_tokens >= t2.usage.prompt_tokens,
    `turn 3 reuses at least turn 2's prompt (cached ${t3.usage.prompt_tokens_details.cached_tokens})`);
});

test('messages: turn 2 reports the reused prefix as cache_read_input_tokens', async () => {
  const base = { model: MODEL_NAME, system: SYSTEM, max_tokens: 16, thinking: { type: 'disabled' }, temperature: 0 };
  const messages = [{ role: 'user', content: Q1 }];
  const t1 = await anthropic.messages.create({ ...base, messages });
  checkAnthropicUsage(t1.usage);
  messages.push({ role: 'assistant', content: t1.content }, { role: 'user', content: Q2 });

  const t2 = await anthropic.messages.create({ ...base, messages });
  checkAnthropicUsage(t2.usage);
  const prompt1 = anthropicPromptTokens(t1.usage);
  assert.ok(t2.usage.cache_read_input_tokens >= prompt1,
    `turn 2 reuses at least turn 1's prompt (cache_read ${t2.usage.cache_read_input_tokens})`);
  assert.ok(t2.usage.cache_creation_input_tokens > 0, 'the new user message is written');
  assert.equal(t2.usage.input_tokens, 0, 'ds4 books the uncached prompt as cache creation (§9.12)');
});

test('responses: turn 2 reports the reused prefix as input_tokens_details.cached_tokens', async () => {
  const base = { model: MODEL_NAME, instructions: SYSTEM, max_output_tokens: 16, reasoning: { effort: 'none' }, temperature: 0 };
  const input = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: Q1 }] }];
  const t1 = await openai.responses.create({ ...base, input });
  checkResponsesUsage(t1.usage);
  // Replayed as Codex does, without ids; the status is left out because a
  // length-stopped item is `incomplete` and only completed items replay (§5.3).
  input.push(...t1.output.map(({ id, status, ...item }) => item));
  input.push({ type: 'message', role: 'user', content: [{ type: 'input_text', text: Q2 }] });

  const t2 = await openai.responses.create({ ...base, input });
  checkResponsesUsage(t2.usage);
  const cached = t2.usage.input_tokens_details.cached_tokens;
  assert.ok(cached >= t1.usage.input_tokens, `turn 2 reuses at least turn 1's prompt (cached ${cached})`);
  assert.ok(cached < t2.usage.input_tokens);
});

test('a different conversation after a miss starts cold and still counts correctly', async () => {
  const r = await openai.chat.completions.create({
    model: MODEL_NAME, max_tokens: 4, thinking: { type: 'disabled' }, temperature: 0,
    messages: [{ role: 'user', content: 'Unrelated question about the sea.' }],
  });
  checkOpenAIUsage(r.usage);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0, 'nothing in common with the live session');
});
