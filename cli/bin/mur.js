#!/usr/bin/env -S node --max-semi-space-size=1
// The `mur` entry point. A committed shim so `npx mur` resolves before and after a build. It runs
// the bundled CLI when the build produced one (it starts several times faster), else the modules.
// The young generation is kept at 1 MiB a semi-space: a run allocates its start-up (schemas,
// staging, the in-process services) in a burst that would otherwise grow it to 16 MiB for
// nothing, ~6 MB of peak RSS, and a smaller nursery is no slower for a short-lived CLI
// (`npm run bench:run`). Run as `node mur.js`, the flag does not apply.
import { existsSync } from 'node:fs';

const bundled = new URL('../dist/bundle/mur.mjs', import.meta.url);
const { main } = await import(existsSync(bundled) ? bundled.href : new URL('../dist/main.js', import.meta.url).href);

process.exitCode = await main(process.argv);
