/** drivers/common.js: the helpers every driver's source starts with. */
export const COMMON_PATH: URL;
/** The names a source declares at top level. */
export function topLevelNames(source: string): string[];
/** Evaluates sources in order as one body and returns their top-level bindings by name; refuses a name declared twice. */
export function loadSources(paths: ReadonlyArray<string | URL>): Record<string, any>;
/** Evaluates common.js alone and returns its top-level bindings by name. */
export function loadCommon(): Record<string, any>;
/** Evaluates common.js followed by a driver's core.js and returns the top-level bindings of both by name. */
export function loadCore(path: string | URL): Record<string, any>;
