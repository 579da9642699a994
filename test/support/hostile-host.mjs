// A capsule host taken over by its capsule: what a guest that broke out of WebAssembly could make
// of the host process. It starts as the runtime's host does (says `ready` on its framed channel,
// answers a sealed sandbox's `hand-over`, with no sockets), and once it is given its session it
// breaks its channels in the way the capsule's name says:
// - `announces-too-much`: a frame header announcing 4 GiB;
// - `not-json`: a whole frame whose body does not parse;
// - `empty-frame`: a frame of no bytes at all, the last thing it writes;
// - `ipc-after-start`: a line that is not JSON on Node's IPC channel (which the executor must have
//   closed by now: written to an open one, it would end the executor), then an honest result;
// - `exits-without-result`: two lines of output, then an exit with status 0 and no result;
// - `ok-then-breaks`: a result that says `ok`, then a frame header announcing 4 GiB;
// - `huge-error`: a failed result whose error message is 2 MB, then an exit;
// - `tells-its-env`: prints the environment it was given for subprocesses, then an honest result;
// - `malformed-request`: a request the executor refuses (a conversation of 10 001 messages); it
//   says on stderr how it was answered, then sends an honest result;
// - `floods-pulls`: 40 pulls at once (of an artifact no store holds); once all are answered it says
//   on stderr how many were refused for being too many at once, then sends an honest result;
// - `pulls-at-once`: eight pulls of `probe-tool@2.0.0` at once; once all are answered it says
//   on stderr how each was answered, then sends an honest result;
// - `floods-contexts`: conversation records for 5 contexts no client named, one after another; it
//   says on stderr how each was answered, then sends an honest result;
// - `deep-conversation` (an agent capsule with a threaded conversation): saves a message nested
//   100 deep and loads it back, saves one nested 10 deep and loads it back, then asks for 100
//   loads at once; it says on stderr how each was answered, then sends an honest result;
// - `floods-egress`: 1 100 checks of a URL the policy denies, then an honest result once all are answered;
// - `waits-for-end` (not hostile): a result, then an exit only once the executor ends the channel,
//   as the runtime's host does, saying on stderr that it was ended (status 0), or not (status 3);
// - `malformed-result`: the same, with a result whose status is no status.
import { writeSync } from 'node:fs';
import { Socket } from 'node:net';

// The executor's HANDOVER_FD (services/executor/src/host-sandbox.ts): where a sealed host's IPC channel is.
const HANDOVER_FD = 30;
const channel = new Socket({ fd: 3, readable: true, writable: true });

function frame(message) {
  const body = Buffer.from(JSON.stringify(message));
  const header = Buffer.alloc(4);
  header.writeUInt32BE(body.length);
  return Buffer.concat([header, body]);
}

/** A request frame whose `messages` hold one message nested `depth` arrays deep, written as text: nothing here walks it. */
function deepSave(id, depth) {
  const body = Buffer.from(
    `{"type":"request","id":${id},"request":{"op":"conversation-save","context_id":"ctx_deep","messages":[${'['.repeat(depth)}${']'.repeat(depth)}]}}`,
  );
  const header = Buffer.alloc(4);
  header.writeUInt32BE(body.length);
  return Buffer.concat([header, body]);
}
const load = (id) => frame({ type: 'request', id, request: { op: 'conversation-load', context_id: 'ctx_deep' } });
const LOADS = 100;
let deep;

const CHECKS = 1_100;
let checks;

const FLOOD = 40;
let flooding;
const CONTEXTS = 5;
let contexts;
let atOnce;
const PULLS_AT_ONCE = 8;

function saveContext(index) {
  const request = { op: 'conversation-save', context_id: `ctx_made_up_${index}`, messages: [{ role: 'user', content: 'x' }] };
  channel.write(frame({ type: 'request', id: 200 + index, request }));
}

