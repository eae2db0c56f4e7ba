// Anthropic Messages through the official `@anthropic-ai/sdk` (PROTOCOL.md
// §5.5, §5.7): message shape, the event sequence of a stream, streamed text ==
// non-streamed text, thinking blocks carrying the message id as signature.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, anthropicClient, anthropicPromptTokens, MODEL_NAME } from './support.mjs';
import { checkMessage, collectMessageStream } from './streams.mjs';

let server;
let client;

before(async () => {
  server = await startServer();
  client = anthropicClient(server);
});

after(async () => {
  if (!server) return;  // start failed; that error is already reported
  const { code } = await server.stop();
  assert.equal(code, 0, `clean exit on SIGTERM\n${server.stderr()}`);
});

const NO_THINK = { thinking: { type: 'disabled' }, temperature: 0 };
const SYSTEM = 'You are a concise assistant.';
const MESSAGES = [{ role: 'user', content: 'Name three prime numbers.' }];

test('messages, thinking off: non-streamed reply, repeated and streamed, is the same text', async () => {
  const maxTokens = 24;
  const request = { model: MODEL_NAME, system: SYSTEM, messages: MESSAGES, max_tokens: maxTokens, ...NO_THINK };
  const whole = await client.messages.create(request);
  checkMessage(whole, maxTokens);
  assert.equal(whole.content.length, 1, 'one text block');
  assert.equal(whole.content[0].type, 'text');

  const again = await client.messages.create(request);
  assert.notEqual(again.id, whole.id);
  assert.deepEqual(again.content, whole.content, 'temperature 0 is deterministic');

  const { msg, events } = await collectMessageStream(await client.messages.create({ ...request, stream: true }));
  checkMessage(msg, maxTokens);
  assert.deepEqual(msg.content, whole.content, 'streamed content == non-streamed content');
  assert.equal(msg.stop_reason, whole.stop_reason);
  assert.equal(msg.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(anthropicPromptTokens(msg.usage), anthropicPromptTokens(whole.usage));
  assert.ok(!events.some((e) => e.delta?.type === 'thinking_delta'), 'no thinking with thinking disabled');

  // The SDK's own stream accumulator builds the same message.
  const final = await client.messages.stream(request).finalMessage();
  checkMessage(final, maxTokens);
  assert.deepEqual(final.content, whole.content);
  assert.equal(final.stop_reason, whole.stop_reason);
});

test('messages, system blocks: x-anthropic- parts are dropped, parts joined by newline', async () => {
  const base = { model: MODEL_NAME, messages: MESSAGES, max_tokens: 8, ...NO_THINK };
  const plain = await client.messages.create({ ...base, system: `${SYSTEM}\nBe brief.` });
  const blocks = await client.messages.create({
    ...base,
    system: [
      { type: 'text', text: 'x-anthropic-billing-header: cc_version=1.0; cch=abc;' },
      { type: 'text', text: SYSTEM },
      { type: 'text', text: 'Be brief.' },
    ],
  });
  assert.equal(anthropicPromptTokens(blocks.usage), anthropicPromptTokens(plain.usage));
  assert.deepEqual(blocks.content, plain.content);
});

test('messages, thinking on: streamed thinking block ends with the message id as signature', async () => {
  const maxTokens = 32;
  const request = { model: MODEL_NAME, messages: MESSAGES, max_tokens: maxTokens, thinking: { type: 'enabled', budget_tokens: 1024 } };
  const { msg, events } = await collectMessageStream(await client.messages.create({ ...request, stream: true }));
  checkMessage(msg, maxTokens);
  assert.equal(msg.content[0].type, 'thinking');
  assert.ok(msg.content[0].thinking.length > 0);
  assert.equal(msg.content[0].signature, msg.id);
  const sig = events.filter((e) => e.delta?.type === 'signature_delta');
  assert.equal(sig.length, 1, 'one signature delta');
  const sigAt = events.indexOf(sig[0]);
  assert.equal(events[sigAt + 1].type, 'content_block_stop', 'the signature closes the thinking block');
  assert.equal(msg.content.at(-1).type, 'text', 'a text block follows (empty when thinking never closed)');

  const final = await client.messages.stream(request).finalMessage();
  checkMessage(final, maxTokens);
  assert.equal(final.content[0].type, 'thinking');
  assert.equal(final.content[0].signature, final.id);
});

test('messages, thinking on: a non-streamed reply that closes its thinking has a signed thinking block', async () => {
  // No seed in the Messages API and thinking samples at T=1 (§4): try until a
  // reply closes its thinking inside the budget (about one in four does).
  const maxTokens = 200;
  const request = { model: MODEL_NAME, messages: MESSAGES, max_tokens: maxTokens, thinking: { type: 'enabled', budget_tokens: 1024 } };
  let found = null;
  for (let attempt = 0; attempt < 30 && !found; attempt++) {
    const m = await client.messages.create(request);
    checkMessage(m, maxTokens);
    if (m.content[0].type === 'thinking') found = m;
    else assert.deepEqual(m.content.map((b) => b.type), ['text'], 'unclosed thinking comes back as text');
  }
  assert.ok(found, 'a reply closed its thinking');
  assert.ok(found.content[0].thinking.length > 0);
  assert.equal(found.content[0].signature, found.id);
  assert.equal(found.content[1].type, 'text');
});

test('messages errors use the OpenAI error shape (§5.9)', async () => {
  await assert.rejects(client.messages.create({ model: MODEL_NAME, max_tokens: 4, messages: undefined }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.error?.error?.type, 'invalid_request_error');
    return true;
  });
});
