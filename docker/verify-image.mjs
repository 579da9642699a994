// Run by `npm run images` in every runtime image it builds (`docker run --rm --network none
// IMAGE node docker/verify-image.mjs`): checks what the services need is there and loads, so a
// package the pruned node_modules lacks fails the build, not the first request.
import { execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import os from 'node:os';

const checks = [];
async function check(what, fn) {
  try {
    const detail = await fn();
    checks.push(`ok   ${what}${detail ? `: ${detail}` : ''}`);
  } catch (error) {
    checks.push(`FAIL ${what}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

await check('user', () => {
  const user = os.userInfo();
  return `${user.username} (${user.uid}:${user.gid}), home ${user.homedir}`;
});
await check('environment', () => {
  if (process.env.MURMUR_HOME !== '/var/lib/murmur' || process.env.NODE_ENV !== 'production')
    throw new Error(`MURMUR_HOME=${process.env.MURMUR_HOME} NODE_ENV=${process.env.NODE_ENV}`);
  return `MURMUR_HOME=${process.env.MURMUR_HOME} NODE_ENV=${process.env.NODE_ENV}, node ${process.version}`;
});
await check('writable directories', () => {
  for (const dir of ['/var/lib/murmur', '/var/lib/murmur/registry', '/data']) accessSync(dir, constants.W_OK);
  return '/var/lib/murmur, /var/lib/murmur/registry, /data';
});
await check('tools', () =>
  [
    ['bwrap', '--version'],
    ['nats-server', '--version'],
    ['setpriv', '--version'],
  ]
    .map(([tool, flag]) => execFileSync(tool, [flag], { encoding: 'utf8' }).trim().split('\n')[0])
    .join('; '),
);
for (const name of ['@murmur/wit', '@murmur/shared', '@murmur/roost', '@murmur/stager', '@murmur/executor', '@murmur/door', '@murmur/watcher', '@murmur/cli']) {
  await check(`import ${name}`, async () => {
    await import(name);
  });
}
await check('default artifacts', async () => {
  const { defaultArtifactsDir } = await import('@murmur/shared/node');
  const dir = defaultArtifactsDir();
  if (!dir) throw new Error('no drivers/dist/store found above @murmur/shared');
  return dir;
});
await check('shipped transpiled components', async () => {
  const { shippedCacheDir } = await import('@murmur/shared/node');
  const dir = shippedCacheDir();
  if (!dir) throw new Error('no drivers/dist/transpiled found above @murmur/shared');
  return dir;
});
await check('jco transpile', async () => {
  const { parse, transpile } = await import('@bytecodealliance/jco');
  const { TRANSPILE_OPTIONS } = await import('@murmur/shared');
  const component = await parse(
    '(component (core module $m (func (export "f"))) (core instance $i (instantiate $m)) (func $f (canon lift (core func $i "f"))) (export "f" (func $f)))',
  );
  const result = await transpile(component, { ...TRANSPILE_OPTIONS, name: 'verify' });
  return `${Object.keys(result.files).length} files`;
});

process.stdout.write(`${checks.join('\n')}\n`);
process.exitCode = checks.some((line) => line.startsWith('FAIL')) ? 1 : 0;
