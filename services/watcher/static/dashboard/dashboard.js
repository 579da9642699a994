// The operator dashboard's page: one EventSource to the watcher, a snapshot on connect, then each
// session and egress decision as the bus delivers it. Everything is drawn with textContent — a
// capsule name or a trace label is data, never markup — and nothing is kept but what was sent.

const sessions = new Map();
const egress = [];
const EGRESS_SHOWN = 60;
let selected = location.hash.startsWith('#ses_') ? location.hash.slice(1) : null;
let timelineTimer;

const $ = (id) => document.getElementById(id);

// Controls a page would act on in text: the bidirectional ones first (`safe\u202egnp.exe` reads as
// `safeexe.png`), and the C0 and C1 controls. Shown as their escapes, as mur shows them.
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this pattern finds
const SHOWN_CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;
const shown = (text) => String(text).replace(SHOWN_CONTROLS, (control) => `\\u${control.charCodeAt(0).toString(16).padStart(4, '0')}`);

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') node.className = value;
    else node.setAttribute(name, name === 'title' ? shown(value) : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child instanceof Node ? child : shown(child));
  return node;
}

const short = (id) => (id ? `${id.slice(0, 4)}…${id.slice(-6)}` : '—');

function age(fromIso, toIso) {
  const seconds = Math.max(0, Math.round(((toIso ? Date.parse(toIso) : Date.now()) - Date.parse(fromIso)) / 1000));
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${seconds % 60}s`;
  return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
}

const clock = (iso) => new Date(iso).toLocaleTimeString([], { hour12: false });

function badge(state) {
  const title = state === 'ended' ? 'its executor stopped listing it, and its end was never heard: how it ended is unknown' : undefined;
  return element('span', { class: `badge state-${state}`, title }, state);
}

function renderCounts() {
  const all = [...sessions.values()];
  $('count-running').textContent = String(all.filter((session) => session.state === 'running').length);
  $('count-ended').textContent = String(all.filter((session) => session.state !== 'running').length);
  // Executors with a session running: the board hears of executors only through their sessions.
  $('count-executors').textContent = String(new Set(all.filter((session) => session.state === 'running').map((session) => session.executor_id)).size);
  $('count-allowed').textContent = String(egress.filter((decision) => decision.decision === 'allowed').length);
  // The policy's refusals apart from the network's failures (allowed, then not reached).
  $('count-denied').textContent = String(egress.filter((decision) => decision.decision === 'denied').length);
  $('count-failed').textContent = String(egress.filter((decision) => decision.decision === 'failed').length);
}

function renderSessions() {
  const rows = [...sessions.values()].sort((a, b) => (a.state === 'running') - (b.state === 'running') || a.started_at.localeCompare(b.started_at)).reverse();
  const body = $('sessions');
  body.replaceChildren(
    ...rows.map((session) =>
      element(
        'tr',
        { 'data-session-id': session.session_id, 'data-state': session.state, class: session.session_id === selected ? 'selected' : undefined, tabindex: 0 },
        element('td', {}, element('span', { class: 'capsule' }, session.capsule_name), element('span', { class: 'version' }, `@${session.capsule_version}`)),
        element('td', { class: 'mono', title: session.session_id }, short(session.session_id)),
        element('td', { class: 'mono', title: session.executor_id }, session.executor_id),
        element('td', {}, badge(session.state), session.error_code ? element('span', { class: 'code' }, session.error_code) : null),
        element(
          'td',
          { class: 'mono', title: session.task?.task_id ?? '' },
          session.task ? element('span', {}, badge(session.task.state), ' ', short(session.task.task_id)) : '—',
        ),
        element('td', { class: 'num' }, session.task?.turn ?? '—'),
        element(
          'td',
          { class: 'num age', 'data-started': session.started_at, 'data-ended': session.ended_at ?? '' },
          age(session.started_at, session.ended_at),
        ),
      ),
    ),
  );
  $('sessions-empty').hidden = rows.length > 0;
}

function renderDelegations() {
  const children = new Map();
  for (const session of sessions.values()) {
    if (!session.parent_session_id) continue;
    if (!children.has(session.parent_session_id)) children.set(session.parent_session_id, []);
    children.get(session.parent_session_id).push(session);
  }
  const node = (session, parentId) => {
    const kids = children.get(session.session_id) ?? [];
    const completion = session.completion
      ? element(
          'span',
          {
            class: `badge completion-${session.completion.status}`,
            'data-completion': session.completion.status,
            title: session.completion.delivered ? 'delivered to its parent' : 'recorded, not delivered',
          },
          `${session.completion.status} · by ${session.completion.reported_by}`,
        )
      : session.parent_session_id
        ? element('span', { class: 'badge pending' }, session.state === 'running' ? 'running' : 'no report')
        : null;
    return element(
      'li',
      { 'data-session-id': session.session_id, 'data-parent': parentId ?? undefined },
      element(
        'div',
        { class: 'node' },
        element('span', { class: 'capsule' }, session.capsule_name),
        element('span', { class: 'mono' }, short(session.session_id)),
        badge(session.state),
        completion,
      ),
      kids.length > 0 ? element('ul', {}, ...kids.map((kid) => node(kid, session.session_id))) : null,
    );
  };
  const roots = [...children.keys()].map(
    (id) =>
      sessions.get(id) ?? {
        session_id: id,
        capsule_name: '(not seen)',
        capsule_version: '',
        state: 'unknown',
        parent_session_id: null,
        completion: null,
      },
  );
  const topLevel = roots.filter((root) => !root.parent_session_id || !sessions.has(root.parent_session_id));
  $('delegations').replaceChildren(...topLevel.map((root) => node(root, null)));
  $('delegations-empty').hidden = topLevel.length > 0;
}

function renderEgress() {
  const rules = new Map();
  for (const decision of egress) {
    const rule = decision.rule ?? '(no rule)';
    const counts = rules.get(rule) ?? { allowed: 0, refused: 0 };
    if (decision.decision === 'allowed') counts.allowed += 1;
    else counts.refused += 1;
    rules.set(rule, counts);
  }
  $('egress-rules').replaceChildren(
    ...[...rules.entries()].map(([rule, counts]) =>
      element(
        'span',
        { class: 'rule', 'data-rule': rule },
        element('span', { class: 'mono' }, rule),
        counts.allowed > 0 ? element('span', { class: 'allowed' }, `${counts.allowed} allowed`) : null,
        counts.refused > 0 ? element('span', { class: 'denied' }, `${counts.refused} refused`) : null,
      ),
    ),
  );
  $('egress').replaceChildren(
    ...egress
      .slice(-EGRESS_SHOWN)
      .reverse()
      .map((decision) =>
        element(
          'tr',
          { 'data-decision': decision.decision, 'data-session-id': decision.session_id },
          element('td', { class: 'mono' }, clock(decision.at)),
          element('td', { class: 'mono', title: decision.session_id }, short(decision.session_id)),
          element('td', {}, decision.kind),
          element('td', { class: 'mono target' }, decision.target),
          element(
            'td',
            {},
            element('span', { class: `badge decision-${decision.decision}` }, decision.decision),
            decision.code ? element('span', { class: 'code' }, decision.code) : null,
          ),
          element('td', { class: 'mono' }, decision.rule ?? '—'),
        ),
      ),
  );
  $('egress-empty').hidden = egress.length > 0;
}

function renderAll() {
  renderCounts();
  renderSessions();
  renderDelegations();
  renderEgress();
}

async function loadTimeline() {
  if (!selected) return;
  const list = $('timeline');
  $('timeline-session').textContent = shown(selected);
  $('timeline-hint').hidden = true;
  const response = await fetch(`/dashboard/api/sessions/${encodeURIComponent(selected)}/timeline`, { credentials: 'same-origin' });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    list.replaceChildren(
      element('li', { class: 'refused' }, `${body.error?.code ?? response.status}: ${body.error?.message ?? 'the trace could not be read'}`),
    );
    return;
  }
  const entries = body.entries ?? [];
  const first = entries[0]?.at ?? 0;
  const longest = Math.max(1, ...entries.map((entry) => entry.duration_ms ?? 0));
  list.replaceChildren(
    ...entries.map((entry) =>
      element(
        'li',
        { class: `event type-${entry.type} outcome-${entry.outcome ?? 'none'}`, 'data-type': entry.type },
        element('span', { class: 'offset mono' }, `+${((entry.at - first) / 1000).toFixed(2)}s`),
        element('span', { class: 'label' }, entry.label),
        element('span', { class: 'detail' }, entry.detail),
        entry.duration_ms !== null
          ? element(
              'span',
              { class: 'duration' },
              element('span', { class: 'track' }, element('span', { class: 'bar' })),
              `${entry.duration_ms < 1000 ? `${Math.round(entry.duration_ms)} ms` : `${(entry.duration_ms / 1000).toFixed(1)} s`}`,
            )
          : element('span', { class: 'duration' }),
      ),
    ),
  );
  // Bar widths through the CSSOM: the page's policy allows no inline style attribute.
  list.querySelectorAll('li').forEach((item, index) => {
    const bar = item.querySelector('.bar');
    const duration = entries[index]?.duration_ms;
    if (bar && duration !== null && duration !== undefined) bar.style.width = `${Math.max(2, (duration / longest) * 100)}%`;
  });
  if (body.truncated) list.append(element('li', { class: 'refused' }, 'the trace is longer than the dashboard reads; its beginning is shown'));
  if (entries.length === 0) list.replaceChildren(element('li', { class: 'empty' }, 'no trace yet'));
}

function select(sessionId) {
  selected = sessionId;
  history.replaceState(null, '', `#${sessionId}`);
  renderSessions();
  void loadTimeline();
}

