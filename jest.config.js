// Unit tests (*.unit.test.ts) need nothing running; integration and end-to-end
// tests (*.int.test.ts, *.e2e.test.ts) use PostgreSQL and RabbitMQ from
// DATABASE_URL / AMQP_URL / REDIS_URL, which `npm test` (scripts/test.mjs) finds.
const shared = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.jest.json' }],
  },
  moduleNameMapper: {
    '^@lab/([a-z-]+)$': [
      '<rootDir>/libs/$1/src/index.ts',
      '<rootDir>/services/$1/src/index.ts',
      '<rootDir>/services/gateway/packages/$1/src/index.ts',
      '<rootDir>/$1/src/index.ts',
    ],
    // a package's light subpath export (package.json "exports"), e.g. @lab/jobs/job-types
    '^@lab/([a-z-]+)/([a-z-]+)$': [
      '<rootDir>/libs/$1/src/$2.ts',
      '<rootDir>/services/$1/src/$2.ts',
      '<rootDir>/services/gateway/packages/$1/src/$2.ts',
      '<rootDir>/$1/src/$2.ts',
    ],
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  testPathIgnorePatterns: ['/node_modules/', '/dist/'],
};

module.exports = {
  // testTimeout is a global option: project-level values are ignored.
  testTimeout: 60_000,
  projects: [
    {
      ...shared,
      displayName: 'unit',
      testMatch: ['<rootDir>/{libs,services,services/gateway/packages}/*/test/**/*.unit.test.ts', '<rootDir>/testing/test/**/*.unit.test.ts'],
    },
    {
      ...shared,
      displayName: 'integration',
      testMatch: ['<rootDir>/{libs,services,services/gateway/packages}/*/test/**/*.{int,e2e}.test.ts', '<rootDir>/testing/test/**/*.{int,e2e}.test.ts'],
      globalSetup: '<rootDir>/testing/src/global-setup.ts',
      globalTeardown: '<rootDir>/testing/src/global-teardown.ts',
    },
  ],
};
