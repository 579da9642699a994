import { Lexer, LineCounter, Parser, YAMLParseError, isPair, isScalar, parseDocument, visit } from 'yaml';
import { MurmurError } from '../errors.js';

/**
 * A parsed YAML file that still knows where each value came from, so a refusal can name the
 * line of the offending key as well as its path.
 */
export interface YamlSource {
  readonly value: unknown;
  /** 1-based line of the node at `path`, or of its nearest ancestor that exists. */
  lineOf(path: ReadonlyArray<string | number>): number | undefined;
}

/**
 * Keys whose values are text even when they look like numbers: `version: 1.0` is the string
 * "1.0", never the number 1 (which would make `1.0` and `1.00` the same version).
 */
const TEXT_VALUED_KEYS = new Set(['name', 'version', 'resolved_version', 'mur_version', 'model', 'wasm']);

/**
 * The most lexical tokens a file is read with. A manifest with every field written out has a few
 * thousand; composing is what costs (~10 µs and hundreds of bytes a token), and a 1.6 KB archive
 * inflating to a 1 MiB list of a quarter million items held roost's one thread for seconds and
 * took a gigabyte. Counting the lexer's tokens first costs ~0.4 µs each.
 */
export const MAX_YAML_TOKENS = 100_000;
/**
 * The deepest a value nests, counted on the parser's syntax tree: a block list (`- - - x`), an
 * explicit key (`? ? x`) and a flow collection (`[[x]]`) each count. A manifest's deepest value is
 * a handful down; composing recurses once a level, and a 2 KB run of `- ` ended the process that
 * read it (V8 out of memory, no error to catch: roost, for anyone who could post an archive).
 */
export const MAX_YAML_DEPTH = 64;

/**
 * Refuses, before any of it is composed, a YAML text that would cost more to read than any file
 * of its kind needs: past `MAX_YAML_TOKENS`, or nested past `MAX_YAML_DEPTH`.
 */
export function refuseCostlyYaml(text: string, file: string): void {
  let tokens = 0;
  for (const _ of new Lexer().lex(text)) {
    tokens += 1;
    if (tokens > MAX_YAML_TOKENS) {
      throw new MurmurError('E-MAN-002', `${file}: more than ${MAX_YAML_TOKENS} YAML tokens, far more than any such file holds; it is not read`, {
        path: file,
        hint: 'a long text belongs in a file of its own (inference.system_prompt_file), and long lists are written once, not generated',
      });
    }
  }
  if (syntaxDepth(text) > MAX_YAML_DEPTH) {
    throw new MurmurError('E-MAN-002', `${file}: values nested more than ${MAX_YAML_DEPTH} deep; it is not read`, {
      path: file,
      hint: 'no field of this file nests more than a few levels: look for an unclosed [ or {, or a run of "- " or "? "',
    });
  }
}

/** How deep the parser's syntax tree nests, walked with a stack of its own (the parser's is one too). */
function syntaxDepth(text: string): number {
  type Node = { type?: string; value?: unknown; items?: Array<{ key?: unknown; value?: unknown }> };
  const pending: Array<[Node | undefined, number]> = [];
  for (const token of new Parser().parse(text)) pending.push([token as Node, 0]);
  let deepest = 0;
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [node, depth] = next;
    if (node === undefined || node === null || typeof node !== 'object') continue;
    deepest = Math.max(deepest, depth);
    // A document holds one value; a collection's items each hold a key and a value a level down.
    if (node.type === 'document') pending.push([node.value as Node, depth]);
    else if (Array.isArray(node.items)) {
      for (const item of node.items) pending.push([item.key as Node, depth + 1], [item.value as Node, depth + 1]);
    }
  }
  return deepest;
}

