import { fstatSync } from 'node:fs';
import { Socket } from 'node:net';
import { CapsuleHost } from './capsule-host.js';
import { compileLazilyForGood, eagerWhile, loadLazily } from './compile-mode.js';
import type { HostChannel, SessionResult } from './contracts.js';
import { takeFirstGuestWorker } from './first-worker.js';
import { forgetPrecompiled, precompileCoreModules, preloadInWorker } from './guest-runner.js';
import type { SessionCall, SessionReply } from '@murmur/shared';
import type { ExecutorToHost, HostRequest, HostToExecutor } from './protocol.js';
import { EXECUTOR_FRAME_LIMIT_BYTES, FrameChannel, HOST_CHANNEL_FD } from './frame-channel.js';
import { fitForExecutor } from './message-fit.js';
import { sandboxSockets } from './hand-over-argument.js';
import { handOverSandboxSockets } from './sandbox-sockets.js';

/**
 * The capsule host process: started by an executor inside the session's sandbox with its channel
 * (`frame-channel.ts`, on descriptor 3) as its only connection to anything once its session
 * starts (a sealed sandbox's sockets go out before, over Node's IPC: `sandbox-sockets.ts`). It
 * waits for `start`, runs the session, reports the result and exits. It never reads its own
 * environment or argv on the guest's behalf: everything the guest may see arrives in `start`,
 * already decided by the executor.
 */

const timing = process.env.MURMUR_TIMING
  ? (label: string): void => void process.stderr.write(`[host timing] ${label} ${performance.now().toFixed(0)}ms\n`)
  : (): void => {};
timing('host loaded');

function isSocket(fd: number): boolean {
  try {
    return fstatSync(fd).isSocket();
  } catch {
    return false;
  }
}
/** What the host exits with when its channel closes: 1 until it sends a result, then that result's status (`finish`). */
let exitCode = 1;
if (!isSocket(HOST_CHANNEL_FD)) {
  process.stderr.write(`the capsule host must be started by an executor, with its channel on descriptor ${HOST_CHANNEL_FD}\n`);
  process.exit(2);
}
const executor = new FrameChannel(new Socket({ fd: HOST_CHANNEL_FD, readable: true, writable: true }), EXECUTOR_FRAME_LIMIT_BYTES, {
  message: (raw) => onExecutorMessage(raw),
  violation: (why) => {
    process.stderr.write(`[capsule-host] the executor's channel broke: ${why}\n`);
    process.exit(1);
  },
  // The executor is gone or has let this host go: nothing the host does can reach anyone now.
  // Its end of file says so as soon as the channel's close would (~1.5 ms before it, here).
  ended: () => process.exit(exitCode),
  close: () => process.exit(exitCode),
});

/**
 * Sends `message` fitted to the channel (`message-fit.ts`); returns why it was not sent, if it was
 * not. A message refused whole is said on stderr, which the executor keeps in `host.log`.
 * `carried` is told once the message is handed to the kernel, or will never be (refused, or the
 * channel closed).
 */
const send = (message: HostToExecutor, carried?: () => void): string | undefined => {
  const fitted = fitForExecutor(message);
  if ('refused' in fitted) {
    process.stderr.write(`[capsule-host] not sent: ${fitted.refused}\n`);
    carried?.();
    return fitted.refused;
  }
  executor.send(fitted.message, carried);
  return undefined;
};

/**
 * How long a host that sent its result waits for the executor to end the channel, which it does
 * once it has read the result, refused or not. Only an executor that is alive and never does is
 * waited for this long; a stalled one must not be given up on soon, since the host's exit is what
 * would lose the result (`finish`). `MURMUR_HOST_RESULT_WAIT_MS` shortens it for the test that
 * plays such an executor; the executor never sets it.
 */
const RESULT_HEARD_TIMEOUT_MS = Number(process.env.MURMUR_HOST_RESULT_WAIT_MS) || 30_000;

/**
 * Sends the session's result, then exits once the executor has read it: it ends the channel, and
 * the channel's close exits with `code`. Not as soon as it is written: a reply the executor writes
 * to a host that has already exited (one to a request sent just before the result) fails, and
 * Node's own handling of that failure drops what the executor had not yet read of the channel,
 * the result among it. The executor's channel reads it anyway (`FrameChannel.drainAfterError`),
 * but through Node's internals; this wait holds without them.
 */
