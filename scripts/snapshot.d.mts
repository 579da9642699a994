/** scripts/snapshot.mjs: builds a V8 startup snapshot from an ES module, under the rules that file states. */
export const NODE_FLAGS: string[];
export function buildSnapshot(options: {
  entry: string;
  outDir: string;
  name: string;
  external?: string[];
}): Promise<{ blob: string | undefined; reason: string | undefined }>;
