import { buildArtifact } from '@murmur/shared/artifacts';
import { type Output, oneLine } from '../output.js';

export async function buildCommand(source: string, options: { output?: string; json?: boolean }, output: Output): Promise<void> {
  const result = await buildArtifact(source, options.output === undefined ? {} : { output: options.output });
  for (const warning of result.warnings) output.warn(warning);
  if (options.json) {
    output.out(
      JSON.stringify({
        path: result.outputPath,
        name: result.name,
        version: result.version,
        kind: result.kind,
        runtime: result.packaging,
        sha256: result.sha256,
        entries: result.entries,
      }),
    );
    return;
  }
  output.out(`Built artifact: ${oneLine(result.outputPath)}`);
}
