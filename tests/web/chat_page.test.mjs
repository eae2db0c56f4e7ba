// ds4-server's chat page (GET /) in Debian's Chromium, driven by
// playwright-core as a person would use it, against a ds4-server on a tiny
// random model with an API key: a wrong key shows the server's error; with
// the right one a reply streams (its text grows while Stop is enabled),
// reasoning sits in a closed <details>, Stop ends the stream and keeps what
// came, a finished reply shows tokens/s and context use, and a reload keeps
// the conversations. DS4_SCREENSHOT_DIR=DIR also writes screenshots there
// (docs/images holds the committed ones).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

import { chromium } from 'playwright-core';

const KEY = 'page-test-key';
const CTX = 4096;

function requiredEnv(name) {
  const value = process.env[name];
  if (!value || !existsSync(value)) throw new Error(`${name} must name the built binary (CTest sets it)`);
  return value;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

function browserPath() {
  for (const p of [process.env.DS4_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser']) {
    if (p && existsSync(p)) return p;
  }
  return null;
}

let dir, server, browser, base;

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'ds4-page-'));
  const model = path.join(dir, 'tiny.gguf');
  execFileSync(requiredEnv('DS4_MKMODEL_BIN'), ['--out', model, '--seed', '9']);
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  server = spawn(requiredEnv('DS4_SERVER_BIN'),
    ['-m', model, '--port', String(port), '--ctx', String(CTX), '--api-key', KEY],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, DS4_LOCK_FILE: path.join(dir, 'ds4.lock') } });
  let log = '';
  server.stderr.on('data', (d) => { log += d; });
  for (let i = 0; ; ++i) {
    try {
      if ((await fetch(`${base}/health`)).ok) break;
    } catch { /* not listening yet */ }
    if (i > 300 || server.exitCode !== null) throw new Error(`ds4-server did not start:\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const executablePath = browserPath();
  if (!executablePath) throw new Error('Chromium is not installed (make test installs the Debian package chromium)');
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--disable-gpu'] });
});

after(async () => {
  if (browser) await browser.close();
  if (server) server.kill('SIGKILL');
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function shot(page, name) {
  const out = process.env.DS4_SCREENSHOT_DIR;
  if (out) await page.screenshot({ path: path.join(out, name) });
}

// The reply being written: reasoning and content text together.
async function replyText(page) {
  return page.evaluate(() => {
    const all = document.querySelectorAll('.message.assistant');
    const last = all[all.length - 1];
    return last ? last.textContent : '';
  });
}

test('the page is served whole, public, and cacheable by its ETag', async () => {
  const res = await fetch(`${base}/`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/html/);
  const html = await res.text();
  assert.match(html, /<title>DwarfStar<\/title>/);
  assert.ok(!/<script[^>]+src=/.test(html), 'the page loads no script from elsewhere');
  const etag = res.headers.get('etag');
  const again = await fetch(`${base}/`, { headers: { 'If-None-Match': etag } });
  assert.equal(again.status, 304);
  assert.equal((await fetch(`${base}/v1/models`)).status, 401);
});

test('a person chats: wrong key, streaming, stop, speed line, reload', async () => {
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  await page.goto(`${base}/`);

  // A wrong key: the server's message is shown.
  await page.fill('#api-key', 'wrong-key');
  await page.dispatchEvent('#api-key', 'change');
  await page.fill('#input', 'hello');
  await page.click('#send');
  await page.waitForSelector('#error:not([hidden])');
  assert.match(await page.textContent('#error'), /401: invalid API key/);
  await shot(page, 'chat-page-wrong-key.png');

  // The right key, a long reply (EOS banned) in thinking mode.
  await page.fill('#api-key', KEY);
  await page.dispatchEvent('#api-key', 'change');
  await page.waitForFunction(() => document.getElementById('model-name').textContent === 'DeepSeek V4 Flash');
  await page.click('#new-chat');
  await page.click('#advanced summary');
  await page.fill('#extra', JSON.stringify({ max_tokens: 3000, logit_bias: { 1: -100 } }));
  await page.fill('#input', 'Tell me a long story.');
  await page.click('#send');
  await page.waitForFunction(() => {
    const all = document.querySelectorAll('.message.assistant');
    return all.length && all[all.length - 1].textContent.length > 20;
  });
  const first = (await replyText(page)).length;
  await page.waitForFunction((n) => {
    const all = document.querySelectorAll('.message.assistant');
    return all[all.length - 1].textContent.length > n + 20;
  }, first);
  assert.equal(await page.isEnabled('#stop'), true, 'the reply is still streaming');
  assert.equal(await page.isDisabled('#send'), true);
  // Reasoning is in its own block, closed unless opened.
  assert.equal(await page.$eval('.message.assistant:last-child details.reasoning', (d) => d.open), false);
  await shot(page, 'chat-page-streaming.png');

  await page.click('#stop');
  await page.waitForSelector('#stop:disabled');
  await page.waitForSelector('.message.assistant:last-child .note');
  assert.equal(await page.textContent('.message.assistant:last-child .note'), '(stopped)');
  const stopped = await replyText(page);
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await replyText(page), stopped, 'nothing arrives after Stop');

  // A short answer without thinking: the status line has the speed and the context use.
  await page.uncheck('#thinking');
  await page.fill('#extra', JSON.stringify({ max_tokens: 16, logit_bias: { 1: -100 } }));
  await page.fill('#input', 'And a short one.');
  await page.press('#input', 'Enter');
  await page.waitForFunction(() => /tokens\/s · context \d+ \/ 4096/.test(document.getElementById('status').textContent));
  assert.match(await page.textContent('#status'), /^16 tokens, [0-9.]+ tokens\/s · context \d+ \/ 4096$/);
  await shot(page, 'chat-page.png');

  // A reload keeps both conversations and the messages.
  await page.reload();
  await page.waitForSelector('#conversations li');
  assert.equal(await page.$$eval('#conversations li', (l) => l.length), 2);
  assert.equal(await page.textContent('#conversations li.current .title'), 'Tell me a long story.');
  const users = await page.$$eval('.message.user', (l) => l.map((e) => e.textContent));
  assert.deepEqual(users, ['Tell me a long story.', 'And a short one.']);
  assert.equal(await page.textContent('.message.assistant .note'), '(stopped)');
  assert.equal(await page.inputValue('#api-key'), KEY);
  assert.deepEqual(pageErrors, []);
  await context.close();
});