export function parseYamlSource(text: string, file = 'murmur.yaml'): YamlSource {
  refuseCostlyYaml(text, file);
  const lineCounter = new LineCounter();
  // Keys are checked here (for duplicates, and for keys that are no names), in one pass: the parser's own check compares every key
  // of a mapping with every other, and a 1 MB manifest of one mapping held a stager for minutes.
  const document = parseDocument(text, { lineCounter, prettyErrors: true, uniqueKeys: false });
  const [firstError] = document.errors.length > 0 ? document.errors : keyErrors(document, lineCounter);
  if (firstError) {
    const position = firstError.linePos?.[0];
    const where = position ? ` at line ${position.line}, column ${position.col}` : '';
    const detail = firstError.message.split('\n')[0]?.replace(/ at line \d+, column \d+:?$/, '') ?? firstError.message;
    throw new MurmurError('E-MAN-002', `${file}: YAML syntax error${where}: ${detail}`, {
      path: file,
      hint: `fix the YAML syntax; a YAML linter or \`yq . ${file}\` shows where it breaks`,
    });
  }
  visit(document, {
    Pair(_, pair) {
      if (!isScalar(pair.key) || !TEXT_VALUED_KEYS.has(String(pair.key.value))) return;
      const value = pair.value;
      if (isScalar(value) && value.value !== null && typeof value.value !== 'string' && typeof value.source === 'string') {
        value.value = value.source;
      }
    },
  });
  let value: unknown;
  try {
    value = document.toJS({ maxAliasCount: 100 });
  } catch (error) {
    // yaml refuses a document whose aliases would expand past the bound (a "billion laughs").
    const message = (error as Error).message.split('\n')[0] ?? '';
    throw new MurmurError('E-MAN-002', `${file}: ${message}`, {
      path: file,
      hint: /alias/i.test(message)
        ? 'write the values out instead of through so many aliases (*name); a file of this size needs none'
        : 'fix the YAML; a YAML linter or `yq .` shows what it makes of the file',
    });
  }
  return {
    value,
    lineOf(path) {
      for (let length = path.length; length >= 0; length -= 1) {
        const node = document.getIn(path.slice(0, length), true) as { range?: [number, number, number] } | undefined;
        const candidate = length === path.length && length > 0 ? findKeyNode(document, path) : node;
        const range = (candidate as { range?: [number, number, number] } | undefined)?.range;
        if (range) return lineCounter.linePos(range[0]).line;
      }
      return undefined;
    },
  };
}

/** The key node of the pair at `path`, so a refusal points at `memory_bytes:`, not its value. */
function findKeyNode(document: ReturnType<typeof parseDocument>, path: ReadonlyArray<string | number>): unknown {
  const parent = path.length === 1 ? document.contents : document.getIn(path.slice(0, -1), true);
  const last = path[path.length - 1];
  const items = (parent as { items?: unknown[] } | null)?.items;
  if (!Array.isArray(items)) return undefined;
  if (typeof last === 'number') return items[last];
  for (const item of items) {
    if (isPair(item) && isScalar(item.key) && item.key.value === last) return item.key;
  }
  return undefined;
}

/**
 * The first key of a mapping that the file's value could not keep as written: one that repeats an
 * earlier key of the same mapping, as the parser would have reported it (a scalar key equal by
 * value), or one that is itself a list, a mapping or an alias, which no field of these files is
 * named by and which the conversion to plain objects would turn into text with a warning of Node's
 * on stderr.
 */
function keyErrors(document: ReturnType<typeof parseDocument>, lineCounter: LineCounter): YAMLParseError[] {
  let found: YAMLParseError | undefined;
  const refuse = (key: { range?: [number, number, number] | null }, code: 'DUPLICATE_KEY' | 'NON_STRING_KEY', message: string): typeof visit.BREAK => {
    const at = key.range?.[0] ?? 0;
    found = new YAMLParseError([at, at + 1], code, message);
    found.linePos = [lineCounter.linePos(at)];
    return visit.BREAK;
  };
  visit(document, {
    Map(_, map) {
      const seen = new Set<unknown>();
      for (const item of map.items) {
        if (item.key === null || item.key === undefined) continue;
        if (!isScalar(item.key))
          return refuse(item.key as { range?: [number, number, number] }, 'NON_STRING_KEY', 'a key must be a plain name, not a list, a mapping or an alias');
        const key = item.key.value;
        if (!seen.has(key)) {
          seen.add(key);
          continue;
        }
        return refuse(item.key, 'DUPLICATE_KEY', 'Map keys must be unique');
      }
      return undefined;
    },
  });
  return found ? [found] : [];
}