function finish(result: HostToExecutor & { type: 'result' }, code: number): void {
  const fitted = fitForExecutor(result);
  const sent: HostToExecutor =
    'message' in fitted ? fitted.message : { type: 'result', status: 'failed', exit_code: 1, error: { code: 'E-RUN-001', message: fitted.refused } };
  exitCode = code;
  executor.send(sent, (error) => {
    // A result that did not reach the channel is not a success, whatever it said: the executor
    // hears an exit without a result, and host.log says why.
    if (error) {
      process.stderr.write(`[capsule-host] the session's result could not be sent to the executor: ${error.message}\n`);
      process.exit(1);
    }
    setTimeout(() => {
      process.stderr.write(`[capsule-host] the executor did not end the channel within ${RESULT_HEARD_TIMEOUT_MS / 1000} s of the result; exiting\n`);
      process.exit(code);
    }, RESULT_HEARD_TIMEOUT_MS);
  });
}

let nextRequest = 1;
const pending = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();

let serveCall: ((call: SessionCall) => SessionReply | Promise<SessionReply>) | undefined;
/** Door calls that came before the agent session could answer them (the door may call at once). */
const earlyCalls: Array<{ id: number; call: SessionCall }> = [];
let isAgent = false;

function answerCall(message: { id: number; call: SessionCall }): void {
  const failed = (error: unknown): SessionReply => ({
    error: { code: -32603, message: `Internal error: ${error instanceof Error ? error.message : String(error)}` },
  });
  let reply: SessionReply | Promise<SessionReply>;
  try {
    reply = serveCall ? serveCall(message.call) : { error: { code: -32603, message: 'this session does not accept A2A calls: it is not an agent capsule' } };
  } catch (error) {
    reply = failed(error);
  }
  if (reply instanceof Promise) void reply.catch(failed).then((settled) => send({ type: 'rpc-reply', id: message.id, reply: settled }));
  else send({ type: 'rpc-reply', id: message.id, reply });
}
let host: CapsuleHost | undefined;

const channel: HostChannel = {
  request(request: HostRequest) {
    const id = nextRequest++;
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject });
      const refused = send({ type: 'request', id, request });
      if (refused === undefined) return;
      pending.delete(id);
      reject(new Error(refused));
    });
  },
  output(stream, text, carried) {
    send({ type: 'output', stream, text }, carried);
  },
  event(event) {
    send({ type: 'event', event });
  },
  trace(line) {
    send({ type: 'trace', line });
  },
  serve(handler) {
    serveCall = handler;
    // Calls that arrived while the agent session was being set up are answered now, in order.
    for (const queued of earlyCalls.splice(0)) answerCall(queued);
  },
};

const prewarmed = takeFirstGuestWorker();
let started = false;
/** A sealed sandbox's sockets, handed over before its session (`hand-over`). */
let handingOver: Promise<void> | undefined;
/** A ceiling crossed before the host was made (the executor watches from the launch on). */
let earlyCeiling: (ExecutorToHost & { type: 'ceiling' }) | undefined;
// The executor is trusted and validates everything the host sends it; the host does not pay for a
// schema library to check its one trusted peer, which keeps it small and quick to start.
function onExecutorMessage(raw: unknown): void {
  if (raw === null || typeof raw !== 'object' || typeof (raw as { type?: unknown }).type !== 'string') return;
  const message = raw as ExecutorToHost;
  if (message.type === 'reply') {
    const waiting = pending.get(message.id);
    pending.delete(message.id);
    if (!waiting) return;
    if (message.ok) waiting.resolve(message.value);
    else waiting.reject(new Error(message.error ?? 'the executor refused the request'));
    return;
  }
  if (message.type === 'rpc') {
    if (!serveCall && (isAgent || !started)) earlyCalls.push(message);
    else answerCall(message);
    return;
  }
  if (message.type === 'stop') {
    // Tasks still waiting say why they end before the process goes.
    host?.stop(`the session was stopped: ${message.reason}`);
    exitCode = 143;
    executor.send({ type: 'output', stream: 'stderr', text: '' }, () => process.exit(143));
    return;
  }
  if (message.type === 'ceiling') {
    if (host) host.ceilingCrossed(message);
    else earlyCeiling = message;
    return;
  }
  if (message.type === 'hand-over' && !started && !handingOver) {
    handingOver = handOverSandboxSockets(sandboxSockets(message.sandbox));
    // Said as the session's failure: the executor, waiting for the sockets, reports it as the launch's.
    handingOver.catch(sandboxNotHandedOver);
    return;
  }
  if (message.type === 'expect' && !started) {
    expectComponent(message);
    return;
  }
  if (message.type === 'start' && !started) {
    started = true;
    compileLazilyForGood();
    isAgent = message.agent !== undefined;
    if (!isAgent) for (const queued of earlyCalls.splice(0)) answerCall(queued);
    timing('start received');
    void begin(message);
  }
}

