import { promises as fs } from 'node:fs';
import path from 'node:path';
import { parse as parseWat } from '@bytecodealliance/jco';
import { describe, expect, it } from 'vitest';
import { precompileCoreModules } from '../src/host/guest-runner.js';
import type { HostComponent } from '../src/host/protocol.js';
import { tempDir } from '../../../test/support/fs.js';

describe('compiling a component ahead of its run (a pooled host told what to expect)', () => {
  it('a head start the memory cap refuses is dropped without an unhandled rejection', async () => {
    // The failure must surface from the run that uses the module, never from the head start: an
    // unhandled rejection ends the capsule host before its session has even started.
    const scratch = await tempDir('murmur-precompile-');
    const unhandled: unknown[] = [];
    const listen = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', listen);
    try {
      await fs.writeFile(path.join(scratch.dir, 'core.wasm'), await parseWat('(module (memory 4))'));
      const component = { bundle_dir: scratch.dir, entry: 'component.js', core_modules: ['core.wasm'], imports: [], exports: [] } as unknown as HostComponent;
      precompileCoreModules(component, 2 * 65_536);
      // Long enough for the file to be read and the cap to refuse the 4-page minimum.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', listen);
      await scratch.cleanup();
    }
  });
});
