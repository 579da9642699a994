/**
 * One catalogue of every refusal the runtime can make.
 *
 * Codes are upstream Murmur's where upstream has one (so scripts written against `mur` keep
 * matching) and ours where the TypeScript design has a part upstream lacks (the bus, roost's HTTP
 * registry). Every refusal carries a code, a sentence that names what was refused, and where it
 * helps a hint that says what to do next. `path` is the YAML path or file the refusal is about,
 * so tools can point at it without parsing the sentence.
 */

import { oneLine } from './one-line.js';

export interface CatalogueEntry {
  /** What the code means, in a phrase. Shown by `mur explain`-style tooling and docs. */
  readonly title: string;
  /** What to do next, when the fix does not depend on the particular case. */
  readonly hint?: string;
}

export const ERROR_CATALOGUE = {
  'E-ART-001': { title: 'unsafe artifact archive entry', hint: 'the archive is refused whole; rebuild it with `mur build`, which never packs such entries' },
  'E-ART-002': {
    title: 'artifact archive entry too large',
    hint: 'raise MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES if the artifact is trusted and genuinely this large',
  },
  'E-ART-003': {
    title: 'malformed artifact archive',
    hint: 'the archive is refused whole; a .mur.zip that mur build made reads (rebuild or republish it with mur build)',
  },
  'E-BLD-001': { title: 'invalid artifact name', hint: 'use lowercase letters, digits and single hyphens (1-100 characters)' },
  'E-BLD-002': { title: 'unsafe or colliding requires_files entry' },
  'E-BLD-003': { title: 'payload is not a launchable wasm component' },
  'E-CAP-001': {
    title: 'invalid network allow entry',
    hint: "write a host ('api.example.com', 'api.example.com:8443') or an origin URL ('https://api.example.com')",
  },
  'E-CAP-002': { title: 'invalid filesystem scope', hint: "use a path relative to the workdir, such as 'data' or '.'" },
  'E-CAP-003': { title: 'containment floor unachievable on this host' },
  'E-CAP-004': { title: 'staged runtime below the sealed floor' },
  'E-CAP-005': { title: 'this host cannot isolate the capsule' },
  'E-CAP-006': { title: 'sealed: interpreter package tree not granted' },
  'E-CFG-001': { title: 'no inference provider configured' },
  'E-CFG-002': { title: 'unknown configuration key' },
  'E-CFG-003': { title: 'invalid configuration value' },
  'E-EVAL-001': { title: 'an eval file or dataset line cannot be read' },
  'E-EVAL-002': {
    title: 'no eval record for the session',
    hint: "run the capsule with murmur-hook-eval declared and observability.eval.scorers set, or 'mur eval run'",
  },
  'E-IO-001': { title: 'not found' },
  'E-IO-002': { title: 'permission denied' },
  'E-IO-003': { title: 'input/output failure' },
  'E-MAN-001': { title: 'a required manifest field is missing', hint: 'add the field the message names to the manifest' },
  'E-MAN-002': { title: 'the manifest is not valid YAML', hint: 'fix the YAML at the line the message names' },
  'E-MAN-003': { title: 'a manifest value has the wrong type or is not allowed', hint: 'correct the field the message names in the manifest' },
  'E-REG-001': { title: 'artifact not found in the registry', hint: "publish it first ('mur publish <zip>'), or check the name and version" },
  'E-REG-002': { title: 'artifact sha256 mismatch', hint: 'the stored bytes do not match their recorded digest; republish or reinstall the artifact' },
  'E-REG-003': { title: 'artifact version already published', hint: 'published versions are immutable: bump the version and publish again' },
  'E-REG-004': { title: 'reserved version', hint: "'latest', 'stable' and 'edge' cannot be published; use a concrete version" },
  'E-REG-005': { title: 'install disagrees with murmur.lock' },
  'E-REG-006': { title: 'artifact name, version or platform cannot name a store path' },
  'E-RUN-001': { title: 'the capsule trapped or exceeded a limit' },
  'E-RUN-002': { title: 'missing WASI import' },
  'E-RUN-003': { title: 'murmur.lock does not match the manifest or the installed artifacts' },
  'E-RUN-004': { title: 'capsule component not found' },
  'E-RUN-005': {
    title: 'inference driver not configured',
    hint: 'name the driver artifact in inference.driver.artifact (e.g. murmur-driver-anthropic, which this runtime ships) and declare it under artifacts:',
  },
  'E-RUN-006': { title: 'inference driver or harness not installed' },
  'E-RUN-007': { title: 'the agent loop failed' },
  'E-RUN-008': { title: 'artifact not installed', hint: "install it with 'mur install <name>@<version>' or publish it to the global store" },
  'E-RUN-009': { title: 'system prompt file unreadable' },
  'E-RUN-010': { title: 'internal port busy' },
  'E-RUN-011': { title: 'subprocess killed by a resource limit' },
  'E-RUN-012': { title: 'no cgroup scope for a capsule that can spawn' },
  'E-RUN-013': { title: 'workdir over its size limit' },
  'E-RUN-014': { title: 'sealed root build failed' },
  'E-RUN-015': {
    title: "a command's arguments cannot be passed to a program",
    hint: 'an argument holds a NUL byte, or the arguments are larger than Linux passes: write the long part to a file in the workdir and pass its name',
  },
  'E-TRC-001': { title: 'a trace cannot be summarised: empty, or without its session_start or session_end' },
  'E-TRC-002': { title: 'no session, or more than one, matches the selector; or a bad trace command argument' },
  'E-CTX-001': { title: 'no conversation is recorded for the context to resume' },
  'E-HOOK-001': { title: 'a hook could not be instantiated or lacks a required export of murmur:hook/lifecycle@0.5.0' },
  'E-HOOK-002': { title: 'an on-stage hook failed, so the session was not staged' },
  'E-BUS-001': { title: 'bus payload refused on send' },
  'E-BUS-002': { title: 'bus payload refused on receipt' },
  'E-BUS-003': { title: 'bus request timed out', hint: 'is the service that answers this subject running and connected to the same bus?' },
  'E-BUS-004': { title: 'no service answers this bus subject', hint: 'start the service, or unset MURMUR_NATS_URL to run everything in-process' },
  'E-BUS-005': { title: 'cannot connect to the bus', hint: 'check MURMUR_NATS_URL and that nats-server is running' },
  'E-BUS-006': { title: 'a service failed while handling a request' },
  'E-BUS-007': { title: 'a service had no room for the request', hint: 'try again in a moment, or run more of that service' },
  'E-DLG-001': { title: 'the spawner handle is unreadable' },
  'E-DLG-002': {
    title: 'roost refused the delegation',
    hint: "check the parent's capabilities.spawn.allow and that the child fits inside the parent's capabilities",
  },
  'E-DLG-003': { title: 'a delegation could not be launched' },
  'E-DOOR-001': {
    title: 'no running session answers at this door',
    hint: "check the session id in the URL; 'mur run --json' prints the URL of a session it starts",
  },
  'E-DOOR-002': { title: 'request refused at the door' },
  'E-DOOR-003': {
    title: 'the door requires a bearer token',
    hint: "send 'Authorization: Bearer <token>' with one of the tokens the door was given (MURMUR_DOOR_AUTH); the agent card says so",
  },
  'E-DOOR-004': {
    title: 'the door holds as many open streams as it takes',
    hint: 'close a stream this door serves, or reach the session through another door; MURMUR_DOOR_MAX_STREAMS sets the bound',
  },
  'E-DOOR-005': {
    title: 'a stream was cut while its task goes on',
    hint: 'resubscribe (tasks/resubscribe or SubscribeToTask), at this door or another, with Last-Event-ID to continue where the stream stopped',
  },
  'E-DASH-001': {
    title: 'the dashboard needs a token where its bind is configured',
    hint: 'set MURMUR_DASHBOARD_TOKEN to a long random value (e.g. `openssl rand -hex 32`), or leave MURMUR_WATCHER_HOST unset to serve on loopback only',
  },
  'E-DASH-002': {
    title: 'dashboard request refused: missing or wrong token',
    hint: 'open the dashboard as /dashboard?token=<MURMUR_DASHBOARD_TOKEN>, or send `authorization: Bearer <token>`',
  },
  'E-DASH-003': {
    title: 'dashboard request for another host refused',
    hint: 'open the dashboard as http://localhost:<port>/dashboard or http://127.0.0.1:<port>/dashboard; to serve it under another name, set MURMUR_DASHBOARD_TOKEN',
  },
  'E-DASH-004': {
    title: 'too many dashboard streams open',
    hint: 'close dashboard tabs that are not in use, then reload',
  },
  'E-PRJ-001': {
    title: 'capsule project over the staging limit',
    hint: 'raise MURMUR_MAX_PROJECT_BYTES for the client and the stager, or keep large files out of what the manifest names',
  },
  'E-PRJ-002': {
    title: 'a file the manifest names lies outside the capsule directory',
    hint: 'a capsule is staged from its own directory: move the file into it',
  },
  'E-PRJ-003': { title: 'an uploaded capsule project is malformed' },
  'E-SES-001': { title: 'no such session', hint: "list the stack's sessions with 'mur ps'" },
  'E-SES-002': { title: 'path outside the session workdir', hint: "give a path relative to the session's workdir, such as 'out/result.txt'" },
  'E-SES-003': { title: 'the executor holding the session does not answer', hint: "the executor may have been lost: 'mur ps' shows what the stack knows" },
  'E-SES-004': {
    title: 'a link or special file in a session workdir was refused',
    hint: 'something in the sandbox replaced a file or directory the runtime writes with a link, a FIFO or a hard link; the write was refused and nothing outside the workdir was touched. A --workdir used again keeps what an earlier session left there: remove what the path names before running in it again',
  },
  'E-SES-005': {
    title: 'the session was stopped before it finished',
    hint: 'nothing in the capsule failed: whoever ran or operated it stopped it (an interrupt, mur stop, its launcher giving up, the executor shutting down)',
  },
  'E-EXE-001': {
    title: 'the executor running the session was lost',
    hint: 'the session ended with its executor; launch it again (the stack sends new launches to the executors still alive)',
  },
  'E-EXE-002': {
    title: 'a launch reached its executor after its launcher stopped waiting',
    hint: 'nothing was started: launch it again; an executor this late is overloaded or was stopped (or its clock is ahead of the launcher’s)',
  },
  'E-EXE-003': {
    title: 'a launch named a session its executor already runs or ran',
    hint: 'nothing was started: a session id names one session; launch again (mur run mints a fresh id each time)',
  },
  'E-SVC-001': {
    title: 'a service on loopback refused a request for another host name',
    hint: 'reach it as localhost or 127.0.0.1; a name of its own goes in MURMUR_<SERVICE>_HOSTS (a web page reaching it through a name it owns is what this refuses: DNS rebinding)',
  },
  'E-STG-001': {
    title: 'a component took too long to transpile',
    hint: 'an honest component of 12 MB transpiles in about a second, so one that takes minutes is most likely built to stall jco: raise MURMUR_TRANSPILE_TIMEOUT_MS on the stager (default 120000) only for a component whose source you trust',
  },
  'E-STG-002': {
    title: 'the stager’s transpiler failed',
    hint: 'stage again: a fresh transpiler is started; if the same component fails it again, it is too large or malformed for jco (the stager’s log says more)',
  },
  'E-ROOST-001': {
    title: 'roost is unreachable or answered with an error',
    hint: 'check the registry named (--registry, else MURMUR_ROOST_URL) and that roost is running there',
  },
  'E-ROOST-002': {
    title: 'roost refused a request it could not take',
    hint: 'the message names what was wrong (a body that is not JSON or too large, a missing or wrong credential, an unknown session or route)',
  },
  'W-SEC-004': { title: 'literal secret in a manifest' },
  'W-SEC-006': { title: "a hook entry's capabilities sub-block is not read" },
  'W-SEC-007': { title: "a tool's or driver's network rule outside the capsule's was dropped" },
  'W-SEC-008': { title: "a tool's or driver's capabilities sub-block (or a native tool's block) is not read" },
  'W-SEC-009': { title: 'interpreter_runtime grant couples the capsule to a host layout' },
  'W-SEC-011': { title: 'workdir_exec: the shell allowlist is not enforceable inside the workdir' },
  'W-SEC-012': { title: "sealed: a compiler driver's helper has no execute grant" },
  'W-SEC-019': { title: 'unrecognized manifest key' },
  'W-REG-001': { title: 'an install replaced other bytes under the same name and version' },
  'W-LCK-001': { title: 'murmur.lock pins another version than the manifest asks for' },
  'W-BLD-001': { title: 'reserved entry redeclared in requires_files' },
  'W-BLD-002': { title: 'capsule.wasm shadows another root wasm' },
  'W-BLD-003': { title: 'build sources packed into a wasm/native artifact' },
} as const satisfies Record<string, CatalogueEntry>;

