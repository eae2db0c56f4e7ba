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

// A streamed or whole reply with thinking on: a signed thinking block (the
// message id as signature, sent as one signature delta that closes the block)
// then a text block (empty when the thinking never closed); or, when the
// first sampled token closed the thinking or ended the reply, text only.
// Thinking samples at T=1 and this API has no seed or logit_bias, so which
// form comes is luck with a random model; each is checked, none required.
function checkThinkingReply(msg, events = null) {
  const sig = events ? events.filter((e) => e.delta?.type === 'signature_delta') : [];
  if (msg.content[0]?.type !== 'thinking') {
    assert.ok(msg.content.every((b) => b.type === 'text'), 'no thinking block: text only');
    assert.equal(sig.length, 0, 'no signature without a thinking block');
    return;
  }
  assert.ok(msg.content[0].thinking.length > 0, 'a thinking block holds reasoning');
  assert.equal(msg.content[0].signature, msg.id);
  assert.equal(msg.content.at(-1).type, 'text', 'a text block follows (empty when thinking never closed)');
  if (events) {
    assert.equal(sig.length, 1, 'one signature delta');
    const sigAt = events.indexOf(sig[0]);
    assert.equal(events[sigAt + 1].type, 'content_block_stop', 'the signature closes the thinking block');
  }
}

test('messages, thinking on: streamed thinking block ends with the message id as signature', async () => {
  const maxTokens = 32;
  const request = { model: MODEL_NAME, messages: MESSAGES, max_tokens: maxTokens, thinking: { type: 'enabled', budget_tokens: 1024 } };
  const { msg, events } = await collectMessageStream(await client.messages.create({ ...request, stream: true }));
  checkMessage(msg, maxTokens);
  checkThinkingReply(msg, events);

  const final = await client.messages.stream(request).finalMessage();
  checkMessage(final, maxTokens);
  checkThinkingReply(final);
});

test('messages, thinking on: non-streamed replies are a signed thinking block and text, or one text block', async (t) => {
  // No seed or logit_bias in the Messages API and thinking samples at T=1
  // (§4): whether a random model's reply closes its thinking is luck (and
  // differs between ISA levels), so each attempt's form is checked and none
  // is required (test_server_reply.cpp checks both forms deterministically).
  const maxTokens = 64;
  const request = { model: MODEL_NAME, messages: MESSAGES, max_tokens: maxTokens, thinking: { type: 'enabled', budget_tokens: 1024 } };
  let closed = 0;
  for (let attempt = 0; attempt < 6; attempt++) {
    const m = await client.messages.create(request);
    checkMessage(m, maxTokens);
    checkThinkingReply(m);
    if (m.content[0]?.type === 'thinking') {
      closed++;
      assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text'], 'closed thinking: thinking, then text');
    } else {
      assert.ok(m.content.length <= 1, 'unclosed thinking comes back as one text block');
    }
  }
  t.diagnostic(`replies that closed their thinking: ${closed} of 6`);
});

test('messages errors use the OpenAI error shape (§5.9)', async () => {
  await assert.rejects(client.messages.create({ model: MODEL_NAME, max_tokens: 4, messages: undefined }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.error?.error?.type, 'invalid_request_error');
    return true;
  });
  // An empty conversation is refused as Anthropic's API refuses it, a system prompt alone included.
  for (const extra of [{}, { system: 'You are terse.' }]) {
    await assert.rejects(client.messages.create({ model: MODEL_NAME, max_tokens: 4, messages: [], ...extra }), (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.error?.error?.type, 'invalid_request_error');
      assert.match(err.error?.error?.message, /at least one message/);
      return true;
    });
  }
});
