// Tool calling through both SDKs: tool definitions change the rendered prompt,
// and a forced call (`tool_choice: "required"` / `{type:"any"}`) makes the model
// call one of the request's tools with schema-valid arguments; sending the
// result back continues on the live KV (cached prompt tokens > 0).
// PROTOCOL.md §2.3, §3, §5.5, §5.7, §6.2.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import {
  startServer, openaiClient, anthropicClient, checkOpenAIUsage, validateAgainstSchema, MODEL_NAME, CALL_ID,
} from './support.mjs';
import {
  collectChat, checkResponse, collectResponseStream, checkMessage, collectMessageStream,
} from './streams.mjs';

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

const SCHEMAS = {
  get_weather: {
    type: 'object',
    properties: {
      city: { type: 'string', description: 'city name', maxLength: 24 },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    },
    required: ['city'],
    additionalProperties: false,
  },
  add: {
    type: 'object',
    properties: { a: { type: 'integer' }, b: { type: 'integer' } },
    required: ['a', 'b'],
    additionalProperties: false,
  },
};
const DESCRIPTIONS = { get_weather: 'Current weather in a city', add: 'Adds two integers' };
const NAMES = Object.keys(SCHEMAS);

const CHAT_TOOLS = NAMES.map((name) => ({
  type: 'function', function: { name, description: DESCRIPTIONS[name], parameters: SCHEMAS[name] },
}));
const RESPONSES_TOOLS = NAMES.map((name) => ({
  type: 'function', name, description: DESCRIPTIONS[name], parameters: SCHEMAS[name], strict: false,
}));
const ANTHROPIC_TOOLS = NAMES.map((name) => ({ name, description: DESCRIPTIONS[name], input_schema: SCHEMAS[name] }));

// The most tokens a forced call can take: a token holds at least one byte, so
// no more than the bytes of the longest text ToolCallConstraint accepts for
// these tools (src/runtime/tool_call_constraint.h: one invoke, every parameter
// given, strings at maxLength or 256 bytes, enums at their longest value,
// integers as 19 characters), plus the EOS after it. A smaller budget would
// make the test depend on which tokens a random model's greedy path picks,
// and that differs between ISA levels.
function longestValue(schema) {
  if (schema.enum) return Math.max(...schema.enum.map((v) => Buffer.byteLength(typeof v === 'string' ? v : JSON.stringify(v))));
  if (schema.type === 'string') return schema.maxLength ?? 256;
  if (schema.type === 'integer') return 19;
  throw new Error(`no longest value for ${JSON.stringify(schema)}`);
}
function longestCallBytes(name) {
  const params = Object.entries(SCHEMAS[name].properties).map(([key, p]) => {
    const string = p.type === 'string' ? 'true' : 'false';
    return Buffer.byteLength(`<｜DSML｜parameter name="${key}" string="${string}"></｜DSML｜parameter>\n`) + longestValue(p);
  });
  return Buffer.byteLength(`\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="${name}">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>`) +
    params.reduce((a, b) => a + b, 0);
}
const FORCED_MAX_TOKENS = Math.max(...NAMES.map(longestCallBytes)) + 1;

const USER = 'What is the weather in Paris? Use a tool.';
const TOOL_RESULT = '{"temperature_c":21,"sky":"clear"}';
const FORCED_HINT = 'forced tool_choice (constrained DSML decoding) must make the model call a tool';

function checkCall(name, args, where) {
  assert.ok(NAMES.includes(name), `${where}: tool name ${JSON.stringify(name)} is one of the request's tools`);
  validateAgainstSchema(args, SCHEMAS[name], `${where} ${name} arguments`);
}