export type ErrorCode = keyof typeof ERROR_CATALOGUE;

export interface MurmurErrorOptions {
  hint?: string;
  /** YAML path (`capabilities.limits.memory_bytes`) or file path the error is about. */
  path?: string;
  cause?: unknown;
  /**
   * Lines the message introduces (the sessions an ambiguous selector matched): printed beneath it,
   * indented, each on a line of its own. The message and the hint never break a line themselves.
   */
  listing?: readonly string[];
}

/** The wire shape of an error: what a bus reply or an HTTP error body carries. */
export interface MurmurErrorJson {
  code: ErrorCode;
  message: string;
  hint?: string;
  path?: string;
}

export class MurmurError extends Error {
  override readonly name = 'MurmurError';
  readonly code: ErrorCode;
  readonly hint: string | undefined;
  readonly path: string | undefined;
  readonly listing: readonly string[];
  /** The message without its listing: what `format` puts on the error's first line. */
  readonly headline: string;

  constructor(code: ErrorCode, message: string, options: MurmurErrorOptions = {}) {
    const listing = options.listing ?? [];
    super([message, ...listing.map((line) => `  ${line}`)].join('\n'), options.cause === undefined ? undefined : { cause: options.cause });
    this.headline = message;
    this.listing = listing;
    this.code = code;
    const catalogueHint: string | undefined = (ERROR_CATALOGUE[code] as CatalogueEntry | undefined)?.hint;
    this.hint = options.hint ?? catalogueHint;
    this.path = options.path;
  }

