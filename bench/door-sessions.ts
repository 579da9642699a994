/**
 * A bench's server of many sessions behind one door: the stager, the executor and a door in this
 * one process on the in-process bus (what `mur run` starts for one session), the capsule project
 * in `argv[2]` staged once and launched `argv[3]` times, each launch its own session — its own
 * sandboxed capsule host — answering at the same door. Prints one JSON line, `{"urls": [...]}`,
 * once every session's card answers; stops every session on SIGTERM.
 *
 * `MURMUR_HOME` must hold the project's artifacts (the bench publishes them there first).
 */
import path from 'node:path';
import { type LaunchReply, commands, newSessionId, sessionUrl, silentLog, topics } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { requestStaging, uploadProject } from '@murmur/shared/node';
import { listenHttp } from '@murmur/shared/service';
import { startDoorService } from '@murmur/door';
import { startExecutorService } from '@murmur/executor';
import { startStagerService } from '@murmur/stager';

const [project, countText] = process.argv.slice(2);
const count = Number(countText);
if (!project || !Number.isInteger(count) || count < 1) throw new Error('usage: door-sessions.ts <project dir> <session count>');

const env = process.env;
const bus = createBus(new InProcessTransport(), silentLog);
const stager = startStagerService({ bus, log: silentLog, env });
const executor = startExecutorService({ bus, log: silentLog, env });
const door = startDoorService({ bus, log: silentLog, env });
const listener = await listenHttp(door.http, { host: '127.0.0.1', port: 0 }, door.ahead);
door.setBaseUrl(listener.url);

const plan = await requestStaging(bus, {
  source: { kind: 'project', project: await uploadProject(bus, project, { digestCache: path.join(project, '..', 'digests.json') }) },
});
const sessions: string[] = [];
const ended = new Set<string>();
bus.subscribe(topics.sessionEnded, (event) => void ended.add(event.session_id));
await bus.flush();
const urls = await Promise.all(
  Array.from({ length: count }, async () => {
    const sessionId = newSessionId();
    sessions.push(sessionId);
    const url = `${sessionUrl(listener.url, sessionId)}/`;
    const launched: LaunchReply = await bus.request(
      commands.launch,
      { session_id: sessionId, plan, default_workdir_base: project, env: { PATH: env.PATH ?? '' }, url, relay_output: false },
      { timeoutMs: 60_000 },
    );
    return launched.url ?? url;
  }),
);
process.stdout.write(`${JSON.stringify({ urls })}\n`);

const stop = async (): Promise<void> => {
  await Promise.all(
    sessions
      .filter((sessionId) => !ended.has(sessionId))
      .map((sessionId) => bus.request(commands.stopSession.at(sessionId), { reason: 'the bench is over' }, { timeoutMs: 10_000 }).catch(() => undefined)),
  );
  await listener.close(1_000);
  await door.close();
  await executor.close();
  await stager.close();
  await bus.close();
  process.exit(0);
};
process.once('SIGTERM', () => void stop());