test('tool definitions are rendered into the prompt; tool_choice none leaves them out', async () => {
  const base = { model: MODEL_NAME, messages: [{ role: 'user', content: USER }], max_tokens: 4, think: false, temperature: 0 };
  const bare = await openai.chat.completions.create(base);
  const withTools = await openai.chat.completions.create({ ...base, tools: CHAT_TOOLS });
  const disabled = await openai.chat.completions.create({ ...base, tools: CHAT_TOOLS, tool_choice: 'none' });
  assert.ok(withTools.usage.prompt_tokens > bare.usage.prompt_tokens + 50, 'the tools block adds the schemas');
  assert.equal(disabled.usage.prompt_tokens, bare.usage.prompt_tokens, 'tool_choice none drops the tools block');

  const a = { model: MODEL_NAME, messages: [{ role: 'user', content: USER }], max_tokens: 4, thinking: { type: 'disabled' }, temperature: 0 };
  const aBare = await anthropic.messages.create(a);
  const aTools = await anthropic.messages.create({ ...a, tools: ANTHROPIC_TOOLS });
  const promptA = (u) => u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
  assert.equal(promptA(aBare.usage), bare.usage.prompt_tokens, 'the same conversation renders the same in both APIs');
  assert.equal(promptA(aTools.usage), withTools.usage.prompt_tokens, 'the same tools render the same in both APIs');
});

test('chat: forced tool call, streamed and not, then the tool result continues on the cached prefix', async () => {
  const messages = [{ role: 'user', content: USER }];
  const request = {
    model: MODEL_NAME, messages, tools: CHAT_TOOLS, tool_choice: 'required', max_tokens: FORCED_MAX_TOKENS, think: false, temperature: 0,
  };
  const streamed = await collectChat(
    await openai.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } }));
  assert.equal(streamed.finish, 'tool_calls', FORCED_HINT);
  assert.ok(streamed.toolCalls.length >= 1);
  for (const call of streamed.toolCalls) checkCall(call.function.name, JSON.parse(call.function.arguments), 'streamed');
  checkOpenAIUsage(streamed.usage, { maxCompletion: FORCED_MAX_TOKENS });

  const whole = await openai.chat.completions.create(request);
  const [choice] = whole.choices;
  assert.equal(choice.finish_reason, 'tool_calls', FORCED_HINT);
  assert.equal(choice.message.content, '', 'content is "" (not null) with tool calls');
  assert.ok(choice.message.tool_calls.length >= 1);
  for (const call of choice.message.tool_calls) {
    assert.match(call.id, CALL_ID);
    assert.equal(call.type, 'function');
    checkCall(call.function.name, JSON.parse(call.function.arguments), 'non-streamed');
  }
  // Temperature 0 with structure decoded greedily: the same calls, fresh ids.
  assert.deepEqual(choice.message.tool_calls.map((c) => c.function), streamed.toolCalls.map((c) => c.function));
  const ids = new Set([...choice.message.tool_calls, ...streamed.toolCalls].map((c) => c.id));
  assert.equal(ids.size, 2 * choice.message.tool_calls.length, 'every call id is fresh');

  const followUp = await openai.chat.completions.create({
    model: MODEL_NAME, tools: CHAT_TOOLS, max_tokens: 16, think: false, temperature: 0,
    messages: [
      ...messages,
      choice.message,
      ...choice.message.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: TOOL_RESULT })),
    ],
  });
  checkOpenAIUsage(followUp.usage, { maxCompletion: 16 });
  assert.ok(['stop', 'length', 'tool_calls'].includes(followUp.choices[0].finish_reason));
  assert.ok(followUp.usage.prompt_tokens > whole.usage.prompt_tokens + whole.usage.completion_tokens - 1,
    'the follow-up prompt contains the first prompt and the call');
  assert.ok(followUp.usage.prompt_tokens_details.cached_tokens > whole.usage.prompt_tokens,
    `the tool result continues on the live KV (cached ${followUp.usage.prompt_tokens_details.cached_tokens})`);
});

