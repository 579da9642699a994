import type { StagedPlan } from '@murmur/shared';
import { describe, expect, it } from 'vitest';
import { launchEnvironment } from '../src/session-launch.js';

describe('what a launch carries of the launcher’s environment', () => {
  const plan = {
    policy: { env_allow: ['GREETING', 'MURMUR_ROOST_TOKEN'], shell_baseline_env: ['MURMUR_DOOR_AUTH', 'OTEL_EXPORTER_OTLP_HEADERS'] },
    secret_env: ['ANTHROPIC_API_KEY', 'MURMUR_NATS_URL'],
  } as unknown as StagedPlan;
  const launcher = {
    PATH: '/usr/bin:/bin',
    GREETING: 'hello',
    ANTHROPIC_API_KEY: 'sk-the-capsules-own',
    NOT_NAMED: 'nope',
    MURMUR_ROOST_TOKEN: 'roost-secret',
    MURMUR_DOOR_AUTH: 'door-secret',
    MURMUR_NATS_URL: 'nats://bus-secret@127.0.0.1:4222',
    OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer otlp-secret',
    MURMUR_FORMATION_ID: 'formation-7',
  };

  it('is what the capsule may be given, named by its allowlist and its ${VAR}s, and the formation id its hooks get: never the subprocess baseline, which is the executor’s', () => {
    expect(launchEnvironment(plan, launcher)).toEqual({
      GREETING: 'hello',
      ANTHROPIC_API_KEY: 'sk-the-capsules-own',
      MURMUR_FORMATION_ID: 'formation-7',
    });
  });

  it('never holds one of the runtime’s own settings, however the manifest names it: the launch crosses the bus and is copied into delegated children', () => {
    expect(JSON.stringify(launchEnvironment(plan, launcher))).not.toMatch(/secret/);
  });
});
