import crypto from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { capabilityPolicy, commands, parseCapsuleManifest, silentLog, topics } from '@murmur/shared';
import { connectBus } from '@murmur/shared/bus';
import { packProject } from '@murmur/shared/node';
import { watchSessionEnd } from './session-launch.js';

/**
 * The first steps of a run against a stack, taken once while `mur-client.blob` is built: a V8
 * startup snapshot keeps the compiled code of every function that ran before it was taken, and a
 * run otherwise compiles each of them at its first call. Against a stack that was most of `mur`'s
 * own part of a run — the NATS connection took ~10 ms cold and ~3 warm, packing the project ~21 ms
 * against ~2, reading the manifest ~6 ms of a WAT capsule's ~140 ms run.
 *
 * Rehearsed: reading a manifest and its policy, packing a project, and on a NATS connection the
 * session's end watched, a flush, a request answered and the end heard, then the close. Not rehearsed:
 * JetStream (the project's upload into the object store), which needs a real server.
 *
 * It runs with an empty environment, and fails naming any variable it read that is not known to be
 * read afresh at every use: what it read of the build machine's could otherwise be kept in every
 * run. The project it packs is written beside the bundle and removed; the NATS server it talks to
 * is the build's (`scripts/snapshot.mjs`: a loopback stand-in that relays a client's messages back
 * to it), whose URL the build passes as the script's argument.
 */
export async function rehearseRunStart(besideBundle: string, natsUrl: string | undefined): Promise<void> {
  // The rehearsal sees an empty environment: whatever it would read of the build machine's could
  // otherwise be kept in the snapshot. What it read anyway must be read afresh at every use.
  const realEnv = process.env;
  const read = new Set<string>();
  process.env = new Proxy({} as NodeJS.ProcessEnv, {
    get: (_, key) => {
      if (typeof key === 'string') read.add(key);
      return undefined;
    },
  });
  // Node draws randomUUID and randomInt from a cache of random bytes filled at first use: drawn
  // here, that cache would be in the snapshot, and every run would draw the same values.
  const drew: string[] = [];
  const cached = { randomUUID: crypto.randomUUID, randomInt: crypto.randomInt };
  const refuse = (name: string) => () => {
    drew.push(name);
    throw new Error(`crypto.${name} is not drawn while a snapshot is built`);
  };
  Object.assign(crypto, { randomUUID: refuse('randomUUID'), randomInt: refuse('randomInt') });
  try {
    await rehearse(besideBundle, natsUrl);
  } finally {
    process.env = realEnv;
    Object.assign(crypto, cached);
  }
  if (drew.length > 0) throw new Error(`the rehearsal drew from crypto.${drew.join(', crypto.')}, whose cached entropy every run would share`);
  const unexpected = [...read].filter((name) => !READ_AFRESH.has(name));
  if (unexpected.length > 0)
    throw new Error(
      `the rehearsal read ${unexpected.map((name) => `process.env.${name}`).join(', ')}: read it where it is used, or list it in READ_AFRESH if it is`,
    );
}

/** What the rehearsed code reads of the environment on every call, never keeping it: yaml's debug switches. */
const READ_AFRESH = new Set(['LOG_TOKENS', 'LOG_STREAM']);

async function rehearse(besideBundle: string, natsUrl: string | undefined): Promise<void> {
  const manifest = parseCapsuleManifest(REHEARSAL_MANIFEST, { env: {} }).manifest;
  const policy = capabilityPolicy(manifest);
  const project = mkdtempSync(path.join(besideBundle, 'rehearsal-'));
  try {
    writeFileSync(path.join(project, 'murmur.yaml'), REHEARSAL_MANIFEST);
    writeFileSync(path.join(project, 'capsule.wasm'), EMPTY_MODULE);
    await packProject(project, { maxBytes: 1 << 20, digestCache: null, label: 'rehearsal' });
  } finally {
    rmSync(project, { recursive: true, force: true });
  }

  if (natsUrl === undefined) return;
  const bus = await connectBus({ natsUrl, name: 'mur', log: silentLog });
  try {
    const { ended, subscription } = watchSessionEnd(bus, REHEARSAL_END.session_id);
    bus.serve(commands.explainScope, () => ({ executor_id: 'rehearsal', effective_grants: {} }));
    await bus.flush();
    await bus.request(commands.explainScope, { policy }, { timeoutMs: 5_000 });
    bus.publish(topics.sessionEnded, REHEARSAL_END);
    await ended;
    subscription.unsubscribe();
  } finally {
    await bus.close();
  }
}

const REHEARSAL_MANIFEST = `name: rehearsal
version: 0.1.0
capabilities:
  env_allow: [HOME]
  limits:
    deadline_seconds: 30
`;

/** `\0asm`, version 1: the smallest file that is a WebAssembly module. */
const EMPTY_MODULE = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]);

const REHEARSAL_END = {
  session_id: 'ses_rehearsal',
  capsule_name: 'rehearsal',
  capsule_version: '0.1.0',
  executor_id: 'rehearsal',
  pid: 1,
  process_start: '',
  exit_status: 'ok',
  exit_code: 0,
  signal: null,
  duration_ms: 0,
  ended_at: new Date(0).toISOString(),
} as const;
