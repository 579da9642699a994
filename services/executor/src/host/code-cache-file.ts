/**
 * Where the V8 code cache of a script file is kept: beside it, named for the node that reads it. V8
 * accepts a cache only from its own version and flags, so a node of another version finds no file
 * rather than one it refuses. A component's glue (`glue.ts`) and the bundled guest worker
 * (`worker-code-cache.ts`) keep theirs so.
 */
export function codeCacheFile(file: string): string {
  return `${file}.node-${process.version}-${process.arch}.v8cache`;
}
