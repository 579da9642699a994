// Loads the drivers' plain-JS sources in node for tests. common.js and each core.js have no
// imports and no exports (the build concatenates common.js, a core.js and the shared guest.js into
// one module), so they are evaluated together as one function body in strict mode that returns
// every top-level function and constant they declare.
import { readFileSync } from 'node:fs';

const DECLARATION = /^(?:async\s+)?function\*?\s+([A-Za-z_$][\w$]*)|^(?:const|let|class)\s+([A-Za-z_$][\w$]*)/gm;

/** drivers/common.js: the helpers every driver's source starts with. */
export const COMMON_PATH = new URL('./common.js', import.meta.url);

/** The names a source declares at top level (declarations starting a line). */
export function topLevelNames(source) {
  const names = [];
  for (const match of source.matchAll(DECLARATION)) names.push(match[1] ?? match[2]);
  return names;
}

/**
 * Evaluates the sources at `paths` (paths or file URLs), in order, as one body, and returns their
 * top-level bindings by name. A name declared twice is refused: in the module the build makes of
 * them it would be a redeclaration, which a function body lets pass for functions.
 */
export function loadSources(paths) {
  const sources = paths.map((path) => readFileSync(path, 'utf8'));
  const names = sources.flatMap(topLevelNames);
  const twice = [...new Set(names.filter((name, index) => names.indexOf(name) !== index))];
  if (twice.length > 0) throw new Error(`declared more than once at top level: ${twice.join(', ')}`);
  return new Function(`'use strict';\n${sources.join('\n')}\nreturn { ${names.join(', ')} };`)();
}

/** Evaluates common.js alone and returns its top-level bindings by name. */
export function loadCommon() {
  return loadSources([COMMON_PATH]);
}

/**
 * Evaluates common.js followed by the core.js at `path` (a path or file URL), as the build
 * concatenates them, and returns the top-level bindings of both by name.
 */
export function loadCore(path) {
  return loadSources([COMMON_PATH, path]);
}