let buffered = Buffer.alloc(0);
channel.on('data', (chunk) => {
  buffered = Buffer.concat([buffered, chunk]);
  while (buffered.length >= 4 && buffered.length >= 4 + buffered.readUInt32BE(0)) {
    const size = buffered.readUInt32BE(0);
    const message = JSON.parse(buffered.subarray(4, 4 + size).toString());
    buffered = buffered.subarray(4 + size);
    if (message.type === 'hand-over') process.send?.({ type: 'listeners-done' });
    if (message.type === 'start' && message.capsule_name === 'tells-its-env') {
      process.stderr.write(`hostile host: subprocess_env ${JSON.stringify(message.subprocess_env)}\n`);
      channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => process.exit(0));
    } else if (message.type === 'start') breakChannels(message.capsule_name);
    if (message.type === 'reply' && checks) {
      checks.answered += 1;
      if (checks.answered === CHECKS) channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => process.exit(0));
    } else if (message.type === 'reply' && deep) {
      const said = `ok=${message.ok} ${message.ok ? `messages=${message.value?.length ?? 'none'}` : message.error}`;
      if (message.id === 301) process.stderr.write(`hostile host: 100 deep loaded ${said}\n`);
      if (message.id === 303) process.stderr.write(`hostile host: 10 deep loaded ${said}\n`);
      if (message.id === 300) channel.write(load(301));
      else if (message.id === 301) channel.write(deepSave(302, 10));
      else if (message.id === 302) channel.write(load(303));
      else if (message.id === 303) channel.write(Buffer.concat(Array.from({ length: LOADS }, (_, index) => load(400 + index))));
      else if (message.id >= 400) {
        deep.answered += 1;
        if (!message.ok && /records already/.test(message.error)) {
          deep.refused += 1;
          deep.refusal = message.error;
        }
        if (deep.answered === LOADS) {
          process.stderr.write(`hostile host: ${LOADS} loads answered, ${deep.refused} refused: ${deep.refusal ?? ''}\n`);
          channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => process.exit(0));
        }
      }
    } else if (message.type === 'reply' && contexts) {
      process.stderr.write(`hostile host: context ${message.id} answered ok=${message.ok}: ${message.error ?? ''}\n`);
      contexts.left -= 1;
      if (contexts.left > 0) saveContext(CONTEXTS - contexts.left);
      else channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => process.exit(0));
    } else if (message.type === 'reply' && atOnce) {
      atOnce.push(
        `${message.id} ok=${message.ok && message.value?.ok !== false}${message.ok && message.value?.ok !== false ? '' : ` (${message.value?.error ?? message.error})`}`,
      );
      if (atOnce.length === PULLS_AT_ONCE) {
        process.stderr.write(`hostile host: pulls answered ${atOnce.sort().join(', ')}\n`);
        channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => process.exit(0));
      }
    } else if (message.type === 'reply' && flooding) {
      flooding.answered += 1;
      const refusal = message.value?.ok === false ? message.value.error : undefined;
      if (message.ok && /the most it takes at once/.test(refusal ?? '')) {
        flooding.refused += 1;
        flooding.refusal = refusal;
      }
      if (flooding.answered === FLOOD) {
        process.stderr.write(`hostile host: ${flooding.answered} pulls answered, ${flooding.refused} refused as too many: ${flooding.refusal ?? ''}\n`);
        channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => process.exit(0));
      }
    } else if (message.type === 'reply') {
      process.stderr.write(`hostile host: request ${message.id} answered ok=${message.ok}: ${message.error ?? ''}\n`);
      channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => process.exit(0));
    }
  }
});

function breakChannels(how) {
  if (how === 'announces-too-much') {
    channel.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 0x7b]));
  } else if (how === 'empty-frame') {
    channel.write(Buffer.alloc(4));
  } else if (how === 'not-json') {
    channel.write(Buffer.concat([Buffer.from([0, 0, 0, 8]), Buffer.from('not json')]));
  } else if (how === 'ipc-after-start') {
    try {
      writeSync(HANDOVER_FD, 'this line is not JSON\n');
      process.stderr.write('hostile host: the hand-over channel took the line\n');
    } catch (error) {
      process.stderr.write(`hostile host: the hand-over channel refused the line (${error.code})\n`);
    }
    channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => process.exit(0));
  } else if (how === 'waits-for-end' || how === 'malformed-result') {
    channel.on('end', () => {
      process.stderr.write('hostile host: the executor ended the channel after the result\n');
      process.exit(0);
    });
    channel.write(frame({ type: 'result', status: how === 'waits-for-end' ? 'ok' : 'splendid', exit_code: 0 }));
    setTimeout(() => process.exit(3), 10_000);
  } else if (how === 'ok-then-breaks') {
    channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }));
    channel.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 0x7b]));
  } else if (how === 'huge-error') {
    const error = { code: 'E-RUN-001', message: 'x'.repeat(2 * 1024 * 1024), hint: 'h'.repeat(100_000) };
    channel.write(frame({ type: 'result', status: 'failed', exit_code: 1, error }), () => process.exit(1));
  } else if (how === 'malformed-request') {
    const messages = Array.from({ length: 10_001 }, () => ({}));
    channel.write(frame({ type: 'request', id: 7, request: { op: 'conversation-save', context_id: 'ctx_1', messages } }));
  } else if (how === 'floods-egress') {
    checks = { answered: 0 };
    const url = `http://denied.example/${'p'.repeat(2_000)}`;
    channel.write(
      Buffer.concat(
        Array.from({ length: CHECKS }, (_, index) =>
          frame({ type: 'request', id: 1_000 + index, request: { op: 'http-check', request: { url, grant: 'capsule' } } }),
        ),
      ),
    );
  } else if (how === 'deep-conversation') {
    deep = { answered: 0, refused: 0, refusal: undefined };
    channel.write(deepSave(300, 100));
  } else if (how === 'floods-contexts') {
    contexts = { left: CONTEXTS };
    saveContext(0);
  } else if (how === 'floods-pulls') {
    flooding = { answered: 0, refused: 0, refusal: undefined };
    const pulls = Array.from({ length: FLOOD }, (_, index) =>
      frame({ type: 'request', id: 100 + index, request: { op: 'pull', request: { name: 'no-such-tool', version: '1.0.0' } } }),
    );
    channel.write(Buffer.concat(pulls));
  } else if (how === 'pulls-at-once') {
    atOnce = [];
    const pull = (id) => frame({ type: 'request', id, request: { op: 'pull', request: { name: 'probe-tool', version: '2.0.0' } } });
    channel.write(Buffer.concat(Array.from({ length: PULLS_AT_ONCE }, (_, index) => pull(501 + index))));
  } else if (how === 'exits-without-result') {
    channel.write(frame({ type: 'output', stream: 'stdout', text: 'one\n' }));
    channel.write(frame({ type: 'output', stream: 'stdout', text: 'two\n' }), () => process.exit(0));
  }
  // Held open, as a host that goes on running would be, until the executor ends it.
  setInterval(() => {}, 60_000);
}

channel.write(frame({ type: 'ready' }));
