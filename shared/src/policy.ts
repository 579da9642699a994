import * as z from 'zod';
import { type CapsuleManifest, ContainmentSchema } from './manifest/capsule.js';

/**
 * The capsule-wide ceiling with every default applied: what the executor enforces and what
 * `session_start.effective_grants` records. Derived once from the manifest by the stager, so the
 * executor never re-decides a default.
 */

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

export const DEFAULT_LIMITS = {
  memory_bytes: 512 * MiB,
  table_elements: 100_000,
  instances: 1_000,
  deadline_seconds: 600,
} as const;

export const DEFAULT_RESOURCES = {
  max_processes: 128,
  max_open_files: 1024,
  max_file_size_bytes: 4 * GiB,
  cpu_seconds: 3600,
  memory_bytes: 2 * GiB,
  cgroup_memory_bytes: 4 * GiB,
  cgroup_pids_max: 256,
  cgroup_cpu_percent: 200,
  cgroup_io_bytes_per_sec: 100 * MiB,
  workdir_max_bytes: 10 * GiB,
} as const;

const count = z.number().int().positive();

export const CapabilityPolicySchema = z.object({
  network_allow: z.array(z.string()),
  unix_sockets: z.boolean(),
  /** Relative to the accessible workdir; `.` is the whole workdir. */
  filesystem_scope: z.string(),
  workdir_exec: z.boolean(),
  shell_allow: z.array(z.string()),
  shell_strip_env: z.array(z.string()),
  shell_baseline_env: z.array(z.string()),
  interpreter_runtime: z.array(z.object({ binary: z.string(), dirs: z.array(z.object({ path: z.string(), list_dir: z.boolean() })) })),
  staged_runtime: z.array(z.object({ binary: z.string(), source_path: z.string(), pin: z.string() })),
  spawn_allow: z.array(z.string()),
  env_allow: z.array(z.string()),
  /**
   * The host program a `transport: process` inference runs (`inference.command`), a subprocess as
   * much as a `shell.allow` binary is; absent for every other capsule, and on the wire from a
   * runtime that predates it.
   */
  harness_command: z.string().optional(),
  limits: z.object({ memory_bytes: count, table_elements: count, instances: count, deadline_seconds: count }),
  resources: z.object({
    max_processes: count,
    max_open_files: count,
    max_file_size_bytes: count,
    cpu_seconds: count,
    memory_bytes: count,
    cgroup_memory_bytes: count,
    cgroup_pids_max: count,
    cgroup_cpu_percent: count,
    cgroup_io_bytes_per_sec: count,
    workdir_max_bytes: count,
  }),
  containment: ContainmentSchema,
  /** Whether `limits.deadline_seconds` was written (it then binds hooks too, not just the default). */
  deadline_declared: z.boolean(),
  /**
   * Whether `filesystem.scope` was written, `.` included: upstream's categories name `filesystem`
   * for any declared scope. Absent on the wire from a runtime that predates it: not declared.
   */
  filesystem_scope_declared: z.boolean().default(false),
});
export type CapabilityPolicy = z.infer<typeof CapabilityPolicySchema>;

export function capabilityPolicy(manifest: CapsuleManifest): CapabilityPolicy {
  const capabilities = manifest.capabilities ?? {};
  return {
    network_allow: capabilities.network?.allow ?? [],
    unix_sockets: capabilities.network?.unix_sockets ?? false,
    filesystem_scope: capabilities.filesystem?.scope ?? '.',
    workdir_exec: capabilities.filesystem?.workdir_exec ?? false,
    shell_allow: capabilities.shell?.allow ?? [],
    shell_strip_env: capabilities.shell?.strip_env ?? [],
    shell_baseline_env: capabilities.shell?.baseline_env ?? [],
    interpreter_runtime: capabilities.shell?.interpreter_runtime ?? [],
    staged_runtime: capabilities.shell?.staged_runtime ?? [],
    spawn_allow: capabilities.spawn?.allow ?? [],
    env_allow: capabilities.env?.allow ?? [],
    ...(manifest.inference?.transport === 'process' && manifest.inference.command !== undefined ? { harness_command: manifest.inference.command } : {}),
    limits: { ...DEFAULT_LIMITS, ...stripUndefined(capabilities.limits ?? {}) },
    resources: { ...DEFAULT_RESOURCES, ...stripUndefined(capabilities.resources ?? {}) },
    containment: capabilities.containment ?? 'advisory',
    deadline_declared: capabilities.limits?.deadline_seconds !== undefined,
    filesystem_scope_declared: capabilities.filesystem?.scope !== undefined,
  };
}

function stripUndefined<T extends object>(value: T): { [K in keyof T]: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as { [K in keyof T]: Exclude<T[K], undefined> };
}
