// Stream collectors and reply checks shared by the client tests: each replays
// an SDK stream in the order PROTOCOL.md §5.7 prescribes, asserting every event
// on the way, and returns the reply it adds up to.
import assert from 'node:assert/strict';

import {
  checkOpenAIUsage, checkResponsesUsage, checkAnthropicUsage, checkLengthStop,
  MODEL_NAME, CHATCMPL_ID, RESP_ID, MSG_ID, RS_ID, FC_ID, CALL_ID, TOOLU_ID,
} from './support.mjs';

// Joins a chat stream into one message, checking every chunk on the way.
export async function collectChat(stream) {
  const out = {
    ids: new Set(), role: null, content: '', reasoning: '', toolCalls: [], finish: null, usage: null, chunks: 0,
  };
  let finishSeen = false;
  for await (const chunk of stream) {
    out.chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.match(chunk.id, CHATCMPL_ID);
    assert.equal(chunk.model, MODEL_NAME);
    out.ids.add(chunk.id);
    if (chunk.usage && chunk.choices.length === 0) {
      assert.ok(finishSeen, 'usage chunk comes after the finish chunk');
      assert.equal(out.usage, null, 'one usage chunk');
      out.usage = chunk.usage;
      continue;
    }
    assert.equal(out.usage, null, 'nothing after the usage chunk');
    assert.equal(chunk.choices.length, 1);
    const [choice] = chunk.choices;
    assert.equal(choice.index, 0);
    assert.equal(finishSeen, false, 'no delta after finish_reason');
    if (out.chunks === 1) assert.deepEqual(choice.delta, { role: 'assistant' }, 'first delta is the role');
    if (choice.delta.role !== undefined) out.role = choice.delta.role;
    if (choice.delta.content) out.content += choice.delta.content;
    if (choice.delta.reasoning_content) out.reasoning += choice.delta.reasoning_content;
    for (const tc of choice.delta.tool_calls ?? []) {
      if (tc.id !== undefined) {
        // Call header: index, id, type, name, then argument fragments (§5.7 step 4).
        assert.equal(tc.index, out.toolCalls.length, 'calls are numbered from 0 in order');
        assert.match(tc.id, CALL_ID);
        assert.equal(tc.type, 'function');
        assert.equal(typeof tc.function.name, 'string');
        out.toolCalls.push({ id: tc.id, type: 'function', function: { name: tc.function.name, arguments: tc.function.arguments ?? '' } });
      } else {
        assert.ok(out.toolCalls[tc.index], `fragment for a known call index ${tc.index}`);
        assert.equal(tc.function.name, undefined, 'fragments carry no name');
        out.toolCalls[tc.index].function.arguments += tc.function.arguments;
      }
    }
    if (choice.finish_reason) {
      assert.deepEqual(choice.delta, {}, 'the finish chunk has an empty delta');
      out.finish = choice.finish_reason;
      finishSeen = true;
    }
  }
  assert.equal(out.ids.size, 1, 'one id for the whole stream');
  assert.ok(finishSeen, 'stream ended with a finish_reason');
  return out;
}

export function checkResponse(r, maxOutput) {
  assert.match(r.id, RESP_ID);
  assert.equal(r.object, 'response');
  assert.equal(r.model, MODEL_NAME);
  assert.ok(Number.isInteger(r.created_at) && r.created_at > 1.7e9);
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  if (r.status === 'incomplete') assert.deepEqual(r.incomplete_details, { reason: 'max_tokens' });
  else assert.ok(r.incomplete_details == null);
  checkResponsesUsage(r.usage, { maxOutput });
  checkLengthStop(r.status === 'incomplete', r.usage.output_tokens, maxOutput);
  for (const item of r.output) {
    if (item.type === 'message') {
      assert.match(item.id, MSG_ID);
      assert.equal(item.role, 'assistant');
      assert.equal(item.status, r.status);
      assert.equal(item.content.length, 1);
      assert.equal(item.content[0].type, 'output_text');
      assert.deepEqual(item.content[0].annotations, []);
    } else if (item.type === 'function_call') {
      assert.match(item.id, FC_ID);
      assert.match(item.call_id, CALL_ID);
      assert.equal(item.status, 'completed');
      assert.equal(typeof JSON.parse(item.arguments), 'object');
    } else if (item.type === 'reasoning') {
      assert.match(item.id, RS_ID);
      assert.ok(['completed', 'incomplete'].includes(item.status));
      for (const part of item.summary) assert.equal(part.type, 'summary_text');
    }
  }
}

