import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, type TraceEvent, isMurmurError } from '@murmur/shared';
import { readTraceFile } from '@murmur/shared/node';
import { type Output, UsageError, oneLine } from '../output.js';
import { renderDiff, renderReport, renderShow, renderSteps } from '../trace-render.js';
import {
  type SessionEntry,
  listSessions,
  noSessions,
  parseSince,
  passedOverSessions,
  resolveTrace,
  sessionMintedAtMs,
  sinceCovering,
  traceFileOf,
} from '../session-selector.js';
import { type TraceSummary, noSessionStart, noTraceEvents, summariseTrace } from '../trace-summary.js';

/**
 * `mur trace show|steps|diff|report`: upstream's readers of a session's `trace.jsonl`.
 *
 * A session is chosen by a selector (see `resolveTrace`) among those under `--workdir`, which
 * defaults to `./workdir`: where `mur run` leaves the sessions of the capsule in the current
 * directory. A line of a trace that cannot be read is skipped and counted on stderr, so one torn
 * line never hides the rest of a session.
 */

export interface TraceOptions {
  workdir?: string;
}

const workdirOf = (options: TraceOptions): string => path.resolve(options.workdir ?? 'workdir');

/** The trace's events; its unreadable lines, if any, are named on stderr. */
async function readEvents(file: string, output: Output): Promise<TraceEvent[]> {
  const { events, skipped } = await readTraceFile(file);
  if (skipped.length > 0) {
    const shown = skipped.slice(0, 5).map((line) => `line ${line.line}: ${line.reason}`);
    if (skipped.length > shown.length) shown.push(`… and ${skipped.length - shown.length} more`);
    output.err(`warning: ${file}: skipped ${skipped.length} unreadable line${skipped.length === 1 ? '' : 's'} (${shown.join('; ')})`);
  }
  return events;
}

async function summaryOf(file: string, output: Output): Promise<TraceSummary> {
  return summariseTrace(file, await readEvents(file, output));
}

export async function traceShowCommand(selector: string | undefined, options: TraceOptions, output: Output): Promise<void> {
  const summary = await summaryOf(await resolveTrace(selector, workdirOf(options)), output);
  for (const line of renderShow(summary)) output.out(oneLine(line));
}

export async function traceStepsCommand(selector: string | undefined, options: TraceOptions & { verbose?: boolean }, output: Output): Promise<void> {
  const file = await resolveTrace(selector, workdirOf(options));
  const events = await readEvents(file, output);
  if (events.length === 0) throw noTraceEvents(file);
  // A trace still being written (no session_end) is read as it is; one that never started is no run's.
  if (!events.some((event) => event.event_type === 'session_start')) throw noSessionStart(file);
  for (const line of renderSteps(events, options.verbose === true)) output.out(oneLine(line));
}

/** Runs A and B: `@2 @1` (the two newest) when none are given. */
export async function traceDiffCommand(before: string | undefined, after: string | undefined, options: TraceOptions, output: Output): Promise<void> {
  if ((before === undefined) !== (after === undefined))
    throw new UsageError('mur trace diff expects 0 or 2 arguments, got 1. Usage: mur trace diff [<before> <after>]', {
      code: 'E-TRC-002',
      hint: 'name both runs, or neither to compare the two newest (@2 @1)',
    });
  const workdir = workdirOf(options);
  const labelled = (label: string, selector: string): Promise<string> =>
    resolveTrace(selector, workdir).catch((error: unknown) => {
      throw isMurmurError(error)
        ? new MurmurError(error.code, `${label}: ${error.headline}`, { path: error.path, hint: error.hint, listing: error.listing })
        : error;
    });
  const [a, b] = await Promise.allSettled([labelled('before', before ?? '@2'), labelled('after', after ?? '@1')]);
  if (a.status === 'rejected' && b.status === 'rejected' && isMurmurError(a.reason) && isMurmurError(b.reason))
    throw new MurmurError('E-TRC-002', a.reason.headline, {
      // The second refusal beneath the first, its own listing indented under it.
      listing: [...a.reason.listing, b.reason.headline, ...b.reason.listing.map((line) => `  ${line}`)],
      hint: a.reason.hint,
    });
  if (a.status === 'rejected') throw a.reason;
  if (b.status === 'rejected') throw b.reason;
  const runA = await summaryOf(a.value, output);
  const runB = await summaryOf(b.value, output);
  for (const line of renderDiff(runA, runB)) output.out(oneLine(line));
}

