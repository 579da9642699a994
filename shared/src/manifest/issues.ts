import type { z } from 'zod';
import { type ErrorCode, MurmurError } from '../errors.js';
import type { YamlSource } from './yaml-source.js';

/**
 * Turning schema issues into refusals a person can act on: the upstream code, the YAML path of the
 * offending key (`capabilities.limits.memory_bytes`), and the line it sits on.
 *
 * Refinements that need a code other than E-MAN-003 (a bad network rule is E-CAP-001) say so in
 * the issue's params; everything else is classified here by shape.
 */
export interface IssueParams {
  murmurCode?: ErrorCode;
  /** The issue's message is already a whole sentence, used as is after the file's name. */
  whole?: boolean;
}

export function yamlPath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else out += out === '' ? String(segment) : `.${String(segment)}`;
  }
  return out;
}

/**
 * A schema's first complaint as one line: where (`artifacts[1].name`) and what. Zod's own message
 * is its issues as JSON over many lines, of which a refusal that kept the first showed only `[`.
 */
export function firstIssueText(error: { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> }, fallback: string): string {
  const issue = error.issues[0];
  if (!issue) return fallback;
  const where = yamlPath(issue.path);
  return where ? `${where}: ${issue.message}` : issue.message;
}

function valueAt(root: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  let current = root;
  for (const segment of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<PropertyKey, unknown>)[segment];
  }
  return current;
}

/** The YAML type name of a value, as a reader of the file thinks of it. */
export function yamlTypeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'sequence';
  if (typeof value === 'object') return 'mapping';
  if (typeof value === 'bigint') return 'number';
  // `1e400` reads as infinity, `.nan` as not a number: neither is the number a field asks for.
  if (typeof value === 'number' && !Number.isFinite(value)) return Number.isNaN(value) ? 'not-a-number (.nan)' : 'a number too large to hold (infinite)';
  return typeof value;
}

function expectedName(expected: string): string {
  switch (expected) {
    case 'int':
      return 'integer';
    case 'array':
      return 'sequence';
    case 'object':
    case 'record':
      return 'mapping';
    default:
      return expected;
  }
}

export interface IssueContext {
  /** `murmur.yaml`, as named in messages. */
  file: string;
  source: YamlSource;
  /** Top-level fields whose absence is E-MAN-001 rather than E-MAN-003. */
  requiredTopLevel: ReadonlySet<string>;
  /**
   * How a refusal names the key, by section: `invalid capability config for
   * 'capabilities.limits.memory_bytes'`, `invalid artifact declaration at index 2 ('artifacts[2].runtime')`.
   */
  describeKey(path: ReadonlyArray<PropertyKey>, dotted: string): string;
}

export function issueToError(issue: z.core.$ZodIssue, context: IssueContext): MurmurError {
  const path = issue.path;
  const dotted = yamlPath(path);
  const params = (issue as { params?: IssueParams }).params ?? {};
  const raw = valueAt(context.source.value, path);
  const keyPath = path.filter((segment): segment is string | number => typeof segment !== 'symbol');
  // A missing key has no line of its own: point at the block it is missing from, if any.
  const line = raw === undefined ? (keyPath.length > 1 ? context.source.lineOf(keyPath.slice(0, -1)) : undefined) : context.source.lineOf(keyPath);
  const at = line === undefined ? '' : ` (line ${line})`;
  const make = (code: ErrorCode, message: string): MurmurError => new MurmurError(code, `${message}${at}`, { path: dotted });

  if (params.whole) return make(params.murmurCode ?? 'E-MAN-003', `${context.file}: ${issue.message}`);

  if (issue.code === 'invalid_type' && raw === undefined) {
    if (path.length === 1 && context.requiredTopLevel.has(String(path[0]))) {
      return make('E-MAN-001', `${context.file}: missing required field '${dotted}'`);
    }
    return make(params.murmurCode ?? 'E-MAN-003', `${context.file}: ${context.describeKey(path, dotted)}: missing required field`);
  }
  if (issue.code === 'invalid_type') {
    const expected = expectedName((issue as { expected: string }).expected);
    const got = expected === 'integer' && typeof raw === 'number' ? `number ${raw}` : yamlTypeName(raw);
    return make('E-MAN-003', `${context.file}: field '${dotted}' has invalid type (expected ${expected}, got ${got})`);
  }
  if (issue.code === 'invalid_value') {
    const values = (issue as { values: unknown[] }).values.map(String).join(', ');
    return make('E-MAN-003', `${context.file}: ${context.describeKey(path, dotted)}: must be one of: ${values}; got '${String(raw)}'`);
  }
  return make(params.murmurCode ?? 'E-MAN-003', `${context.file}: ${context.describeKey(path, dotted)}: ${issue.message}`);
}
