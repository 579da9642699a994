// Builds murmur-confine (tools/confine/murmur-confine.c), the small native helper the executor
// needs for sealed containment: a network namespace, Landlock and seccomp, none of which Node
// can do. Statically linked, so it runs in any sandbox without a loader or libraries of its own.
// Rebuilt only when its source is newer than the binary. Without a C compiler the build goes on
// and says so: the executor then runs without sealed containment, and refuses what needs it.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const source = path.join(root, 'tools', 'confine', 'murmur-confine.c');
const output = path.join(root, 'services', 'executor', 'dist', 'confine', 'murmur-confine');

if (existsSync(output) && statSync(output).mtimeMs >= statSync(source).mtimeMs) process.exit(0);
const compiler = process.env.CC?.trim() || 'cc';
mkdirSync(path.dirname(output), { recursive: true });
const temporary = `${output}.${process.pid}.tmp`;
const result = spawnSync(compiler, ['-std=gnu11', '-O2', '-Wall', '-Wextra', '-Werror', '-static', '-o', temporary, source], {
  stdio: ['ignore', 'inherit', 'inherit'],
});
if (result.error || result.status !== 0) {
  rmSync(temporary, { force: true });
  process.stderr.write(
    `warning: murmur-confine was not built (${result.error ? `${compiler}: ${result.error.message}` : `${compiler} exited with ${result.status}`}); the executor will refuse 'sealed' containment. Install a C compiler with static glibc (apt-get install gcc libc6-dev) and run npm run build again.\n`,
  );
  process.exit(0);
}
renameSync(temporary, output);
process.stdout.write(`built ${path.relative(root, output)}\n`);
