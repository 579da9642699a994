import { defineConfig } from 'vitest/config';

/**
 * `npm run test:containers`: the stack in containers (test/containers), built by `npm run images`
 * and brought up from docker-compose.yml. Slow by nature, so kept out of `npm test`, and run by
 * `.ci/run` after it. One file at a time: the suite owns the Docker daemon while it runs.
 */
export default defineConfig({
  resolve: { conditions: ['murmur-source'] },
  ssr: { resolve: { conditions: ['murmur-source'] } },
  test: {
    include: ['test/containers/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 180_000,
    hookTimeout: 900_000,
    pool: 'forks',
    fileParallelism: false,
  },
});
