// ds4-server's chat page: conversations kept in this browser (localStorage),
// replies streamed from /v1/chat/completions (SSE) and rendered as Markdown
// with highlighted code, reasoning in a collapsible block, a Stop button,
// tokens/s and context use, an API key field.
'use strict';

const STORE = 'ds4-chat.conversations';
const KEY_STORE = 'ds4-chat.api-key';
const $ = (id) => document.getElementById(id);

const state = {
  conversations: [],
  current: null,      // id of the conversation shown
  controller: null,   // AbortController of the running request
  contextLength: 0,
};

function load() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORE) || '[]');
    if (Array.isArray(saved)) state.conversations = saved;
  } catch { state.conversations = []; }
  $('api-key').value = localStorage.getItem(KEY_STORE) || '';
  state.current = state.conversations.length ? state.conversations[0].id : null;
}

function save() { localStorage.setItem(STORE, JSON.stringify(state.conversations)); }

function currentConversation() { return state.conversations.find((c) => c.id === state.current) || null; }

function newConversation() {
  const c = { id: `${Date.now()}-${Math.random().toString(16).slice(2)}`, title: 'New chat', messages: [], updated: Date.now() };
  state.conversations.unshift(c);
  state.current = c.id;
  save();
  return c;
}

function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[ch]));
}

// The model's raw HTML is shown as text and links keep http(s) and mailto
// only: a reply cannot run script in the page.
marked.use({
  gfm: true,
  breaks: false,
  renderer: {
    html(token) { return escapeHtml(token.text || token.raw || ''); },
    link(token) {
      const href = String(token.href || '');
      const text = this.parser.parseInline(token.tokens);
      if (!/^(https?:|mailto:)/i.test(href)) return text;
      return `<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer">${text}</a>`;
    },
    image(token) { return escapeHtml(token.text || ''); },
  },
});

function renderMarkdown(el, text) {
  el.innerHTML = marked.parse(text);
  el.querySelectorAll('pre code').forEach((code) => hljs.highlightElement(code));
}

function renderSidebar() {
  const list = $('conversations');
  list.replaceChildren();
  for (const c of state.conversations) {
    const li = document.createElement('li');
    li.className = c.id === state.current ? 'current' : '';
    li.dataset.id = c.id;
    const title = document.createElement('span');
    title.className = 'title';
    title.textContent = c.title;
    const del = document.createElement('button');
    del.className = 'delete';
    del.type = 'button';
    del.title = 'Delete';
    del.textContent = '×';
    del.addEventListener('click', (ev) => {
      ev.stopPropagation();
      if (state.controller) return;
      state.conversations = state.conversations.filter((x) => x.id !== c.id);
      if (state.current === c.id) state.current = state.conversations.length ? state.conversations[0].id : null;
      save();
      renderAll();
    });
    li.append(title, del);
    li.addEventListener('click', () => {
      if (state.controller) return;
      state.current = c.id;
      renderAll();
    });
    list.append(li);
  }
}

function messageElement(m) {
  const div = document.createElement('div');
  div.className = `message ${m.role}${m.error ? ' error' : ''}`;
  if (m.role === 'user') {
    div.textContent = m.content;
    return div;
  }
  if (m.reasoning) {
    const details = document.createElement('details');
    details.className = 'reasoning';
    const summary = document.createElement('summary');
    summary.textContent = 'Reasoning';
    const text = document.createElement('div');
    text.className = 'text';
    text.textContent = m.reasoning;
    details.append(summary, text);
    div.append(details);
  }
  const body = document.createElement('div');
  body.className = 'content';
  if (m.error) body.textContent = m.error;
  else renderMarkdown(body, m.content || '');
  div.append(body);
  if (m.note) {
    const note = document.createElement('div');
    note.className = 'note';
    note.textContent = m.note;
    div.append(note);
  }
  return div;
}

function renderMessages() {
  const box = $('messages');
  box.replaceChildren();
  const c = currentConversation();
  if (!c) return;
  for (const m of c.messages) box.append(messageElement(m));
  box.scrollTop = box.scrollHeight;
}

function renderAll() {
  renderSidebar();
  renderMessages();
}

