// OpenAI chat completions and legacy completions through the official `openai`
// SDK (PROTOCOL.md §5.5–5.7): shapes, streaming vs non-streaming equality on a
// deterministic request, thinking on/off, usage arithmetic.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import {
  startServer, openaiClient, checkOpenAIUsage, checkLengthStop, testModel, MODEL_NAME, CTX, CHATCMPL_ID, CMPL_ID,
} from './support.mjs';
import { collectChat } from './streams.mjs';
import { tokenId } from './gguf_tokens.mjs';

let server;
let client;

before(async () => {
  server = await startServer();
  client = openaiClient(server);
});

after(async () => {
  if (!server) return;  // start failed; that error is already reported
  const { code } = await server.stop();
  assert.equal(code, 0, `clean exit on SIGTERM\n${server.stderr()}`);
});

const NO_THINK = { thinking: { type: 'disabled' }, temperature: 0 };
const MESSAGES = [
  { role: 'system', content: 'You are a concise assistant.' },
  { role: 'user', content: 'Name three prime numbers.' },
];

test('GET /v1/models describes the loaded model', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].id, MODEL_NAME);
  assert.equal(models[0].object, 'model');
  assert.equal(models[0].owned_by, 'ds4.c');
  assert.equal(models[0].context_length, CTX);
  const one = await client.models.retrieve(MODEL_NAME);
  assert.deepEqual(one, models[0]);
});

test('chat, thinking off: non-streamed reply, repeated and streamed, is the same text', async () => {
  const maxTokens = 24;
  const request = { model: MODEL_NAME, messages: MESSAGES, max_tokens: maxTokens, ...NO_THINK };
  const first = await client.chat.completions.create(request);
  assert.match(first.id, CHATCMPL_ID);
  assert.equal(first.object, 'chat.completion');
  assert.equal(first.model, MODEL_NAME);
  assert.ok(Number.isInteger(first.created) && first.created > 1.7e9);
  assert.equal(first.choices.length, 1);
  const [choice] = first.choices;
  assert.equal(choice.index, 0);
  assert.equal(choice.message.role, 'assistant');
  assert.equal(typeof choice.message.content, 'string');
  assert.equal(choice.message.reasoning_content, undefined, 'no reasoning with thinking disabled');
  assert.equal(choice.message.tool_calls, undefined);
  assert.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);
  checkOpenAIUsage(first.usage, { maxCompletion: maxTokens });
  checkLengthStop(choice.finish_reason === 'length', first.usage.completion_tokens, maxTokens);

  const again = await client.chat.completions.create(request);
  assert.notEqual(again.id, first.id, 'every reply has its own id');
  assert.equal(again.choices[0].message.content, choice.message.content, 'temperature 0 is deterministic');
  assert.equal(again.choices[0].finish_reason, choice.finish_reason);
  assert.equal(again.usage.prompt_tokens, first.usage.prompt_tokens);
  assert.equal(again.usage.completion_tokens, first.usage.completion_tokens);

  const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  const streamed = await collectChat(stream);
  assert.equal(streamed.role, 'assistant');
  assert.equal(streamed.reasoning, '', 'no reasoning deltas with thinking disabled');
  assert.equal(streamed.content, choice.message.content, 'streamed text == non-streamed text');
  assert.equal(streamed.finish, choice.finish_reason);
  checkOpenAIUsage(streamed.usage, { maxCompletion: maxTokens });
  assert.equal(streamed.usage.prompt_tokens, first.usage.prompt_tokens);
  assert.equal(streamed.usage.completion_tokens, first.usage.completion_tokens);

  const noUsage = await collectChat(await client.chat.completions.create({ ...request, stream: true }));
  assert.equal(noUsage.usage, null, 'no usage chunk without stream_options.include_usage');
  assert.equal(noUsage.content, choice.message.content);
});

test('chat, thinking off by each alias gives the same reply', async () => {
  const base = { model: MODEL_NAME, messages: MESSAGES, max_tokens: 12, temperature: 0 };
  const a = await client.chat.completions.create({ ...base, thinking: { type: 'disabled' } });
  const b = await client.chat.completions.create({ ...base, think: false });
  const c = await client.chat.completions.create({ ...base, reasoning_effort: 'none' });
  const d = await client.chat.completions.create({ ...base, model: 'deepseek-chat' });
  for (const r of [b, c, d]) {
    assert.equal(r.choices[0].message.content, a.choices[0].message.content);
    assert.equal(r.usage.prompt_tokens, a.usage.prompt_tokens, 'same rendered prompt');
  }
  assert.equal(d.model, 'deepseek-chat', 'the request model name is echoed');
});