/** The component (and memory cap) the host was last told to expect; undefined until it is told. */
let expected: string | undefined;

/**
 * Compiles and loads ahead what the host is told its session will run first. Told again of the
 * same, it has nothing to do; told of another (the pool's anticipation was wrong), it lets go of
 * what it had compiled and loaded for the first before it begins on the second.
 */
function expectComponent(message: ExecutorToHost & { type: 'expect' }): void {
  const { component, memory_limit_bytes: memoryBytes, table_elements_limit: tableElements } = message;
  // An agent's modules load lazily, and its driver's glue beside them: no eager window opens
  // while they load (`compile-mode.ts`). A capsule's own glue loads in one.
  if (message.agent) void loadLazily(agentSessionModule).catch(() => {});
  const key = JSON.stringify([component.bundle_dir, component.entry, memoryBytes, tableElements]);
  if (key !== expected) {
    if (expected !== undefined) forgetPrecompiled();
    expected = key;
    precompileCoreModules(component, { memoryBytes, tableElements });
    eagerWhile(preloadInWorker(prewarmed, component));
  }
}

function sandboxNotHandedOver(error: unknown): void {
  finish(
    {
      type: 'result',
      status: 'failed',
      exit_code: 1,
      error: {
        code: 'E-RUN-014',
        message: `the sealed sandbox's network could not be handed to the executor: ${error instanceof Error ? error.message : String(error)}`,
      },
    },
    1,
  );
}

async function begin(message: ExecutorToHost & { type: 'start' }): Promise<void> {
  // A pooled host started in `/`, before its workdir was mounted in: it moves there now, so it and
  // everything it starts run where a fresh host would have.
  if (process.cwd() !== message.accessible_workdir) process.chdir(message.accessible_workdir);
  if (message.sandbox) {
    // The executor asks for them first (`hand-over`), and starts the session once they are out.
    if (!handingOver) {
      sandboxNotHandedOver(new Error('the executor started the session before it took them'));
      return;
    }
    // One that failed was reported as it failed, and the executor never starts such a session.
    const handedOver = await handingOver.then(
      () => true,
      () => false,
    );
    if (!handedOver) return;
    timing('sandbox sockets handed over');
  }
  host = new CapsuleHost(message, channel, prewarmed);
  if (earlyCeiling) host.ceilingCrossed(earlyCeiling);
  runSession(host, message).then(
    (result) => {
      timing('guest finished');
      // Nothing is left to do: the host exits once the executor has read the result (`finish`).
      finish({ type: 'result', status: result.status, exit_code: result.exitCode, ...(result.error ? { error: result.error } : {}) }, 0);
    },
    (error: unknown) => {
      finish(
        {
          type: 'result',
          status: 'failed',
          exit_code: 1,
          error: { code: 'E-RUN-001', message: `the capsule host failed: ${error instanceof Error ? error.message : String(error)}` },
        },
        1,
      );
    },
  );
}
send({ type: 'ready' });

/**
 * The agent's task loop and all it uses (the schemas, the MCP tool server): ~480 KB a script
 * capsule's host does not load. A pooled host told it will serve an agent loads it while it
 * waits or while its workdir is attached (told so wrongly, ahead, it has it loaded and unused).
 */
let agentSession: Promise<typeof import('./agent-session.js')> | undefined;
function agentSessionModule(): Promise<typeof import('./agent-session.js')> {
  agentSession ??= import('./agent-session.js');
  return agentSession;
}

/** An agent's task loop over the host, or a script capsule's one run (the agent's modules load only for an agent). */
async function runSession(capsuleHost: CapsuleHost, message: ExecutorToHost & { type: 'start' }): Promise<SessionResult> {
  if (!message.agent) return capsuleHost.run();
  const { AgentSession } = await agentSessionModule();
  const session = new AgentSession(capsuleHost, message, message.agent, channel);
  capsuleHost.onStop((reason) => session.stop(reason));
  return session.run();
}