test('responses: forced function call, streamed and not, then function_call_output continues on the cached prefix', async () => {
  const input = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: USER }] }];
  const request = {
    model: MODEL_NAME, input, tools: RESPONSES_TOOLS, tool_choice: 'required', max_output_tokens: FORCED_MAX_TOKENS,
    reasoning: { effort: 'none' }, temperature: 0,
  };
  const streamed = await collectResponseStream(await openai.responses.create({ ...request, stream: true }));
  checkResponse(streamed.final, FORCED_MAX_TOKENS);
  const sCalls = streamed.final.output.filter((o) => o.type === 'function_call');
  assert.ok(sCalls.length >= 1, FORCED_HINT);
  assert.equal(streamed.final.status, 'completed');
  for (const c of sCalls) checkCall(c.name, JSON.parse(c.arguments), 'streamed');

  const whole = await openai.responses.create(request);
  checkResponse(whole, FORCED_MAX_TOKENS);
  const calls = whole.output.filter((o) => o.type === 'function_call');
  assert.ok(calls.length >= 1, FORCED_HINT);
  for (const c of calls) checkCall(c.name, JSON.parse(c.arguments), 'non-streamed');
  assert.deepEqual(calls.map((c) => [c.name, c.arguments]), sCalls.map((c) => [c.name, c.arguments]));

  const followUp = await openai.responses.create({
    model: MODEL_NAME, tools: RESPONSES_TOOLS, max_output_tokens: 16, reasoning: { effort: 'none' }, temperature: 0,
    input: [
      ...input,
      ...whole.output.map(({ id, ...item }) => item),  // replayed as the client saw it
      ...calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: TOOL_RESULT })),
    ],
  });
  checkResponse(followUp, 16);
  assert.ok(followUp.usage.input_tokens_details.cached_tokens > whole.usage.input_tokens,
    `function_call_output continues on the live KV (cached ${followUp.usage.input_tokens_details.cached_tokens})`);
});

test('messages: forced tool_use, streamed and not, then tool_result continues on the cached prefix', async () => {
  const messages = [{ role: 'user', content: USER }];
  const request = {
    model: MODEL_NAME, messages, tools: ANTHROPIC_TOOLS, tool_choice: { type: 'any' }, max_tokens: FORCED_MAX_TOKENS,
    thinking: { type: 'disabled' }, temperature: 0,
  };
  const { msg: streamed } = await collectMessageStream(await anthropic.messages.create({ ...request, stream: true }));
  assert.equal(streamed.stop_reason, 'tool_use', FORCED_HINT);
  checkMessage(streamed, FORCED_MAX_TOKENS);
  const sUses = streamed.content.filter((b) => b.type === 'tool_use');
  for (const b of sUses) checkCall(b.name, b.input, 'streamed');

  const whole = await anthropic.messages.create(request);
  assert.equal(whole.stop_reason, 'tool_use', FORCED_HINT);
  checkMessage(whole, FORCED_MAX_TOKENS);
  const uses = whole.content.filter((b) => b.type === 'tool_use');
  assert.ok(uses.length >= 1);
  for (const b of uses) checkCall(b.name, b.input, 'non-streamed');
  assert.deepEqual(uses.map((b) => [b.name, b.input]), sUses.map((b) => [b.name, b.input]));

  const followUp = await anthropic.messages.create({
    model: MODEL_NAME, tools: ANTHROPIC_TOOLS, max_tokens: 16, thinking: { type: 'disabled' }, temperature: 0,
    messages: [
      ...messages,
      { role: 'assistant', content: whole.content },
      { role: 'user', content: uses.map((b) => ({ type: 'tool_result', tool_use_id: b.id, content: TOOL_RESULT })) },
    ],
  });
  checkMessage(followUp, 16);
  const promptBefore = whole.usage.input_tokens + whole.usage.cache_read_input_tokens + whole.usage.cache_creation_input_tokens;
  assert.ok(followUp.usage.cache_read_input_tokens > promptBefore,
    `tool_result continues on the live KV (cache_read ${followUp.usage.cache_read_input_tokens})`);
});
