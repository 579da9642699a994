import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { repositoryRoot } from './processes.js';

/**
 * The compose stack as the container suite and `bench/stack.ts` drive it: `npm run images`, then
 * `docker-compose` (v1, which is what Debian ships) on `docker-compose.yml` plus the caller's
 * override files, under a project name of the caller's, with the published ports the caller
 * chose. Every container it starts is removed by `down()`.
 */

const run = promisify(execFile);

/** `npm run images`: builds murmur/* from this checkout; its progress lines are returned. */
export async function buildImages(): Promise<string[]> {
  try {
    const { stdout } = await run(process.execPath, [path.join(repositoryRoot, 'scripts', 'images.mjs')], { cwd: repositoryRoot, maxBuffer: 64 * 1024 * 1024 });
    return stdout.split('\n').filter((line) => line.trim() !== '');
  } catch (error) {
    const failed = error as { stdout?: string; stderr?: string };
    throw new Error(`npm run images failed:\n${failed.stdout ?? ''}\n${failed.stderr ?? ''}`);
  }
}

export async function docker(...args: string[]): Promise<string> {
  const { stdout } = await run('docker', args, { maxBuffer: 64 * 1024 * 1024 });
  return stdout.trim();
}

export class ComposeProject {
  /**
   * @param name the project name (`-p`): containers are `<name>_<service>_<n>`
   * @param files compose files relative to the repository root, the base first
   * @param env what the files interpolate (published ports, image tag)
   */
  constructor(
    readonly name: string,
    readonly files: string[],
    readonly env: Record<string, string>,
  ) {}

  async compose(...args: string[]): Promise<string> {
    const fileArgs = this.files.flatMap((file) => ['-f', file]);
    const { stdout } = await run('docker-compose', ['-p', this.name, ...fileArgs, ...args], {
      cwd: repositoryRoot,
      env: { ...process.env, ...this.env },
      maxBuffer: 64 * 1024 * 1024,
    });
    return stdout;
  }

  container(service: string, index = 1): string {
    return `${this.name}_${service}_${index}`;
  }

  /** Brings the stack up and waits until every container of it reports healthy. */
  async up(timeoutMs = 180_000): Promise<void> {
    await this.compose('up', '-d');
    await this.allHealthy(timeoutMs);
  }

  async allHealthy(timeoutMs = 180_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const names = (await docker('ps', '-a', '--format', '{{.Names}}', '--filter', `label=com.docker.compose.project=${this.name}`))
        .split('\n')
        .filter(Boolean);
      const states = await Promise.all(names.map(async (name) => [name, await this.health(name)] as const));
      const waiting = states.filter(([, state]) => state !== 'healthy');
      if (names.length > 0 && waiting.length === 0) return;
      if (Date.now() > deadline)
        throw new Error(`the stack ${this.name} did not become healthy: ${waiting.map(([name, state]) => `${name} ${state}`).join(', ')}`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }

  /** Runs `count` of `service`, leaving the running ones as they are. */
  async scale(service: string, count: number): Promise<void> {
    await this.compose('up', '-d', '--scale', `${service}=${count}`, '--no-recreate', service);
    await this.allHealthy();
  }

  async down(): Promise<void> {
    await this.compose('down', '-v', '-t', '5');
  }

  async health(container: string): Promise<string> {
    return docker('inspect', '-f', '{{.State.Health.Status}}', container);
  }

  /** Every running container of `service`, by the instance id its process announced in its first log line. */
  async instances(service: string): Promise<Map<string, string>> {
    const names = (
      await docker(
        'ps',
        '--format',
        '{{.Names}}',
        '--filter',
        `label=com.docker.compose.project=${this.name}`,
        '--filter',
        `label=com.docker.compose.service=${service}`,
      )
    )
      .split('\n')
      .filter(Boolean);
    const byId = new Map<string, string>();
    for (const name of names) {
      const logs = await docker('logs', name);
      for (const line of logs.split('\n')) {
        if (!line.startsWith('{')) continue;
        const id =
          (JSON.parse(line) as { instance_id?: string; executor_id?: string }).executor_id ?? (JSON.parse(line) as { instance_id?: string }).instance_id;
        if (id) {
          byId.set(id, name);
          break;
        }
      }
    }
    return byId;
  }
}