export interface ReportOptions extends TraceOptions {
  last?: number;
  since?: string;
}

/** The traces a report covers: the sessions named, else the workdir's, narrowed by --since and --last. */
async function reportTraces(selectors: string[], options: ReportOptions, workdir: string): Promise<string[]> {
  if (selectors.length > 0) return Promise.all(selectors.map((selector) => resolveTrace(selector, workdir)));
  const sinceMs = options.since === undefined ? undefined : parseSince(options.since);
  let sessions = await listSessions(workdir);
  if (sessions.length === 0) {
    const isDirectory = await fs.stat(workdir).then(
      (stat) => stat.isDirectory(),
      () => false,
    );
    if (!isDirectory)
      throw new MurmurError('E-IO-001', `workdir not found: ${workdir}`, { path: workdir, hint: 'point --workdir at the directory that holds the sessions' });
    throw noSessions(workdir, undefined, await passedOverSessions(workdir));
  }
  if (sinceMs !== undefined) {
    const cutoff = Date.now() - sinceMs;
    const newest = sessionMintedAtMs((sessions.at(-1) as SessionEntry).id);
    sessions = sessions.filter((session) => (sessionMintedAtMs(session.id) ?? -1) >= cutoff);
    if (sessions.length === 0)
      throw new MurmurError('E-TRC-002', `no sessions matched --since ${options.since} in workdir at ${workdir}`, {
        path: workdir,
        hint:
          newest === undefined
            ? 'choose the sessions with --last N, or name them'
            : `its newest session started before that: --since ${sinceCovering(Date.now() - newest)} takes it in, or choose with --last N`,
      });
  }
  if (options.last !== undefined) sessions = sessions.slice(-options.last);
  return sessions.map(traceFileOf);
}

export async function traceReportCommand(selectors: string[], options: ReportOptions, output: Output): Promise<void> {
  if (selectors.length > 0 && (options.last !== undefined || options.since !== undefined))
    throw new UsageError(`${options.since !== undefined ? '--since' : '--last'} cannot be combined with explicit session arguments`, {
      code: 'E-TRC-002',
      path: options.since !== undefined ? '--since' : '--last',
      hint: 'name the sessions to report (@1 @2, ids or trace files), or choose them with --last or --since, not both',
    });
  if (options.last === 0)
    throw new UsageError('--last must be at least 1', { code: 'E-TRC-002', path: '--last', hint: 'e.g. mur trace report --last 5: the five newest sessions' });
  const workdir = workdirOf(options);
  const summaries: TraceSummary[] = [];
  let incomplete = 0;
  for (const file of await reportTraces(selectors, options, workdir)) {
    try {
      summaries.push(await summaryOf(file, output));
    } catch (error) {
      // A live workdir holds sessions still running and sessions that never started: not this report's.
      if (isMurmurError(error, 'E-TRC-001') || (selectors.length === 0 && isMurmurError(error, 'E-IO-001'))) incomplete += 1;
      // One trace it cannot read (a directory, a link its guest planted) costs the report that session, not the rest.
      else if (selectors.length === 0 && isMurmurError(error, 'E-IO-003')) output.err(`warning: skipped ${file}: ${(error as MurmurError).message}`);
      else throw error;
    }
  }
  if (summaries.length === 0)
    throw new MurmurError('E-TRC-001', 'no complete sessions to report — all traces are empty or incomplete', {
      path: workdir,
      hint: "a session's trace is complete once it has ended: report again when a running one ends, or 'mur trace show <session>' says what one trace lacks",
    });
  if (incomplete > 0) output.err(`note: skipped ${incomplete} incomplete session(s)`);
  for (const line of renderReport(workdir, summaries)) output.out(oneLine(line));
}
