import { type LockedArtifact, MurmurError, type StagedArtifact, commands, topics } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import type { HostTool } from './host/protocol.js';
import type { Session } from './session.js';
import { installArtifact } from './workdir.js';

/**
 * `murmur:artifact-manager#pull` for a running session, with upstream's rules: the artifact is
 * resolved and verified (by a stager, against its source's digest, searching the session's own
 * project store first) before anything is written; a pin it would contradict — in the lock the
 * session was staged with, or from a pull earlier in the session — is refused; the files land in
 * the session's `tools/<name>/`; and only then is the pin announced (`session.<id>.pinned`), for
 * the launcher to write into its `murmur.lock`, which only the launcher's machine holds. A failure
 * leaves nothing behind.
 */
export function pullForSession(bus: Bus, session: Session, name: string, version: string): Promise<PullAnswer> {
  // Pulls of one name are taken in turn: two at once each found no pin before either was
  // installed, and both pinned (or the second overwrote the first's files under its pin).
  const turns = session.pullTurns;
  const mine = (turns.get(name) ?? Promise.resolve()).then(() => pullOnce(bus, session, name, version));
  const settled = mine.then(
    () => {},
    () => {},
  );
  turns.set(name, settled);
  void settled.then(() => {
    if (turns.get(name) === settled) turns.delete(name);
  });
  return mine;
}

type PullAnswer = { ok: true; value: { tool: HostTool } } | { ok: false; error: string };

async function pullOnce(bus: Bus, session: Session, name: string, version: string): Promise<PullAnswer> {
  const plan = session.plan;
  let staged: StagedArtifact;
  try {
    staged = await bus.request(commands.stageArtifact, { name, version, ...(plan.project ? { project: plan.project } : {}) }, { timeoutMs: 180_000 });
  } catch (error) {
    return { ok: false, error: `failed to resolve ${name}@${version}: ${error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error)}` };
  }
  // A pull of an artifact the manifest declares keeps the operator's grant for it (its entry's
  // `capabilities`, never the artifact's own): pulled again, a tool declared with a folder of its
  // own was installed without one, and read and wrote the whole workdir.
  const declared = plan.artifacts.find((artifact) => artifact.name === name);
  const { capabilities: _notTheOperators, ...resolved } = staged;
  staged = { ...resolved, ...(declared?.capabilities ? { capabilities: declared.capabilities } : {}) };
  const pin = [...session.pulledPins, ...plan.lock.entries].find((entry) => entry.name === name);
  if (pin && (pin.resolved_version !== version || pin.sha256.wasm !== staged.sha256)) {
    return {
      ok: false,
      error: `murmur.lock conflict for '${name}': pinned ${pin.name}@${pin.resolved_version} (sha256 ${pin.sha256.wasm}), but the registry now resolves ${name}@${version} (sha256 ${staged.sha256}) — refusing to override a pinned artifact at runtime`,
    };
  }
  let tool: HostTool | undefined;
  try {
    tool = await installArtifact(session.paths.sessionDir, session.paths.accessible, staged, session.artifactFiles);
  } catch (error) {
    return { ok: false, error: `failed to install ${name}@${version}: ${error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error)}` };
  }
  if (!tool) return { ok: false, error: `${name}@${version} is a ${staged.role}, not a tool or skill a capsule can call` };
  // A pin this session already holds (the same pull again) is neither kept nor announced twice: a
  // host that pulled one tool in a loop grew the list, and had murmur.lock rewritten each time.
  if (staged.sha256 && !pin) {
    const artifact: LockedArtifact = { name, resolved_version: version, sha256: { wasm: staged.sha256 } };
    session.pulledPins.push(artifact);
    bus.publish(topics.sessionPinned.at(session.id), { session_id: session.id, artifact });
  }
  return { ok: true, value: { tool } };
}
