import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { repositoryRoot } from './processes.js';

/**
 * The real Claude Code, for the harness transport's tests: its npm package ships a native binary
 * (~370 MB), so it is installed at test time into the repository's ignored cache, once per
 * version, into a temporary directory renamed into place (a run that dies half-way leaves nothing
 * a later run would mistake for an install).
 */

export const CLAUDE_CODE_VERSION = '2.1.332';

const run = promisify(execFile);

/** The directory holding the `claude` executable, installing it first when this cache has none. */
export async function claudeCodeBin(): Promise<string> {
  const root = path.join(repositoryRoot, '.cache', 'claude-code', CLAUDE_CODE_VERSION);
  const bin = path.join(root, 'node_modules', '.bin');
  if (await answers(path.join(bin, 'claude'))) return bin;
  const staging = `${root}.installing-${process.pid}`;
  await fs.rm(staging, { recursive: true, force: true });
  await fs.mkdir(staging, { recursive: true });
  await fs.writeFile(path.join(staging, 'package.json'), JSON.stringify({ name: 'claude-code-cache', private: true }));
  await run('npm', ['install', '--no-audit', '--no-fund', '--save-exact', `@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}`], {
    cwd: staging,
    timeout: 600_000,
    maxBuffer: 16 * 1024 * 1024,
  });
  if (!(await answers(path.join(staging, 'node_modules', '.bin', 'claude'))))
    throw new Error(`@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION} installed, but its claude does not answer --version`);
  await fs.rm(root, { recursive: true, force: true });
  await fs.rename(staging, root);
  return bin;
}

async function answers(claude: string): Promise<boolean> {
  try {
    const { stdout } = await run(claude, ['--version'], { timeout: 30_000 });
    return stdout.includes(CLAUDE_CODE_VERSION);
  } catch {
    return false;
  }
}
