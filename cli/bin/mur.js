#!/usr/bin/env -S node --max-semi-space-size=1
// `mur` from its bundle: what `cli/bin/mur` runs when there is no startup snapshot for this node
// (or MURMUR_SNAPSHOT=off), and what `node cli/bin/mur.js` runs. A committed shim, so it resolves
// before and after a build. It runs the bundled CLI when the build produced one (it starts several
// times faster), else the modules. Run through its shebang it gets the launcher's node flag (a
// 1 MiB young-generation semi-space, see cli/bin/mur); run as `node mur.js`, it does not.
import { existsSync } from 'node:fs';

const bundled = new URL('../dist/bundle/mur.mjs', import.meta.url);
const { main } = await import(existsSync(bundled) ? bundled.href : new URL('../dist/main.js', import.meta.url).href);

const code = await main(process.argv);
// An exit code set while the command ran (stdout that could not be written) is not taken back.
process.exitCode = Math.max(code, Number(process.exitCode ?? 0));
