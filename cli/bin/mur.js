#!/usr/bin/env node
// The `mur` entry point. A committed shim so `npx mur` resolves before and after a build;
// the command itself is compiled TypeScript.
import { main } from '../dist/main.js';

process.exitCode = await main(process.argv);
