// ds4-server with --ssd-streaming (issue 24): the routed experts read from the
// model file into a cache of 5 experts (every layer's pass evicts and reads
// again; prefetch has room for 2). Truth: the same server without streaming;
// greedy replies must be the same text, and /metrics reports the cache's work
// (all zero without it).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, openaiClient, MODEL_NAME, LONG_SYSTEM } from './support.mjs';

let streamed;
let resident;

before(async () => {
  [streamed, resident] = await Promise.all([
    startServer({ args: ['--ssd-streaming', '--ssd-streaming-cache-experts', '5', '--cache-ram', '0'] }),
    startServer({ args: ['--cache-ram', '0'] }),
  ]);
});

after(async () => {
  for (const s of [streamed, resident]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, `clean exit on SIGTERM\n${s.stderr()}`);
  }
});

const request = {
  model: MODEL_NAME, max_tokens: 16, thinking: { type: 'disabled' }, temperature: 0,
  messages: [{ role: 'system', content: LONG_SYSTEM }, { role: 'user', content: 'Which build tool does the project use?' }],
};

async function metrics(server) {
  const text = await (await fetch(`${server.origin}/metrics`)).text();
  return (name) => {
    const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
    assert.ok(m, `${name} in /metrics`);
    return Number(m[1]);
  };
}

test('the streamed server replies as the resident one and /metrics shows the expert cache', async () => {
  const [a, b] = [await openaiClient(streamed).chat.completions.create(request),
    await openaiClient(resident).chat.completions.create(request)];
  assert.equal(a.choices[0].message.content, b.choices[0].message.content, 'the same greedy reply');
  assert.equal(a.usage.completion_tokens, b.usage.completion_tokens);

  const value = await metrics(streamed);
  assert.equal(value('ds4_expert_cache_slots'), 5);
  const served = value('ds4_expert_cache_hits_total') + value('ds4_expert_cache_prefetch_hits_total') +
    value('ds4_expert_cache_misses_total');
  assert.ok(value('ds4_expert_cache_misses_total') > 0, 'experts were read when needed');
  assert.ok(value('ds4_expert_cache_prefetched_total') > 0, 'experts were read ahead');
  assert.ok(value('ds4_expert_cache_prefetch_hits_total') <= value('ds4_expert_cache_prefetched_total'));
  assert.ok(value('ds4_expert_cache_read_bytes_total') > 0);
  assert.ok(value('ds4_expert_cache_wait_seconds_total') >= 0);
  // Every token of every layer selects n_expert_used experts, so a pass
  // serves at least one expert per prompt token over all layers.
  assert.ok(served >= b.usage.prompt_tokens, `served ${served} experts for ${b.usage.prompt_tokens} prompt tokens`);

  const off = await metrics(resident);
  for (const name of ['ds4_expert_cache_slots', 'ds4_expert_cache_misses_total', 'ds4_expert_cache_read_bytes_total'])
    assert.equal(off(name), 0, `${name} without --ssd-streaming`);
});