test('chat, thinking on: reasoning is streamed as reasoning_content and matches the non-streamed reply', async (t) => {
  // Thinking mode samples at T=1 whatever the client asks (§4), but the seed
  // still fixes the draw, so a seeded request is repeatable: streamed and
  // whole replies split reasoning and answer the same way. Whether a random
  // model's sampled path ever closes its reasoning is luck (and differs
  // between ISA levels), so no outcome is required of it: a +100 bias on
  // </think> closes it at the first step for any logits, and a mild one
  // lets each seed close or not, both forms checked.
  const endThink = tokenId(await testModel(), '</think>');
  const forced = { model: MODEL_NAME, messages: MESSAGES, max_tokens: 16, seed: 1, logit_bias: { [endThink]: 100 } };
  const fWhole = await client.chat.completions.create(forced);
  const fStreamed = await collectChat(await client.chat.completions.create({ ...forced, stream: true }));
  assert.equal(fWhole.choices[0].message.reasoning_content, undefined, 'empty reasoning is left out');
  assert.equal(fStreamed.reasoning, '', 'closed at once: no reasoning streamed');
  assert.equal(fStreamed.content, fWhole.choices[0].message.content, 'the answer after </think> is content in both');
  assert.equal(fStreamed.finish, fWhole.choices[0].finish_reason);

  const maxTokens = 48;
  let closed = 0;
  let open = 0;
  for (let seed = 1; seed <= 8; seed++) {
    const request = {
      model: MODEL_NAME, messages: MESSAGES, max_tokens: maxTokens, seed, temperature: 0, logit_bias: { [endThink]: 3 },
    };
    const whole = await client.chat.completions.create(request);
    const msg = whole.choices[0].message;
    checkOpenAIUsage(whole.usage, { maxCompletion: maxTokens });
    const streamed = await collectChat(
      await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } }));
    assert.equal(streamed.finish, whole.choices[0].finish_reason, `seed ${seed}: same finish`);
    assert.equal(streamed.usage.completion_tokens, whole.usage.completion_tokens, `seed ${seed}: same length`);
    if (msg.reasoning_content !== undefined) {
      // Closed thinking: reasoning and answer are separated the same way in both.
      closed++;
      assert.ok(msg.reasoning_content.length > 0);
      assert.equal(streamed.reasoning, msg.reasoning_content, `seed ${seed}: streamed reasoning == reasoning_content`);
      assert.equal(streamed.content, msg.content, `seed ${seed}: streamed content == content`);
    } else if (streamed.reasoning.length > 0) {
      // Never closed (§3.3): the stream already sent it as reasoning, the
      // non-streamed reply gives the whole text as content.
      open++;
      assert.equal(streamed.content, '', `seed ${seed}: nothing after an unclosed think`);
      assert.equal(msg.content, streamed.reasoning, `seed ${seed}: unclosed reasoning comes back as content`);
    } else {
      // Closed (or ended) at the first step: whatever followed is content in both.
      assert.equal(streamed.content, msg.content, `seed ${seed}: streamed content == content`);
    }
  }
  t.diagnostic(`seeds whose reasoning closed: ${closed}, never closed: ${open}`);
});

test('legacy completions: non-streamed and streamed text agree', async () => {
  const maxTokens = 20;
  const request = { model: MODEL_NAME, prompt: 'The capital of France is', max_tokens: maxTokens, ...NO_THINK };
  const whole = await client.completions.create(request);
  assert.match(whole.id, CMPL_ID);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.model, MODEL_NAME);
  assert.equal(whole.choices.length, 1);
  assert.equal(whole.choices[0].index, 0);
  assert.equal(typeof whole.choices[0].text, 'string');
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  checkOpenAIUsage(whole.usage, { maxCompletion: maxTokens });
  checkLengthStop(whole.choices[0].finish_reason === 'length', whole.usage.completion_tokens, maxTokens);

  const stream = await client.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  const ids = new Set();
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    ids.add(chunk.id);
    if (chunk.usage && chunk.choices.length === 0) {
      assert.ok(finish, 'usage after the finish chunk');
      usage = chunk.usage;
      continue;
    }
    assert.equal(chunk.choices.length, 1);
    assert.equal(finish, null, 'nothing after finish_reason');
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) {
      assert.equal(chunk.choices[0].text, '', 'the final chunk has empty text');
      finish = chunk.choices[0].finish_reason;
    }
  }
  assert.equal(ids.size, 1);
  assert.match([...ids][0], CMPL_ID);
  assert.equal(text, whole.choices[0].text, 'streamed text == non-streamed text');
  assert.equal(finish, whole.choices[0].finish_reason);
  checkOpenAIUsage(usage, { maxCompletion: maxTokens });
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
});

test('errors come back as SDK errors with the OpenAI error shape', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: MODEL_NAME, max_tokens: 4, ...NO_THINK }),  // no messages
    (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.error?.type ?? err.type, 'invalid_request_error');
      return true;
    });
  await assert.rejects(
    client.chat.completions.create({ model: MODEL_NAME, messages: [], max_tokens: 4, ...NO_THINK }),
    (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.error?.type ?? err.type, 'invalid_request_error');
      assert.match(err.message, /at least one message/);
      return true;
    });
  const huge = 'lorem ipsum dolor sit amet '.repeat(3000);
  await assert.rejects(
    client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: 'user', content: huge }], max_tokens: 4 }),
    (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.code, 'context_length_exceeded');
      assert.equal(err.param, 'messages');
      return true;
    });
});