// Replays a Responses stream as the spec orders it (§5.7) and returns what it built.
export async function collectResponseStream(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  assert.ok(events.length >= 2);
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i, `sequence_number of event ${i} (${ev.type})`));
  const [created] = events;
  const last = events.at(-1);
  assert.equal(created.type, 'response.created');
  assert.equal(created.response.status, 'in_progress');
  assert.deepEqual(created.response.output, []);
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type), `terminal event ${last.type}`);
  assert.equal(last.response.id, created.response.id);
  assert.equal(events.filter((e) => e.type.startsWith('response.') && e.response).length, 2, 'one created, one terminal');

  const items = new Map();  // id -> { added, done, text, summary }
  let text = '';
  let summaryText = '';
  let nextIndex = 0;
  for (const ev of events.slice(1, -1)) {
    switch (ev.type) {
      case 'response.output_item.added': {
        assert.equal(ev.output_index, nextIndex++, 'output indexes in emission order');
        assert.equal(ev.item.status, 'in_progress');
        if (ev.item.type === 'function_call') {
          assert.match(ev.item.id, FC_ID);
          assert.match(ev.item.call_id, CALL_ID);
          assert.equal(ev.item.arguments, '');
        }
        items.set(ev.item.id, { added: ev.item, index: ev.output_index, done: null, text: '', summary: '', args: '' });
        break;
      }
      case 'response.content_part.added':
      case 'response.reasoning_summary_part.added':
        assert.ok(items.has(ev.item_id) && !items.get(ev.item_id).done);
        break;
      case 'response.output_text.delta':
        items.get(ev.item_id).text += ev.delta;
        text += ev.delta;
        break;
      case 'response.reasoning_summary_text.delta':
        assert.equal(ev.summary_index, 0);
        items.get(ev.item_id).summary += ev.delta;
        summaryText += ev.delta;
        break;
      case 'response.output_text.done':
        assert.equal(ev.text, items.get(ev.item_id).text, 'output_text.done repeats the deltas');
        break;
      case 'response.content_part.done':
        assert.equal(ev.part.text, items.get(ev.item_id).text);
        break;
      case 'response.reasoning_summary_text.done':
        assert.equal(ev.text, items.get(ev.item_id).summary, 'summary_text.done repeats the deltas');
        break;
      case 'response.reasoning_summary_part.done':
        assert.equal(ev.part.text, items.get(ev.item_id).summary);
        break;
      case 'response.output_item.done': {
        const it = items.get(ev.item.id);
        assert.ok(it && !it.done, 'done once, after added');
        assert.equal(ev.output_index, it.index);
        assert.equal(ev.item.type, it.added.type);
        if (ev.item.type === 'function_call') {
          assert.equal(ev.item.status, 'completed');
          assert.equal(ev.item.arguments, it.args);
          assert.equal(ev.item.call_id, it.added.call_id);
        }
        it.done = ev.item;
        break;
      }
      case 'response.function_call_arguments.delta':
        items.get(ev.item_id).args += ev.delta;
        break;
      case 'response.function_call_arguments.done': {
        const it = items.get(ev.item_id);
        assert.equal(ev.arguments, it.args, 'arguments.done repeats the deltas');
        assert.equal(ev.name, it.added.name);
        break;
      }
      default:
        assert.fail(`unexpected event ${ev.type}`);
    }
  }
  for (const [id, it] of items) assert.ok(it.done, `item ${id} was closed`);
  // The terminal response carries every closed item, in output order.
  assert.deepEqual(last.response.output.map((o) => o.id), [...items.values()].map((it) => it.done.id));
  assert.deepEqual(last.response.output, [...items.values()].map((it) => it.done));
  return { events, final: last.response, text, summaryText, items: [...items.values()] };
}

