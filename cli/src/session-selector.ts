import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError } from '@murmur/shared';
import { systemFailureCode, systemFailureHint } from '@murmur/shared/node';
import { UsageError } from './output.js';

/**
 * Which session a `mur trace` or `mur eval` selector names, among the sessions under a workdir,
 * and which of its records (`trace.jsonl`, `eval.jsonl`) that is.
 *
 * Sessions are the `ses_*` directories directly in the workdir (where `mur run` puts a session
 * beside its capsule: `<capsule dir>/workdir/<session>/`) and in its `.murmur/` (where a session
 * run with `mur run --workdir <dir>` keeps its records), so `--workdir` names either kind of
 * directory. Session ids are UUIDv7, so the lexically greatest is the newest: `@1` is the last
 * in sorted order, and the id's first 12 hex digits are the millisecond it was minted (`--since`).
 *
 * Every refusal carries the reading command's code (`E-TRC-002`, `E-EVAL-002`) and lists the
 * sessions it could have meant, newest first.
 */

/** What a command reads from a session: its record file, and the code it refuses a selector with. */
export interface SessionRecordKind {
  file: 'trace.jsonl' | 'eval.jsonl';
  code: 'E-TRC-002' | 'E-EVAL-002';
  /** The file's name in a refusal of a path to one that is not there (upstream's words). */
  noun: 'trace file' | 'eval file';
}

export const TRACE_RECORDS: SessionRecordKind = { file: 'trace.jsonl', code: 'E-TRC-002', noun: 'trace file' };

export interface SessionEntry {
  id: string;
  /** The session's directory: the one holding its `trace.jsonl`. */
  dir: string;
}

const SESSION_PREFIX = 'ses_';
const FULL_ID = /^ses_[0-9a-f]{32}$/i;
/** How many candidates a refusal lists before it says how many more there are. */
const LISTED_CANDIDATES = 10;
const selectorHint = (kind: SessionRecordKind): string =>
  `give the last characters of a session id (4 or more rarely match two), a full id, @N (@1 = the newest), or the path of a session's ${kind.file}`;

export const traceFileOf = (entry: SessionEntry): string => path.join(entry.dir, TRACE_RECORDS.file);

async function sessionDirsIn(dir: string): Promise<SessionEntry[]> {
  const entries = await fs.readdir(dir, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT' || error.code === 'ENOTDIR') return [];
    throw new MurmurError(systemFailureCode(error), `failed to read ${dir}: ${error.message}`, { path: dir, cause: error, hint: systemFailureHint(error) });
  });
  return entries
    .filter((entry) => entry.isDirectory() && entry.name.startsWith(SESSION_PREFIX))
    .map((entry) => ({ id: entry.name, dir: path.join(dir, entry.name) }));
}

/**
 * The workdir's sessions, oldest first. A directory that holds a `.murmur` is a `--workdir`, whose
 * top is its sessions' guests' to write: a `ses_*` directory there is one a guest made, with a
 * trace of its own making, so only `.murmur`'s sessions are read (and none when `.murmur` is a
 * link, which leads elsewhere — the runtime makes it a directory). Without one, the directory is
 * where `mur run` puts each session beside the others, out of every guest's reach.
 */
