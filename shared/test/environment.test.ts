import { describe, expect, it } from 'vitest';
import { harnessEnvironment, isGivenToCapsules, isGivenToHarness } from '../src/environment.js';

describe('what of a launcher’s environment reaches what', () => {
  it('gives a harness, or a delegated child, credential-shaped names but never the runtime’s own nor what shell.strip_env strips', () => {
    const stripped = ['QA_*', '*_SECRET'];
    expect(isGivenToHarness('ANTHROPIC_API_KEY', stripped)).toBe(true);
    expect(isGivenToHarness('GITHUB_TOKEN', stripped)).toBe(true);
    expect(isGivenToHarness('LANG', stripped)).toBe(true);
    for (const name of ['QA_PLAIN', 'DB_SECRET', 'MURMUR_NATS_URL', 'OTEL_EXPORTER_OTLP_HEADERS']) expect(isGivenToHarness(name, stripped), name).toBe(false);
  });

  it('gives a capsule’s code neither credential-shaped names nor the runtime’s own nor what is stripped', () => {
    expect(isGivenToCapsules('LANG', ['QA_*'])).toBe(true);
    for (const name of ['GITHUB_TOKEN', 'ANTHROPIC_API_KEY', 'QA_PLAIN', 'MURMUR_DOOR_AUTH']) expect(isGivenToCapsules(name, ['QA_*']), name).toBe(false);
  });

  it('gives a harness, or a delegated child, what env.allow names and the launcher set, as far as isGivenToHarness lets it through', () => {
    const host = { ANTHROPIC_API_KEY: 'k', QA_PLAIN: 'stripped', LANG: 'C', MURMUR_NATS_URL: 'nats://x', UNLISTED: 'u' };
    const policy = { env_allow: ['ANTHROPIC_API_KEY', 'QA_PLAIN', 'LANG', 'MURMUR_NATS_URL', 'ABSENT'], shell_strip_env: ['QA_*'] };
    expect(harnessEnvironment(policy, host)).toEqual({ ANTHROPIC_API_KEY: 'k', LANG: 'C' });
  });
});