function showError(text) {
  const e = $('error');
  e.textContent = text;
  e.hidden = !text;
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

function extraFields() {
  const text = $('extra').value.trim();
  if (!text) return {};
  const value = JSON.parse(text);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error('extra request fields must be a JSON object');
  return value;
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api-key').value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function errorText(res) {
  const body = await res.text();
  try {
    const j = JSON.parse(body);
    if (j && j.error && j.error.message) return `${res.status}: ${j.error.message}`;
  } catch { /* not JSON */ }
  return `${res.status}: ${body || res.statusText}`;
}

// Server-sent events from a fetch body: calls onData with each data payload.
async function readEvents(res, onData) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (line.startsWith('data:')) onData(line.slice(5).trim());
      }
    }
  }
}

async function send() {
  const text = $('input').value;
  if (!text.trim() || state.controller) return;
  let extra;
  try {
    extra = extraFields();
  } catch (e) {
    showError(`extra request fields: ${e.message}`);
    return;
  }
  showError('');
  const c = currentConversation() || newConversation();
  if (c.messages.length === 0) c.title = text.trim().slice(0, 40);
  c.messages.push({ role: 'user', content: text });
  const reply = { role: 'assistant', content: '', reasoning: '' };
  c.messages.push(reply);
  c.updated = Date.now();
  $('input').value = '';
  save();
  renderAll();

  // The reply's element is redrawn at most once per frame while it streams.
  const box = $('messages');
  let shown = box.lastElementChild;
  let scheduled = false;
  const redraw = () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => {
      scheduled = false;
      const fresh = messageElement(reply);
      shown.replaceWith(fresh);
      shown = fresh;
      box.scrollTop = box.scrollHeight;
    });
  };

  const history = c.messages.slice(0, -1).filter((m) => !m.error).map((m) => ({ role: m.role, content: m.content }));
  const body = {
    model: $('thinking').checked ? 'deepseek-v4-flash' : 'deepseek-chat',
    messages: history,
    stream: true,
    stream_options: { include_usage: true },
    ...extra,
  };
  state.controller = new AbortController();
  setBusy(true);
  $('status').textContent = 'waiting for the model…';
  const started = performance.now();
  let firstToken = 0;
  let usage = null;
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: state.controller.signal,
    });
    if (!res.ok) throw new Error(await errorText(res));
    await readEvents(res, (data) => {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message || 'error');
      if (chunk.usage) usage = chunk.usage;
      const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
      if (!delta) return;
      if (delta.reasoning_content || delta.content) {
        if (!firstToken) firstToken = performance.now();
        reply.reasoning += delta.reasoning_content || '';
        reply.content += delta.content || '';
        redraw();
      }
    });
  } catch (e) {
    if (e.name === 'AbortError') {
      reply.note = '(stopped)';
    } else {
      reply.error = String(e.message || e);
      showError(reply.error);
    }
  } finally {
    state.controller = null;
    setBusy(false);
  }
  c.updated = Date.now();
  save();
  renderAll();
  const secs = firstToken ? (performance.now() - firstToken) / 1000 : 0;
  if (usage) {
    const tps = secs > 0 ? (usage.completion_tokens / secs).toFixed(1) : '–';
    const used = usage.prompt_tokens + usage.completion_tokens;
    const ctx = state.contextLength ? ` / ${state.contextLength}` : '';
    $('status').textContent = `${usage.completion_tokens} tokens, ${tps} tokens/s · context ${used}${ctx}`;
  } else {
    $('status').textContent = reply.note || reply.error ? '' : `${((performance.now() - started) / 1000).toFixed(1)} s`;
  }
}

async function loadModel() {
  try {
    const res = await fetch('/v1/models', { headers: headers() });
    if (!res.ok) return;
    const j = await res.json();
    const m = j.data && j.data[0];
    if (m) {
      $('model-name').textContent = m.name || m.id;
      state.contextLength = m.context_length || 0;
    }
  } catch { /* the status line stays without context size */ }
}

$('send').addEventListener('click', send);
$('stop').addEventListener('click', () => { if (state.controller) state.controller.abort(); });
$('new-chat').addEventListener('click', () => {
  if (state.controller) return;
  newConversation();
  renderAll();
  $('input').focus();
});
$('input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey) {
    ev.preventDefault();
    send();
  }
});
$('api-key').addEventListener('change', () => {
  localStorage.setItem(KEY_STORE, $('api-key').value.trim());
  loadModel();
});

load();
renderAll();
loadModel();