export async function listSessions(workdir: string): Promise<SessionEntry[]> {
  const records = path.join(workdir, '.murmur');
  const there = await fs.lstat(records).catch(() => undefined);
  const entries = there ? (there.isDirectory() ? await sessionDirsIn(records) : []) : await sessionDirsIn(workdir);
  return entries.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * How many `ses_*` directories at the top of a workdir `listSessions` passed over because the
 * workdir holds a `.murmur` (it was given to `mur run --workdir`, whose capsule could write them,
 * and rewrite what earlier sessions left there): said in a refusal, so that a user who ran
 * `--workdir` on a directory of sessions is told why they are not found, and how to read one.
 */
export async function passedOverSessions(workdir: string): Promise<number> {
  if (!(await fs.lstat(path.join(workdir, '.murmur')).catch(() => undefined))) return 0;
  return (await sessionDirsIn(workdir)).length;
}

function passedOverNote(workdir: string, passedOver: number): string {
  if (passedOver === 0) return '';
  return `; ${passedOver} session director${passedOver === 1 ? 'y' : 'ies'} at its top ${passedOver === 1 ? 'is' : 'are'} not read: ${workdir} holds a .murmur, so it was given to 'mur run --workdir', whose capsule could have written or rewritten ${passedOver === 1 ? 'it' : 'them'} (read one by its path if you trust it: <workdir>/<session>/trace.jsonl)`;
}

/** The millisecond a session id was minted: its UUIDv7's leading 48 bits. */
export function sessionMintedAtMs(id: string): number | undefined {
  const hex = id.slice(SESSION_PREFIX.length, SESSION_PREFIX.length + 12);
  return /^[0-9a-f]{12}$/i.test(hex) ? Number.parseInt(hex, 16) : undefined;
}

/** `  <id>` lines, newest first, at most LISTED_CANDIDATES of them. */
function candidateLines(entries: SessionEntry[]): string[] {
  const newestFirst = [...entries].reverse();
  const lines = newestFirst.slice(0, LISTED_CANDIDATES).map((entry) => entry.id);
  if (newestFirst.length > LISTED_CANDIDATES) lines.push(`… and ${newestFirst.length - LISTED_CANDIDATES} more`);
  return lines;
}

function refusal(kind: SessionRecordKind, message: string, entries: SessionEntry[], workdir: string): MurmurError {
  return new MurmurError(kind.code, message, { listing: candidateLines(entries), path: workdir, hint: selectorHint(kind) });
}

export function noSessions(workdir: string, kind: SessionRecordKind = TRACE_RECORDS, passedOver = 0): MurmurError {
  return new MurmurError(kind.code, `no sessions found in workdir at ${workdir}${passedOverNote(workdir, passedOver)}`, {
    path: workdir,
    hint: "run a capsule with 'mur run' first, or point --workdir at the directory that holds its sessions (mur run puts them in <capsule dir>/workdir)",
  });
}

/** A selector that names a file rather than a session: it has a `/` or ends `.jsonl`. */
export const isPathSelector = (selector: string): boolean => selector.includes('/') || selector.endsWith('.jsonl');

/**
 * The path's record: the file itself, or the record file in it when it is a session directory. A
 * path to nothing is refused here, where the selector is known to have been a path: a mistyped
 * one is more likely meant as a session.
 */
async function recordAtPath(given: string, kind: SessionRecordKind): Promise<string> {
  const resolved = path.resolve(given);
  const stat = await fs.stat(resolved).catch((error: NodeJS.ErrnoException) => error);
  if (stat instanceof Error) {
    if (stat.code === 'ENOENT' || stat.code === 'ENOTDIR')
      throw new MurmurError('E-IO-001', `${kind.noun} not found: ${resolved}`, { path: resolved, hint: selectorHint(kind) });
    // Any other refusal is the reader's to report, with what to do about it.
    return resolved;
  }
  if (!stat.isDirectory()) return resolved;
  // A directory that is no session's (`..`, a workdir itself: every session's holds its trace) is
  // said to be none, rather than read as a session whose record is missing.
  if (!(await fs.lstat(path.join(resolved, TRACE_RECORDS.file)).catch(() => undefined)))
    throw new MurmurError('E-IO-001', `${resolved} is not a session's directory: it holds no ${TRACE_RECORDS.file}`, {
      path: resolved,
      hint: selectorHint(kind),
    });
  return path.join(resolved, kind.file);
}

/** `@N`: the N-th newest session, `@1` the newest. */
function byOrdinal(kind: SessionRecordKind, selector: string, entries: SessionEntry[], workdir: string): SessionEntry {
  const digits = selector.slice(1);
  if (!/^\d+$/.test(digits)) throw refusal(kind, `invalid ordinal '${selector}' — expected @1, @2, ...`, entries, workdir);
  const n = Number(digits);
  if (n === 0) throw refusal(kind, 'ordinal must be @1 or higher', entries, workdir);
  if (n > entries.length)
    throw refusal(kind, `@${n} is out of range — workdir has ${entries.length} session${entries.length === 1 ? '' : 's'}`, entries, workdir);
  return entries[entries.length - n] as SessionEntry;
}

/**
 * A suffix of any length, as upstream: a short one is not refused for being short, only when it
 * names no session or more than one (upstream's documentation advises 4 characters or more).
 */
function bySuffix(kind: SessionRecordKind, selector: string, entries: SessionEntry[], workdir: string): SessionEntry {
  const wanted = selector.toLowerCase();
  const matches = entries.filter((entry) => entry.id.toLowerCase().endsWith(wanted));
  if (matches.length === 1) return matches[0] as SessionEntry;
  if (matches.length === 0) throw refusal(kind, `no session found matching suffix '${selector}' in ${workdir}`, entries, workdir);
  // Upstream's wording, and its list: the matches in ascending order.
  throw new MurmurError(kind.code, `ambiguous: '${selector}' matches ${matches.length} sessions — provide more characters`, {
    listing: matches.map((entry) => entry.id),
    path: workdir,
    hint: selectorHint(kind),
  });
}

/**
 * The record file a selector names: none (the newest session), a path, `@N`, a full session id,
 * or a case-insensitive suffix of one (matching exactly one session); with the session's id
 * unless a path was given. An empty workdir is "no sessions found" only where no session was
 * named: a named one is "not found" there, as anywhere else.
 */
export async function resolveSessionRecord(
  selector: string | undefined,
  workdir: string,
  kind: SessionRecordKind,
): Promise<{ file: string; sessionId?: string }> {
  if (selector !== undefined && isPathSelector(selector)) return { file: await recordAtPath(selector, kind) };
  const entries = await listSessions(workdir);
  if (entries.length === 0 && (selector === undefined || selector.startsWith('@'))) throw noSessions(workdir, kind, await passedOverSessions(workdir));
  const chosen = await (async (): Promise<SessionEntry> => {
    if (selector === undefined) return entries.at(-1) as SessionEntry;
    if (selector.startsWith('@')) return byOrdinal(kind, selector, entries, workdir);
    if (FULL_ID.test(selector)) {
      const found = entries.find((entry) => entry.id.toLowerCase() === selector.toLowerCase());
      if (!found) {
        // A session run by a stack keeps its records on its executor, not in any local workdir.
        const onStack = `a session a stack ran keeps its records on its executor: 'mur files ${selector} ${kind.file} --out <dir>' fetches them (under a --workdir, '.murmur/${selector}/${kind.file}'), then give <dir>/${kind.file}`;
        // Counted only for this refusal: a selector that names a session never reads the top.
        const passedOver = await passedOverSessions(workdir);
        throw new MurmurError(kind.code, `session ${selector} not found in ${workdir}${passedOverNote(workdir, passedOver)}`, {
          listing: candidateLines(entries),
          path: workdir,
          hint: `${onStack}; else ${selectorHint(kind)}`,
        });
      }
      return found;
    }
    return bySuffix(kind, selector, entries, workdir);
  })();
  return { file: path.join(chosen.dir, kind.file), sessionId: chosen.id };
}

/** The trace file a selector names (`resolveSessionRecord` for `trace.jsonl`). */
export async function resolveTrace(selector: string | undefined, workdir: string): Promise<string> {
  return (await resolveSessionRecord(selector, workdir, TRACE_RECORDS)).file;
}

/** `30m`, `2h`, `1d` as milliseconds. */
export function parseSince(given: string): number {
  const match = /^(\d+)([mhd])$/.exec(given);
  if (!match)
    throw new UsageError(`unrecognised --since format '${given}' — expected <N>m, <N>h, or <N>d`, {
      code: 'E-TRC-002',
      path: '--since',
      hint: 'for example --since 30m, --since 2h or --since 1d',
    });
  const unitMs = { m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] as 'm' | 'h' | 'd'];
  return Number(match[1]) * unitMs;
}

/**
 * The shortest `--since` that reaches back `ms` and a minute more (it is read when the command is
 * run again), in the largest of its units that is still exact enough: minutes up to two hours,
 * hours up to two days, then days.
 */
export function sinceCovering(ms: number): string {
  const minutes = Math.ceil(ms / 60_000) + 1;
  if (minutes <= 120) return `${minutes}m`;
  const hours = Math.ceil(minutes / 60);
  return hours <= 48 ? `${hours}h` : `${Math.ceil(hours / 24)}d`;
}
