// OpenAI Responses through the official `openai` SDK (PROTOCOL.md §5.5, §5.7):
// response and item shapes, the event sequence of a stream, streamed text ==
// non-streamed text, and reasoning shown only when reasoning.summary opts in.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, openaiClient, MODEL_NAME } from './support.mjs';
import { checkResponse, collectResponseStream } from './streams.mjs';

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

const NO_THINK = { reasoning: { effort: 'none' }, temperature: 0 };
const INSTRUCTIONS = 'You are a concise assistant.';
const INPUT = 'Name three prime numbers.';

test('responses, reasoning off: non-streamed and streamed replies agree', async () => {
  const maxOutput = 24;
  const request = { model: MODEL_NAME, instructions: INSTRUCTIONS, input: INPUT, max_output_tokens: maxOutput, ...NO_THINK };
  const whole = await client.responses.create(request);
  checkResponse(whole, maxOutput);
  // A greedy EOS at the first step (wherever a random model's path puts one)
  // leaves no message item: both forms are checked, neither is required.
  const empty = whole.output_text === '';
  assert.equal(whole.output.length, empty ? 0 : 1, 'one message (none for an empty reply), no reasoning item');
  if (!empty) {
    assert.equal(whole.output[0].type, 'message');
    assert.equal(whole.output_text, whole.output[0].content[0].text, 'SDK output_text helper');
  }

  const again = await client.responses.create(request);
  assert.notEqual(again.id, whole.id);
  assert.equal(again.output_text, whole.output_text, 'temperature 0 is deterministic');

  const streamed = await collectResponseStream(await client.responses.create({ ...request, stream: true }));
  checkResponse(streamed.final, maxOutput);
  assert.equal(streamed.text, whole.output_text, 'streamed text == non-streamed text');
  assert.equal(streamed.final.status, whole.status);
  assert.equal(streamed.final.output.length, whole.output.length);
  assert.equal(streamed.final.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(streamed.final.usage.input_tokens, whole.usage.input_tokens);
  assert.equal(streamed.summaryText, '');
  const types = streamed.events.map((e) => e.type);
  if (empty) {
    assert.ok(!types.some((t) => t.startsWith('response.output_')), 'no output events for an empty reply');
  } else {
    assert.equal(streamed.final.output[0].content[0].text, whole.output_text);
    assert.deepEqual(types.slice(0, 4),
      ['response.created', 'response.output_item.added', 'response.content_part.added', 'response.output_text.delta']);
    assert.deepEqual(types.slice(-4),
      ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', types.at(-1)]);
  }
});

test('responses, input as an item array renders like the string form', async () => {
  const base = { model: MODEL_NAME, instructions: INSTRUCTIONS, max_output_tokens: 8, ...NO_THINK };
  const a = await client.responses.create({ ...base, input: INPUT });
  const b = await client.responses.create({
    ...base, input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: INPUT }] }],
  });
  assert.equal(b.usage.input_tokens, a.usage.input_tokens);
  assert.equal(b.output_text, a.output_text);
});

test('responses, thinking without reasoning.summary: no reasoning events or items', async () => {
  const maxOutput = 48;
  const request = { model: MODEL_NAME, input: INPUT, max_output_tokens: maxOutput, reasoning: { effort: 'high' } };
  const streamed = await collectResponseStream(await client.responses.create({ ...request, stream: true }));
  checkResponse(streamed.final, maxOutput);
  assert.ok(!streamed.events.some((e) => e.type.includes('reasoning')), 'no reasoning events');
  assert.ok(!streamed.final.output.some((o) => o.type === 'reasoning'), 'no reasoning item');
});

test('responses, reasoning.summary opts in to reasoning items and summary events', async () => {
  const maxOutput = 48;
  const request = {
    model: MODEL_NAME, input: INPUT, max_output_tokens: maxOutput, reasoning: { effort: 'high', summary: 'auto' },
  };
  const streamed = await collectResponseStream(await client.responses.create({ ...request, stream: true }));
  checkResponse(streamed.final, maxOutput);
  const reasoning = streamed.final.output.filter((o) => o.type === 'reasoning');
  const types = streamed.events.map((e) => e.type);
  if (streamed.summaryText === '') {
    // No seed in this API and thinking samples at T=1: a first token that
    // closes the reasoning or ends the reply (a matter of luck with a random
    // model) leaves nothing to summarise, so no reasoning item or event.
    assert.equal(reasoning.length, 0, 'no reasoning item without reasoning text');
    assert.ok(!types.some((t) => t.includes('reasoning')), 'no reasoning events without reasoning text');
    return;
  }
  assert.equal(reasoning.length, 1, 'one reasoning item');
  assert.equal(streamed.final.output[0].type, 'reasoning', 'reasoning comes first');
  assert.ok(streamed.summaryText.length > 0, 'summary deltas streamed');
  assert.deepEqual(reasoning[0].summary, [{ type: 'summary_text', text: streamed.summaryText }]);
  assert.deepEqual(types.slice(1, 4), [
    'response.output_item.added', 'response.reasoning_summary_part.added', 'response.reasoning_summary_text.delta',
  ]);
  const sumDone = types.indexOf('response.reasoning_summary_text.done');
  assert.deepEqual(types.slice(sumDone, sumDone + 3), [
    'response.reasoning_summary_text.done', 'response.reasoning_summary_part.done', 'response.output_item.done',
  ]);
  // The reasoning item is complete exactly when a message follows it (thinking closed).
  const closed = streamed.final.output.some((o) => o.type === 'message');
  assert.equal(reasoning[0].status, closed ? 'completed' : 'incomplete');

  const whole = await client.responses.create(request);
  checkResponse(whole, maxOutput);
  for (const item of whole.output) {
    if (item.type === 'reasoning') {
      assert.equal(item.summary.length, 1);
      assert.ok(item.summary[0].text.length > 0);
    }
  }
});

test('responses rejects previous_response_id with 400', async () => {
  await assert.rejects(
    client.responses.create({ model: MODEL_NAME, input: INPUT, previous_response_id: 'resp_x', ...NO_THINK }),
    (err) => err.status === 400 && /previous_response_id is not supported/.test(err.message));
});