export function checkMessage(m, maxTokens) {
  assert.match(m.id, CHATCMPL_ID);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, MODEL_NAME);
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(m.stop_reason), m.stop_reason);
  assert.equal(m.stop_sequence, null);
  checkAnthropicUsage(m.usage, { maxOutput: maxTokens });
  checkLengthStop(m.stop_reason === 'max_tokens', m.usage.output_tokens, maxTokens);
  assert.ok(m.content.length >= 1);
  const kinds = m.content.map((b) => b.type);
  // Order: thinking, text, tool_use (§5.5); a text block is always there.
  assert.deepEqual(kinds, [...kinds].sort((a, b) => rank(a) - rank(b)));
  assert.ok(kinds.includes('text') || kinds.includes('tool_use'), 'a text block unless there are tool calls');
  for (const b of m.content) {
    if (b.type === 'thinking') assert.equal(b.signature, m.id, 'signature = message id');
    if (b.type === 'text') assert.equal(typeof b.text, 'string');
    if (b.type === 'tool_use') {
      assert.match(b.id, TOOLU_ID);
      assert.equal(typeof b.name, 'string');
      assert.ok(b.input && typeof b.input === 'object' && !Array.isArray(b.input));
    }
  }
  assert.equal(m.stop_reason === 'tool_use', kinds.includes('tool_use'), 'tool_use stop iff tool_use blocks');
}

const rank = (type) => ({ thinking: 0, text: 1, tool_use: 2 })[type] ?? 9;

// Replays the raw event stream (§5.7) into a message.
export async function collectMessageStream(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  const [start] = events;
  assert.equal(start.type, 'message_start');
  const msg = { ...start.message, content: [] };
  assert.deepEqual(start.message.content, []);
  assert.equal(start.message.stop_reason, null);
  assert.equal(start.message.stop_sequence, null);
  assert.equal(start.message.usage.output_tokens, 0);
  assert.equal(events.at(-1).type, 'message_stop');
  assert.equal(events.at(-2).type, 'message_delta');
  let open = null;
  for (const ev of events.slice(1, -2)) {
    if (ev.type === 'content_block_start') {
      assert.equal(open, null, 'blocks do not nest');
      assert.equal(ev.index, msg.content.length, 'block indexes count up from 0');
      open = structuredClone(ev.content_block);
      if (open.type === 'thinking') assert.deepEqual(ev.content_block, { type: 'thinking', thinking: '', signature: '' });
      if (open.type === 'text') assert.deepEqual(ev.content_block, { type: 'text', text: '' });
      if (open.type === 'tool_use') {
        assert.deepEqual(ev.content_block.input, {});
        open.partial = '';
      }
    } else if (ev.type === 'content_block_delta') {
      assert.ok(open, 'delta inside a block');
      assert.equal(ev.index, msg.content.length);
      const d = ev.delta;
      if (d.type === 'text_delta') { assert.equal(open.type, 'text'); open.text += d.text; }
      else if (d.type === 'thinking_delta') {
        assert.equal(open.type, 'thinking');
        assert.equal(open.signature, '', 'no thinking after the signature');
        open.thinking += d.thinking;
      } else if (d.type === 'signature_delta') { assert.equal(open.type, 'thinking'); open.signature += d.signature; }
      else if (d.type === 'input_json_delta') { assert.equal(open.type, 'tool_use'); open.partial += d.partial_json; }
      else assert.fail(`unexpected delta ${d.type}`);
    } else if (ev.type === 'content_block_stop') {
      assert.ok(open);
      assert.equal(ev.index, msg.content.length);
      if (open.type === 'tool_use') {
        open.input = JSON.parse(open.partial);
        delete open.partial;
      }
      msg.content.push(open);
      open = null;
    } else if (ev.type !== 'ping') {
      assert.fail(`unexpected event ${ev.type}`);
    }
  }
  assert.equal(open, null, 'every block closed');
  const delta = events.at(-2);
  assert.equal(delta.delta.stop_sequence, null);
  msg.stop_reason = delta.delta.stop_reason;
  msg.stop_sequence = null;
  msg.usage = { ...msg.usage, output_tokens: delta.usage.output_tokens };
  return { msg, events };
}

