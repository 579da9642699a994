import { afterAll } from 'vitest';
import { stopLeftovers } from './processes.js';

// After each test file: whatever a test started and did not see end (a test that timed out is
// abandoned without its `finally`) is killed here, rather than outliving the run.
afterAll(() => stopLeftovers());
