import { describe, expect, it } from 'vitest';
import { timelineEntry } from '../src/dashboard/timeline.js';

describe('a timeline’s egress line', () => {
  it('shows a sealed sandbox’s host:port connection as it is, and a URL’s scheme and authority without its path', () => {
    const label = (target: string, kind = 'tcp') => timelineEntry({ event_type: 'egress', kind, target, decision: 'allowed', timestamp: 1 }).label;
    expect(label('api.example.com:443')).toBe('egress tcp · api.example.com:443');
    expect(label('db.internal:5432')).toBe('egress tcp · db.internal:5432');
    expect(label('10.0.0.5:8080')).toBe('egress tcp · 10.0.0.5:8080');
    expect(label('https://api.example.com/v1/secret?key=x', 'http')).toBe('egress http · https://api.example.com');
  });
});