  /**
   * `error[CODE]: message` and, when there is one, `  hint: …` on the next line: upstream's form.
   * A message quotes what was refused — a manifest's value, a provider's answer, a door's reason —
   * so it is shown on its one line (`oneLine`), and so is the hint: a line break of theirs would
   * print a `status:` or `hint:` line nothing tells from the runtime's own.
   */
  format(): string {
    const lines = [`error[${this.code}]: ${oneLine(this.headline)}`, ...this.listing.map((line) => `  ${oneLine(line)}`)];
    if (this.hint) lines.push(`  hint: ${oneLine(this.hint)}`);
    return lines.join('\n');
  }

  toJSON(): MurmurErrorJson {
    const json: MurmurErrorJson = { code: this.code, message: this.message };
    if (this.hint !== undefined) json.hint = this.hint;
    if (this.path !== undefined) json.path = this.path;
    return json;
  }

  static fromJSON(json: MurmurErrorJson): MurmurError {
    const code = isErrorCode(json.code) ? json.code : 'E-BUS-006';
    return new MurmurError(code, json.message, { hint: json.hint, path: json.path });
  }
}

export function isErrorCode(value: string): value is ErrorCode {
  return Object.hasOwn(ERROR_CATALOGUE, value);
}

export function isMurmurError(value: unknown, code?: ErrorCode): value is MurmurError {
  return value instanceof MurmurError && (code === undefined || value.code === code);
}

/** A warning: printed, never fatal. Same anatomy as an error so both format alike. */
export interface MurmurWarning {
  code: string;
  message: string;
  path?: string;
}

const DIAGNOSTICS_URL = 'https://docs.murmur.nexus/murmur-nexus/murmur/reference/diagnostics/';

/** Upstream's warning line: `[capsule-runtime] warning[W-SEC-019]: … (<docs link>)`. */
export function formatWarning(warning: MurmurWarning): string {
  return `[capsule-runtime] warning[${warning.code}]: ${oneLine(warning.message)} (${DIAGNOSTICS_URL}#${warning.code.toLowerCase()})`;
}
