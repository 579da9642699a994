#!/usr/bin/env node
// The `mur` entry point. A committed shim so `npx mur` resolves before and after a build. It runs
// the bundled CLI when the build produced one (it starts several times faster), else the modules.
import { existsSync } from 'node:fs';

const bundled = new URL('../dist/bundle/mur.mjs', import.meta.url);
const { main } = await import(existsSync(bundled) ? bundled.href : new URL('../dist/main.js', import.meta.url).href);

process.exitCode = await main(process.argv);
