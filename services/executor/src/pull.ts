import path from 'node:path';
import { LOCKFILE_NAME, MurmurError, commands, upsertLockEntry } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { readLockfile, writeLockfile } from '@murmur/shared/artifacts';
import type { HostTool } from './host/protocol.js';
import type { Session } from './session.js';
import { installArtifact } from './workdir.js';

/**
 * `murmur:artifact-manager#pull` for a running session, with upstream's rules: the artifact is
 * resolved and verified (by the stager, against its source's digest) before anything is written;
 * a pin in `murmur.lock` it would contradict is refused; the files land in the session's
 * `tools/<name>/`; and only then is the lock updated. A failure leaves nothing behind.
 */
export async function pullForSession(bus: Bus, session: Session, name: string, version: string): Promise<{ ok: true; value: { tool: HostTool } } | { ok: false; error: string }> {
  const plan = session.plan;
  let staged;
  try {
    staged = await bus.request(commands.stageArtifact, { name, version, ...(plan.capsule.origin.kind === 'directory' ? { project_dir: plan.capsule.origin.manifest_dir } : {}) }, { timeoutMs: 180_000 });
  } catch (error) {
    return { ok: false, error: `failed to resolve ${name}@${version}: ${error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error)}` };
  }
  const lockPath = plan.lock.path ?? (plan.capsule.origin.kind === 'directory' ? path.join(plan.capsule.origin.manifest_dir, LOCKFILE_NAME) : undefined);
  const lock = lockPath ? await readLockfile(lockPath).catch(() => undefined) : undefined;
  const pin = lock?.artifacts.find((entry) => entry.name === name);
  if (pin && (pin.resolved_version !== version || pin.sha256.wasm !== staged.sha256)) {
    return {
      ok: false,
      error: `murmur.lock conflict for '${name}': pinned ${pin.name}@${pin.resolved_version} (sha256 ${pin.sha256.wasm}), but the registry now resolves ${name}@${version} (sha256 ${staged.sha256}) — refusing to override a pinned artifact at runtime`,
    };
  }
  const tool = await installArtifact(session.paths.sessionDir, session.paths.accessible, staged);
  if (!tool) return { ok: false, error: `${name}@${version} is a ${staged.role}, not a tool or skill a capsule can call` };
  if (lockPath && staged.sha256) await writeLockfile(lockPath, upsertLockEntry(lock, { name, resolved_version: version, sha256: { wasm: staged.sha256 } }));
  return { ok: true, value: { tool } };
}
