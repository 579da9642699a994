import { type Dirent, lstatSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { type CapabilityPolicy, MurmurError } from '@murmur/shared';
import { isSystemPath } from './sandbox.js';
import { liesWithin, resolvedThroughLinks } from './workdir.js';

/**
 * Where the host keeps its services' sockets, pid files and, in a container, its secrets
 * (`/run/secrets`): no runtime's tree lies there, and a granted socket there (`/run/docker.sock`)
 * is the host's root to a capsule that may make unix sockets.
 */
const HOST_RUNTIME_STATE = '/run';

/**
 * How many entries of the granted trees are looked through for a socket when the capsule may make
 * unix sockets: an interpreter's library tree has a few thousand (`/usr/lib/python3`, ~4 500); a
 * tree too large to look through at a launch is refused rather than granted unseen.
 */
export const SOCKET_SCAN_ENTRIES = 20_000;

type RuntimeGrant = { field: 'interpreter_runtime' | 'staged_runtime'; binary: string; dir: string };

/**
 * Refuses, before anything of the session is made, a runtime grant (`interpreter_runtime` dir,
 * `staged_runtime` source) that would give the capsule more than a runtime's files. A grant's tree
 * is bound into the sandbox readable and executable, so it may not:
 *
 * - lie in or hold the executor's own state or a place sessions' workdirs are made (`places`): one
 *   naming the workdir base read every other session's files, live, and ran what an earlier session
 *   had written there (no workdir is executable); one holding `$MURMUR_HOME` read its config's keys;
 * - lie in `/run` (`HOST_RUNTIME_STATE`);
 * - lie outside `roots`, where the executor takes runtimes from (`MURMUR_RUNTIME_GRANT_ROOTS`): a
 *   user's home, another launcher's `--workdir`, a directory a local user could swap for a link
 *   between this check and the bind are no capsule's to name;
 * - lead through a link, outside the system's directories (it is bound by the path it names, and the
 *   link would be followed again then);
 * - be or hold a socket, when the capsule can make unix sockets (`socketsMade`: `network.unix_sockets`,
 *   or a sandbox with no seccomp filter to refuse one): a read-only bind does not
 *   stop a connect, and the sandbox's user is the executor's outside it, so a granted `docker.sock`
 *   was a way out.
 *
 * A manifest has no business with the executor's paths, so such a grant is refused whatever the
 * containment.
 */
export function assertRuntimeGrantsContained(
  policy: Pick<CapabilityPolicy, 'interpreter_runtime' | 'staged_runtime'>,
  places: readonly string[],
  { socketsMade, roots }: { socketsMade: boolean; roots: readonly string[] },
): void {
  const granted: RuntimeGrant[] = [
    ...policy.interpreter_runtime.flatMap((grant) => grant.dirs.map((dir) => ({ field: 'interpreter_runtime' as const, binary: grant.binary, dir: dir.path }))),
    ...policy.staged_runtime.map((grant) => ({ field: 'staged_runtime' as const, binary: grant.binary, dir: grant.source_path })),
  ];
  if (granted.length === 0) return;
  const resolvedPlaces = [...new Set(places.map(resolvedThroughLinks))];
  const resolvedRoots = roots.map(resolvedThroughLinks);
  const trees = granted.map((grant) => ({ grant, tree: resolvedThroughLinks(grant.dir) }));
  for (const { grant, tree } of trees) {
    const place = resolvedPlaces.find((candidate) => liesWithin(tree, candidate) || liesWithin(candidate, tree));
    if (place !== undefined)
      throw refusal(
        grant,
        `${liesWithin(tree, place) ? 'lies in' : 'holds'} ${place}, the executor's own state or where sessions' workdirs are made: a runtime grant is bound into the sandbox readable and executable, and would give the capsule other sessions' files`,
      );
    if (liesWithin(tree, HOST_RUNTIME_STATE))
      throw refusal(grant, `lies in ${HOST_RUNTIME_STATE}, where the host keeps its services' sockets and secrets; no runtime's tree is there`);
    if (!resolvedRoots.some((root) => liesWithin(tree, root)))
      throw refusal(
        grant,
        `${tree === grant.dir ? '' : `(${tree}) `}lies outside where this executor takes runtimes from (${roots.join(', ')})`,
        `install the runtime under one of those, or have the executor's operator add its place to MURMUR_RUNTIME_GRANT_ROOTS (':'-separated; it replaces ${roots.join(':')})`,
      );
    // Outside the system's directories a grant is bound by the path it names, later: a link on it
    // is followed again then, to wherever whoever owns the link has pointed it since.
    if (tree !== grant.dir.replace(/\/+/g, '/').replace(/(.)\/$/, '$1') && !isSystemPath(grant.dir))
      throw refusal(
        grant,
        `leads through a link to ${tree}: it is bound by the path it names, and the link would be followed again then`,
        `name the directory itself (${tree}) in the manifest`,
      );
  }
  if (!socketsMade) return;
  const budget = { left: SOCKET_SCAN_ENTRIES };
  // The system's directories are bound whole whatever is granted (`isSystemPath`): looking through
  // a grant of one would find nothing the sandbox does not hold anyway.
  for (const { grant, tree } of trees.filter(({ grant }) => !isSystemPath(grant.dir))) {
    const found = socketBeneath(tree, budget);
    if (found === 'too-large')
      throw refusal(
        grant,
        `is too large to be looked through for sockets (past ${SOCKET_SCAN_ENTRIES} entries in all), and the capsule can connect to one (capabilities.network.unix_sockets, or a sandbox with no seccomp filter)`,
      );
    if (found !== undefined)
      throw refusal(
        grant,
        `${found === tree ? 'is' : 'holds'} the socket ${found}, which the capsule could connect to as the executor's user (capabilities.network.unix_sockets, or a sandbox with no seccomp filter)`,
      );
  }
}

function refusal(
  grant: RuntimeGrant,
  what: string,
  hint = "grant only the directories the runtime itself needs (its interpreter's library tree), apart from the executor's MURMUR_HOME, its cache, the sessions' workdirs and the host's services",
): MurmurError {
  return new MurmurError('E-IO-002', `capabilities.shell.${grant.field} names '${grant.dir}' for '${grant.binary}', which ${what}`, {
    path: `capabilities.shell.${grant.field}`,
    hint,
  });
}

/**
 * The first socket in `tree`, walked without following links (a link is bound as a link, and
 * resolves inside the sandbox, where only what is bound exists), within what is left of `budget`.
 */
function socketBeneath(tree: string, budget: { left: number }): string | 'too-large' | undefined {
  try {
    if (lstatSync(tree).isSocket()) return tree;
  } catch {
    return undefined;
  }
  const pending = [tree];
  for (let dir = pending.pop(); dir !== undefined; dir = pending.pop()) {
    let entries: Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      // What the executor cannot list, the sandbox's user (the executor's, outside) cannot either.
      continue;
    }
    budget.left -= entries.length;
    if (budget.left < 0) return 'too-large';
    for (const entry of entries) {
      const at = path.join(dir, entry.name);
      if (entry.isSocket()) return at;
      if (entry.isDirectory()) pending.push(at);
    }
  }
  return undefined;
}
