import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Tests import workspace packages from their TypeScript sources (the `murmur-source` export
  // condition); processes the tests start run the compiled `dist/`, which `npm test` builds first.
  resolve: { conditions: ['murmur-source'] },
  ssr: { resolve: { conditions: ['murmur-source'] } },
  test: {
    include: ['shared/test/**/*.test.ts', 'drivers/test/**/*.test.ts', 'services/*/test/**/*.test.ts', 'cli/test/**/*.test.ts', 'test/**/*.test.ts'],
    // The container suite has its own entry point (`npm run test:containers`, vitest.containers.config.ts).
    exclude: ['test/containers/**', '**/node_modules/**'],
    globalSetup: ['test/support/global-setup.ts'],
    setupFiles: ['test/support/stop-leftovers.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Two files at a time, whatever the cores: the suites mostly wait on the processes, sandboxes
    // and servers they start, so two overlap well even on two cores (the whole run in ~400 s
    // rather than ~720 s there), and every test picks its own ports and directories.
    maxWorkers: 2,
  },
});
