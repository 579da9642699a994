import net from 'node:net';
import { MurmurError, silentLog } from '@murmur/shared';
import { connectBus, shownNatsUrl } from '@murmur/shared/bus';
import { askEveryService } from '../stack-health.js';
import type { ReportLine } from './host-checks.js';

/**
 * Whether the stack `MURMUR_NATS_URL` names answers: the bus within the timeout, then every
 * service's health check within it. Unset is not a failure (`mur` then runs everything
 * in-process); set and silent is, because every `mur` command would then wait on it.
 */

/** Long enough for a loaded stack on loopback, short enough that a dead one costs a blink. */
export const STACK_TIMEOUT_MS = 2_000;

export interface StackCheck {
  /** Undefined when no stack is configured: nothing was checked. */
  passed: boolean | undefined;
  line: ReportLine;
}

function seconds(milliseconds: number): string {
  return `${milliseconds / 1000} s`;
}

/** A server of the list a NATS URL names, as host and port (4222 when none is written). */
function servers(url: string): Array<{ host: string; port: number }> {
  return url.split(',').flatMap((entry) => {
    const text = entry.trim();
    try {
      const parsed = new URL(text.includes('://') ? text : `nats://${text}`);
      return [{ host: parsed.hostname.replace(/^\[|\]$/g, ''), port: Number(parsed.port || '4222') }];
    } catch {
      return [];
    }
  });
}

/**
 * Whether a NATS server greets (its `INFO` line, sent on every new connection) within the timeout.
 * Asked on a socket of our own that is destroyed either way, before the client connects: the
 * client's own timeout rejects on time but leaves its socket connecting for seconds more, which
 * would hold `mur doctor` open long after it has answered.
 */
function greeting(host: string, port: number, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    let said = '';
    const finish = (problem: string | undefined): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(problem);
    };
    const timer = setTimeout(() => finish(`${host}:${port} did not greet within ${seconds(timeoutMs)}`), timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      said += chunk.toString('latin1');
      if (said.startsWith('INFO ')) finish(undefined);
      else if (said.length >= 5) finish(`${host}:${port} answered, but not as a NATS server`);
    });
    socket.on('error', (error: NodeJS.ErrnoException) => finish(`${host}:${port}: ${error.code ?? error.message}`));
    socket.on('close', () => finish(`${host}:${port} closed the connection`));
  });
}

/** Undefined when some server of the URL greets; else why none did. */
async function busProblem(url: string, timeoutMs: number): Promise<string | undefined> {
  const problems: string[] = [];
  for (const server of servers(url)) {
    const problem = await greeting(server.host, server.port, timeoutMs);
    if (problem === undefined) return undefined;
    problems.push(problem);
  }
  return problems.length > 0 ? problems.join('; ') : `'${url}' names no server`;
}

export async function checkStack(env: NodeJS.ProcessEnv = process.env, timeoutMs = STACK_TIMEOUT_MS): Promise<StackCheck> {
  const given = env.MURMUR_NATS_URL?.trim();
  if (!given) {
    return {
      passed: undefined,
      line: { mark: '-', label: 'stack', detail: 'MURMUR_NATS_URL is not set: mur runs every service in-process', notes: [] },
    };
  }
  // What doctor prints names the bus without the token its URL may carry.
  const url = shownNatsUrl(given) as string;
  const unreachable = await busProblem(url, timeoutMs);
  if (unreachable !== undefined) {
    return {
      passed: false,
      line: { mark: '✗', label: 'stack', detail: `${url}: no bus answers (asked with a ${seconds(timeoutMs)} timeout)`, notes: [unreachable] },
    };
  }
  let bus: Awaited<ReturnType<typeof connectBus>>;
  try {
    bus = await connectBus({ natsUrl: given, name: 'mur doctor', log: silentLog, connectTimeoutMs: timeoutMs });
  } catch (error) {
    const reason = error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error);
    return {
      passed: false,
      line: { mark: '✗', label: 'stack', detail: `${url}: no bus answers (asked with a ${seconds(timeoutMs)} timeout)`, notes: [reason] },
    };
  }
  try {
    const answers = await askEveryService(bus, timeoutMs);
    const silent = answers.filter((answer) => 'error' in answer && !answer.refused).map((answer) => answer.service);
    const refused = [...new Set(answers.filter((answer) => 'error' in answer && answer.refused).map((answer) => answer.service))];
    const notes = answers.map((answer) =>
      'reply' in answer
        ? `✓  ${answer.service.padEnd(8)}  ${answer.reply.instance_id}, pid ${answer.reply.pid}, up ${Math.round(answer.reply.uptime_ms / 1000)}s`
        : `✗  ${answer.service.padEnd(8)}  ${answer.refused ? 'refused answer' : 'no answer'}: ${answer.error}`,
    );
    const failures = [
      ...(silent.length > 0 ? [`${silent.join(', ')} did not answer within ${seconds(timeoutMs)}`] : []),
      ...(refused.length > 0 ? [`${refused.join(', ')} answered what mur refuses (another version?)`] : []),
    ];
    return failures.length === 0
      ? { passed: true, line: { mark: '✓', label: 'stack', detail: `${url}: every service answers (asked with a ${seconds(timeoutMs)} timeout)`, notes } }
      : { passed: false, line: { mark: '✗', label: 'stack', detail: `${url}: ${failures.join('; ')}`, notes } };
  } finally {
    await bus.close();
  }
}
