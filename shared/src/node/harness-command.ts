import { accessSync, constants, realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import { MurmurError } from '../errors.js';

/**
 * Where `inference.command` (a harness CLI, `transport: process`) is, decided before anything is
 * staged: a bare name is looked up on the launching side's `PATH`, a path is taken as written.
 * What comes back is the real file, because the sandbox makes that file executable, not the
 * symlink a package manager put on `PATH`.
 */
export interface HarnessCommand {
  dialect: 'claude-code';
  /** The executable the symlinks lead to. */
  binary: string;
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

export function locateHarness(command: string, pathVariable: string | undefined): HarnessCommand {
  if (path.basename(command) === 'codex') {
    throw new MurmurError('E-RUN-007', `agent loop failed: the Codex harness dialect (inference.command '${command}') is not supported by this runtime`, {
      hint: 'use Claude Code (inference.command: claude), or transport: http with a driver artifact',
      path: 'inference.command',
    });
  }
  let found: string | undefined;
  if (command.includes('/')) found = executable(command) ? path.resolve(command) : undefined;
  else
    for (const dir of (pathVariable ?? '').split(':')) {
      if (dir === '') continue;
      const candidate = path.join(dir, command);
      if (executable(candidate)) {
        found = candidate;
        break;
      }
    }
  if (!found) {
    throw new MurmurError(
      'E-RUN-006',
      command.includes('/') ? `harness command '${command}' is not an executable file` : `harness command '${command}' is not on PATH`,
      {
        hint:
          path.basename(command) === 'claude'
            ? 'install Claude Code (npm install -g @anthropic-ai/claude-code) or give inference.command its full path'
            : 'install the harness, or give inference.command its full path',
        path: 'inference.command',
      },
    );
  }
  return { dialect: 'claude-code', binary: realpathSync(found) };
}
