import { describe, expect, it } from 'vitest';
import { EGRESS_RULES_LABELLED, metricsText, prometheusMetrics } from '../src/node/metrics.js';

describe('the egress counter', () => {
  it('takes at most 256 distinct rules as labels, each at most 200 characters, and counts the rest as (other)', async () => {
    for (let index = 0; index < EGRESS_RULES_LABELLED + 50; index += 1) prometheusMetrics.egress('http', 'allowed', `rule-${index}.example.com`);
    prometheusMetrics.egress('http', 'allowed', `${'r'.repeat(5_000)}.example.com`);
    prometheusMetrics.egress('http', 'denied', undefined);
    const lines = (await metricsText()).body.split('\n').filter((line) => line.startsWith('murmur_egress_decisions_total{'));
    const rules = new Set(lines.map((line) => /rule="([^"]*)"/.exec(line)?.[1]));
    expect(rules.size).toBe(EGRESS_RULES_LABELLED + 2);
    expect(rules.has('(other)')).toBe(true);
    expect(rules.has('(none)')).toBe(true);
    expect(Math.max(...[...rules].map((rule) => rule?.length ?? 0))).toBeLessThanOrEqual(200);
    // 50 of the rules past the bound, and the long one: all counted, under (other).
    expect(lines.find((line) => line.includes('rule="(other)"'))).toMatch(/ 51$/);
  });
});
