import { type DoorCredentials, type SessionEnded, type StagedPlan, isRuntimeOwned, sessionUrl, topics } from '@murmur/shared';
import type { Bus, Subscription } from '@murmur/shared/bus';
import type { Runtime } from './runtime.js';

/**
 * What every launcher of a staged capsule does around the launch request — `mur run` and
 * `mur eval run` alike: listen for the session's end before asking, know its door URL before it
 * exists, and hand it only the launching side's values it may receive.
 */

/** The session's end, from a subscription made before the launch is asked for, so it cannot be missed. */
export function watchSessionEnd(bus: Bus, sessionId: string): { ended: Promise<SessionEnded>; subscription: Subscription } {
  let resolveEnded!: (event: SessionEnded) => void;
  const ended = new Promise<SessionEnded>((resolve) => (resolveEnded = resolve));
  const subscription = bus.subscribe(topics.sessionEnded, (event) => {
    if (event.session_id === sessionId) resolveEnded(event);
  });
  return { ended, subscription };
}

/**
 * Where an agent session is reached (undefined for a script), known before its launch so that its
 * `MURMUR_CAPSULE_URL` and MURMUR.md can carry it, and what that door asks of its clients.
 * `sole`: the door serves only this session, and its card at the origin's root as well (`mur
 * run`'s own door).
 */
export async function sessionDoor(
  runtime: Runtime,
  plan: StagedPlan,
  sessionId: string,
  options: { bind?: string; sole?: boolean } = {},
): Promise<{ url: string; credentials: DoorCredentials } | undefined> {
  if (plan.capsule.kind !== 'agent') return undefined;
  const door = await runtime.door(options.bind ?? '127.0.0.1', plan.capsule.manifest.network?.internal_port ?? 0, options.sole ? sessionId : undefined);
  return { url: `${sessionUrl(door.base, sessionId)}/`, credentials: door.credentials };
}

/**
 * The launching side's values a capsule may receive: its allowlist, its `${VAR}`s, the names its
 * `shell.baseline_env` asks for — never one of the runtime's own settings (`isRuntimeOwned`),
 * which would otherwise cross the bus in the launch and be copied on into a delegated child's —
 * and the launcher's `MURMUR_FORMATION_ID`, which hooks are given. The subprocess baseline (`PATH`,
 * `HOME`, …) is the executor's own: it describes the machine the tools run on, and a launcher's
 * (the operator's `PATH`, its home) was meaningless in the executor's container and told the
 * capsule the operator's layout.
 */
export function launchEnvironment(plan: StagedPlan, env: Record<string, string>): Record<string, string> {
  const names = new Set([...plan.policy.env_allow, ...plan.secret_env, ...plan.policy.shell_baseline_env]);
  const values: Record<string, string> = {};
  for (const name of names) if (env[name] !== undefined && !isRuntimeOwned(name)) values[name] = env[name] as string;
  if (env.MURMUR_FORMATION_ID !== undefined) values.MURMUR_FORMATION_ID = env.MURMUR_FORMATION_ID;
  return values;
}