/** A session that changed while it is shown: its trace is read again, at most twice a second. */
function refreshTimelineOf(sessionId) {
  if (sessionId !== selected) return;
  clearTimeout(timelineTimer);
  timelineTimer = setTimeout(() => void loadTimeline(), 500);
}

function setConnection(state, text) {
  $('connection').dataset.state = state;
  $('connection-text').textContent = text;
}

/** How long the page waits before it asks for a refused stream again (doubled each time, to 30 s). */
let reconnectDelay = 500;

function connect() {
  const source = new EventSource('/dashboard/api/events');
  source.addEventListener('open', () => setConnection('live', 'live'));
  source.addEventListener('snapshot', (message) => {
    const snapshot = JSON.parse(message.data);
    sessions.clear();
    for (const session of snapshot.sessions) sessions.set(session.session_id, session);
    egress.splice(0, egress.length, ...snapshot.egress);
    document.body.dataset.watcher = snapshot.watcher_id;
    renderAll();
    if (selected) void loadTimeline();
  });
  source.addEventListener('session', (message) => {
    const session = JSON.parse(message.data);
    sessions.set(session.session_id, session);
    renderAll();
    refreshTimelineOf(session.session_id);
  });
  source.addEventListener('egress', (message) => {
    const decision = JSON.parse(message.data);
    egress.push(decision);
    if (egress.length > 200) egress.shift();
    renderCounts();
    renderEgress();
    refreshTimelineOf(decision.session_id);
  });
  source.addEventListener('bye', () => {
    setConnection('stopped', 'the watcher stopped');
    source.close();
  });
  source.addEventListener('error', () => {
    if (source.readyState !== EventSource.CLOSED) return setConnection('connecting', 'reconnecting…');
    // Refused (the watcher had no stream to spare, or answered with an error): the browser gives
    // up on such a source for good, so the page asks again, waiting longer each time.
    setConnection('stopped', 'disconnected');
    reconnectDelay = Math.min(reconnectDelay * 2, 30_000);
    setTimeout(connect, reconnectDelay);
  });
  source.addEventListener('open', () => {
    reconnectDelay = 500;
  });
}

$('sessions').addEventListener('click', (event) => {
  const row = event.target.closest('tr[data-session-id]');
  if (row) select(row.dataset.sessionId);
});
$('sessions').addEventListener('keydown', (event) => {
  const row = event.target.closest('tr[data-session-id]');
  if (row && (event.key === 'Enter' || event.key === ' ')) select(row.dataset.sessionId);
});
$('delegations').addEventListener('click', (event) => {
  const item = event.target.closest('li[data-session-id]');
  if (item && sessions.has(item.dataset.sessionId)) select(item.dataset.sessionId);
});

// Ages tick without a message: they are the one thing that changes while the bus is quiet.
setInterval(() => {
  for (const cell of document.querySelectorAll('td.age')) cell.textContent = age(cell.dataset.started, cell.dataset.ended || undefined);
}, 1000);

connect();
